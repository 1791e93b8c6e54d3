// Tests ops/cuda/grouped_gemm's host side without a GPU: shape validation (each refusal names what is wrong), the
// kernel table (every supported shape has its default configuration compiled), the default raster order and a plan
// refusing an uncompiled configuration before it touches the GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "ops/cuda/grouped_gemm.h"
#include "../support/config_error.h"

namespace {

using tb::DType;
using tb::testing_support::config_error;
using namespace tb::ops;

GroupedGemmShape shape(DType a, DType b, DType d, GemmLayout l, bool fast = false) {
  GroupedGemmShape s;
  s.n = 4096, s.k = 14336, s.groups = 8, s.rows = 65536;
  s.a = a, s.b = b, s.d = d, s.layout = l, s.fast_accum = fast;
  return s;
}

// Every type combination and layout the header promises.
std::vector<GroupedGemmShape> supported() {
  std::vector<GroupedGemmShape> v;
  for (GemmLayout l : {GemmLayout::abt, GemmLayout::ab, GemmLayout::atb}) {
    v.push_back(shape(DType::bf16, DType::bf16, DType::bf16, l));
    v.push_back(shape(DType::e4m3, DType::e4m3, DType::bf16, l, true));
    for (const auto& t : gemm_type_combos())
      if (tb::is_fp8(t.a)) v.push_back(shape(t.a, t.b, t.d, l));
  }
  v.push_back(shape(DType::bf16, DType::bf16, DType::f32, GemmLayout::atb));
  return v;
}

TEST(GroupedGemmShapeTest, SupportedShapesHaveTheirDefaultCompiled) {
  for (const auto& s : supported()) {
    EXPECT_EQ(config_error([&] { check_grouped_gemm_shape(s); }), "no error") << describe(s);
    const auto configs = grouped_gemm_configs(s);
    EXPECT_NE(std::find(configs.begin(), configs.end(), grouped_gemm_default_config(s)), configs.end())
        << describe(s);
  }
  std::set<std::string> names;
  for (auto c : {GroupedGemmConfig::coop_128x128_c1, GroupedGemmConfig::coop_128x256_c1,
                 GroupedGemmConfig::coop_128x256_c2, GroupedGemmConfig::pingpong_128x128_c1,
                 GroupedGemmConfig::pingpong_128x128_c2})
    names.insert(std::string(grouped_gemm_config_name(c)));
  EXPECT_EQ(names.size(), 5u);
}

// atb walks across N where D_e [n, k] has more tiles down M (Mixtral's fc1 weight gradient, n = 2 x 14336), down M
// otherwise (fc2, and ties); the layouts whose M varies with the counts walk down M.
TEST(GroupedGemmShapeTest, DefaultRaster) {
  GroupedGemmShape fc1 = shape(DType::bf16, DType::bf16, DType::bf16, GemmLayout::atb);
  fc1.n = 28672, fc1.k = 4096;
  const GroupedGemmShape fc2 = shape(DType::bf16, DType::bf16, DType::bf16, GemmLayout::atb);  // n 4096, k 14336
  GroupedGemmShape tie = fc1;
  tie.n = 2048, tie.k = 4096;  // 16 tiles of 128 down M, 16 of 256 across N
  const auto c256 = GroupedGemmConfig::coop_128x256_c1, c128 = GroupedGemmConfig::coop_128x128_c1;
  EXPECT_EQ(grouped_gemm_default_raster(fc1, c256), GroupedGemmRaster::along_n);
  EXPECT_EQ(grouped_gemm_default_raster(fc2, c256), GroupedGemmRaster::along_m);
  EXPECT_EQ(grouped_gemm_default_raster(tie, c256), GroupedGemmRaster::along_m);
  EXPECT_EQ(grouped_gemm_default_raster(tie, c128), GroupedGemmRaster::along_m);  // 16 and 32
  tie.n = 2176;  // 17 down M
  EXPECT_EQ(grouped_gemm_default_raster(tie, c256), GroupedGemmRaster::along_n);
  for (GemmLayout l : {GemmLayout::abt, GemmLayout::ab}) {
    GroupedGemmShape s = fc1;
    s.layout = l;
    EXPECT_EQ(grouped_gemm_default_raster(s, c256), GroupedGemmRaster::along_m) << gemm_layout_name(l);
  }
}

TEST(GroupedGemmShapeTest, Describe) {
  EXPECT_EQ(describe(shape(DType::e5m2, DType::e4m3, DType::f32, GemmLayout::atb)),
            "e5m2xe4m3->f32 atb n=4096 k=14336 groups=8 rows=65536");
  EXPECT_EQ(describe(shape(DType::e4m3, DType::e4m3, DType::bf16, GemmLayout::abt, true)),
            "e4m3->bf16 abt n=4096 k=14336 groups=8 rows=65536 fast_accum");
}

TEST(GroupedGemmShapeTest, RefusesBadShapes) {
  auto refusal = [](GroupedGemmShape s) { return config_error([&] { check_grouped_gemm_shape(s); }); };
  const auto bf16 = shape(DType::bf16, DType::bf16, DType::bf16, GemmLayout::abt);
  auto s = bf16;
  s.groups = 0;
  EXPECT_NE(refusal(s).find("at least 1"), std::string::npos);
  s = bf16, s.n = std::int64_t(1) << 31;
  EXPECT_NE(refusal(s).find("below 2^31"), std::string::npos);
  s = bf16, s.k = 100;
  EXPECT_NE(refusal(s).find("multiples of 8"), std::string::npos);
  s = bf16, s.n = 4104;  // a multiple of 8: fine in bf16, not in fp8
  EXPECT_EQ(refusal(s), "no error");
  s.a = s.b = DType::e4m3;
  EXPECT_NE(refusal(s).find("multiples of 16"), std::string::npos);
  s = shape(DType::e5m2, DType::e5m2, DType::bf16, GemmLayout::abt);
  EXPECT_NE(refusal(s).find("no e5m2 x e5m2"), std::string::npos);
  s = shape(DType::bf16, DType::bf16, DType::f32, GemmLayout::abt);  // fp32 output: weight gradients only
  EXPECT_NE(refusal(s).find("unsupported"), std::string::npos);
  s = shape(DType::f16, DType::f16, DType::f16, GemmLayout::abt);
  EXPECT_NE(refusal(s).find("supported are"), std::string::npos);
  s = shape(DType::bf16, DType::bf16, DType::bf16, GemmLayout::abt, true);
  EXPECT_NE(refusal(s).find("fp8 GEMMs only"), std::string::npos);
  s = shape(DType::e5m2, DType::e4m3, DType::bf16, GemmLayout::ab, true);  // fast_accum: the forward's kernel only
  EXPECT_NE(refusal(s).find("fast_accum"), std::string::npos);
  s = shape(DType::e5m2, DType::e4m3, DType::f32, GemmLayout::atb);
  s.rows = 65544;  // the transposes' row length must be a multiple of 16
  EXPECT_NE(refusal(s).find("multiple of 16"), std::string::npos);
  s.layout = GemmLayout::ab;  // other layouts read rows, any count
  EXPECT_EQ(refusal(s), "no error");
}

// Refused before the plan touches the GPU, so this runs without one.
TEST(GroupedGemmShapeTest, PlanRefusesBadShapesAndUncompiledConfigs) {
  auto s = shape(DType::bf16, DType::bf16, DType::bf16, GemmLayout::abt);
  s.k = 12;
  EXPECT_NE(config_error([&] { GroupedGemmPlan p(0, s); }).find("multiples of 8"), std::string::npos);
  s = shape(DType::e4m3, DType::e4m3, DType::f32, GemmLayout::atb);
  const std::string msg = config_error([&] { GroupedGemmPlan p(0, s, GroupedGemmConfig::pingpong_128x128_c2); });
  EXPECT_NE(msg.find("pingpong_128x128_c2 is not compiled"), std::string::npos) << msg;
  EXPECT_NE(msg.find(grouped_gemm_config_name(grouped_gemm_default_config(s))), std::string::npos) << msg;
}

}  // namespace
