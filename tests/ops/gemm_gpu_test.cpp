// Tests ops/cuda/gemm (GemmPlan through DeviceContext) against ops/cpu/gemm_ref on one GPU:
//   every supported type combination (fp8 with and without fast accumulation, with scales 0.5 and 4) on
//   small shapes, including non-square and non-multiple-of-128 ones (fp8: k, n multiples of 16), checked
//   over ALL elements, and a large shape checked on sampled elements; then one corrupted output element
//   (and, for fp8, the wrong scales) must fail the same check, so the check itself can fail.
// Also: fill_uniform bit-for-bit against the host recomputation, plan caching, and input validation.
#include <gtest/gtest.h>

#include <optional>

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "bench/sysinfo.h"
#include "core/dtype.h"
#include "core/error.h"
#include "ops/cuda/context.h"
#include "ops/cuda/fill.h"
#include "ops/cuda/gemm.h"
#include "../support/config_error.h"

namespace {

using tb::DType;
using namespace tb::ops;

constexpr float kScales[2] = {0.5f, 4.0f};  // fp8 a_scale, b_scale

#define SKIP_WITHOUT_GPU() \
  if (tb::bench::visible_gpu_count() == 0) GTEST_SKIP() << tb::bench::no_gpu_reason()

// A, B, D (and fp8 scales) of one shape on the device, A and B filled with random values in [-1, 1].
struct Operands {
  DeviceBuffer a, b, d;
  std::optional<DeviceScales> scale_buf;
  GemmScales scales;
  double a_scale = 1, b_scale = 1;

  Operands(DeviceContext& dc, const GemmShape& s)
      : a(dc.device(), std::size_t(s.m * s.k) * tb::dtype_size(s.a)),
        b(dc.device(), std::size_t(s.n * s.k) * tb::dtype_size(s.b)),
        d(dc.device(), std::size_t(s.m * s.n) * tb::dtype_size(s.d)) {
    fill_uniform(a.get(), s.a, std::size_t(s.m * s.k), 11, -1.0f, 1.0f, dc.stream());
    fill_uniform(b.get(), s.b, std::size_t(s.n * s.k), 12, -1.0f, 1.0f, dc.stream());
    TB_CHECK(cudaMemsetAsync(d.get(), 0xff, d.bytes(), dc.stream()));  // NaN everywhere until written
    if (tb::is_fp8(s.a)) {
      scales = scale_buf.emplace(dc.device(), kScales[0], kScales[1], dc.stream()).scales();
      a_scale = kScales[0];
      b_scale = kScales[1];
    }
  }
  GemmCheck check(DeviceContext& dc, const GemmShape& s, int samples) const {
    const auto elements = sample_elements(s.m, s.n, samples, 3);
    return verify_gemm(s, d.get(), a.get(), b.get(), a_scale, b_scale, elements, dc.stream());
  }
};

int all_elements(const GemmShape& s) { return int(s.m * s.n); }

struct TypeCase {
  GemmTypes t;
  bool fast_accum;
};

std::vector<TypeCase> type_cases() {
  std::vector<TypeCase> v;
  for (const auto& t : gemm_type_combos()) {
    v.push_back({t, false});
    if (tb::is_fp8(t.a)) v.push_back({t, true});
  }
  return v;
}

std::string case_name(const testing::TestParamInfo<TypeCase>& info) {
  const auto& t = info.param.t;
  std::string n = gemm_types_name(t.a, t.b) + "_to_" + std::string(tb::dtype_name(t.d));
  if (info.param.fast_accum) n += "_fast_accum";
  return n;
}

class GemmGpu : public testing::TestWithParam<TypeCase> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    dc_ = std::make_unique<DeviceContext>(0);
    if (tb::is_fp8(GetParam().t.a) && dc_->compute_capability() < 89)
      GTEST_SKIP() << "fp8 GEMMs need compute capability 8.9+, this GPU has " << dc_->compute_capability();
  }
  GemmShape shape(std::int64_t m, std::int64_t n, std::int64_t k) const {
    const auto& p = GetParam();
    return {m, n, k, p.t.a, p.t.b, p.t.d, p.fast_accum};
  }
  // Shapes every combination supports; fp8 keeps k and n multiples of 16 (m is free).
  std::vector<GemmShape> small_shapes() const {
    if (tb::is_fp8(GetParam().t.a))
      return {shape(96, 160, 64), shape(128, 128, 128), shape(40, 48, 32), shape(200, 304, 208), shape(1, 16, 16)};
    return {shape(96, 160, 64), shape(128, 128, 128), shape(127, 65, 33), shape(200, 300, 210), shape(1, 1, 1),
            shape(3, 1, 257)};
  }
  std::unique_ptr<DeviceContext> dc_;
};

TEST_P(GemmGpu, MatchesReferenceOnEveryElementOfSmallShapes) {
  for (const GemmShape& s : small_shapes()) {
    SCOPED_TRACE(describe(s));
    Operands op(*dc_, s);
    dc_->gemm(s, op.d.get(), op.a.get(), op.b.get(), op.scales);
    const GemmCheck c = op.check(*dc_, s, all_elements(s));
    EXPECT_EQ(c.samples, all_elements(s));
    EXPECT_TRUE(c.ok()) << c.worst_message() << " [" << dc_->gemm_plan(s).algo().describe() << "]";
  }
}

TEST_P(GemmGpu, MatchesReferenceOnSampledElementsOfALargeShape) {
  const GemmShape s = shape(3000, 2048, 4096);
  Operands op(*dc_, s);
  dc_->gemm(s, op.d.get(), op.a.get(), op.b.get(), op.scales);
  const GemmCheck c = op.check(*dc_, s, 512);
  EXPECT_EQ(c.samples, 512);
  EXPECT_TRUE(c.ok()) << describe(s) << ": " << c.worst_message() << " [" << dc_->gemm_plan(s).algo().describe()
                      << "]";
}

// Planned for part of the GPU (leaving SMs to a concurrent stream): the same product, its own plan.
TEST_P(GemmGpu, PlannedForFewerSmsMatchesReference) {
  GemmShape s = shape(3000, 2048, 4096);
  s.sm_target = 66;
  Operands op(*dc_, s);
  dc_->gemm(s, op.d.get(), op.a.get(), op.b.get(), op.scales);
  const GemmCheck c = op.check(*dc_, s, 512);
  EXPECT_TRUE(c.ok()) << describe(s) << ": " << c.worst_message();
  EXPECT_NE(describe(s).find(" sms 66"), std::string::npos) << describe(s);
  GemmShape whole = s;
  whole.sm_target = 0;
  EXPECT_NE(&dc_->gemm_plan(whole), &dc_->gemm_plan(s));
}

// The check can fail: one corrupted element of D is found, and (fp8) ignoring the scales is found.
TEST_P(GemmGpu, CorruptedElementFailsTheCheck) {
  const GemmShape s = shape(96, 160, 64);
  Operands op(*dc_, s);
  dc_->gemm(s, op.d.get(), op.a.get(), op.b.get(), op.scales);
  ASSERT_TRUE(op.check(*dc_, s, all_elements(s)).ok());

  const std::int64_t i = 5, j = 7;
  unsigned char bad[8] = {};
  tb::store_from_double(s.d, bad, 0, 100.0);  // |D| stays below ~20 here: far outside any tolerance
  const std::size_t size = tb::dtype_size(s.d);
  TB_CHECK(cudaMemcpyAsync(op.d.as<unsigned char>() + std::size_t(i * s.n + j) * size, bad, size,
                           cudaMemcpyHostToDevice, dc_->stream()));
  const GemmCheck c = op.check(*dc_, s, all_elements(s));
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(c.failures, 1);
  EXPECT_EQ(c.worst.i, i);
  EXPECT_EQ(c.worst.j, j);

  if (tb::is_fp8(s.a)) {  // D was computed with scales 0.5 * 4 = 2: checking it as unscaled must fail
    dc_->gemm(s, op.d.get(), op.a.get(), op.b.get(), op.scales);
    const auto elements = sample_elements(s.m, s.n, all_elements(s));
    EXPECT_FALSE(verify_gemm(s, op.d.get(), op.a.get(), op.b.get(), 1.0, 1.0, elements, dc_->stream()).ok());
  }
}

TEST(GemmGpuScales, UnalignedFp8ScalePointerIsRefused) {
  if (tb::bench::visible_gpu_count() == 0) GTEST_SKIP() << tb::bench::no_gpu_reason();
  DeviceContext dc(0);
  GemmShape s;
  s.m = s.n = s.k = 64;
  s.a = s.b = tb::DType::e4m3;
  s.d = tb::DType::bf16;
  Operands op(dc, s);
  GemmScales bad{op.scales.a + 1, op.scales.b};
  EXPECT_THROW(dc.gemm(s, op.d.get(), op.a.get(), op.b.get(), bad), tb::Error);
}

TEST_P(GemmGpu, PlansAreCachedPerShape) {
  const GemmShape s = shape(128, 128, 128);
  const GemmPlan& p1 = dc_->gemm_plan(s);
  const GemmPlan& p2 = dc_->gemm_plan(s);
  EXPECT_EQ(&p1, &p2);
  EXPECT_GE(p1.algo_id(), 0);
  EXPECT_DOUBLE_EQ(p1.flops(), 2.0 * 128 * 128 * 128);
  GemmShape other = s;
  other.k = 256;
  EXPECT_NE(&dc_->gemm_plan(other), &p1);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, GemmGpu, testing::ValuesIn(type_cases()), case_name);

TEST(GemmShapeCheck, RejectsUnsupportedRequestsWithClearMessages) {
  const auto message = [](const GemmShape& s) {
    return tb::testing_support::config_error([&] { check_gemm_shape(s); });
  };
  EXPECT_NE(message({64, 64, 64, DType::e5m2, DType::e5m2, DType::bf16}).find("no e5m2 x e5m2 GEMM"),
            std::string::npos);
  EXPECT_NE(message({64, 64, 40, DType::e4m3, DType::e4m3, DType::bf16}).find("multiples of 16"), std::string::npos);
  EXPECT_NE(message({64, 40, 64, DType::e4m3, DType::e4m3, DType::bf16}).find("multiples of 16"), std::string::npos);
  EXPECT_NE(message({64, 64, 64, DType::bf16, DType::f16, DType::bf16}).find("supported are"), std::string::npos);
  EXPECT_NE(message({64, 64, 64, DType::bf16, DType::bf16, DType::bf16, true}).find("fast_accum"), std::string::npos);
  EXPECT_NE(message({0, 64, 64}).find("at least 1"), std::string::npos);
  GemmShape negative{64, 64, 64};
  negative.sm_target = -1;
  EXPECT_NE(message(negative).find("sm_target must be >= 0"), std::string::npos);
  EXPECT_EQ(message({40, 48, 32, DType::e4m3, DType::e5m2, DType::bf16, true}), "no error");
}

TEST(FillUniform, MatchesHostRecomputationBitForBit) {
  SKIP_WITHOUT_GPU();
  DeviceContext dc(0);
  for (DType t : {DType::f64, DType::f32, DType::tf32, DType::bf16, DType::f16, DType::e4m3, DType::e5m2}) {
    SCOPED_TRACE(std::string(tb::dtype_name(t)));
    const std::size_t n = 4099;  // not a multiple of any vector width: the tail path runs too
    DeviceBuffer buf(dc.device(), n * tb::dtype_size(t));
    fill_uniform(buf.get(), t, n, 42, -1.0f, 1.0f, dc.stream());
    std::vector<unsigned char> got(n * tb::dtype_size(t)), want(n * tb::dtype_size(t));
    TB_CHECK(cudaMemcpyAsync(got.data(), buf.get(), got.size(), cudaMemcpyDeviceToHost, dc.stream()));
    dc.synchronize();
    int zeros = 0, mismatches = 0;
    for (std::size_t i = 0; i < n; ++i) {
      tb::store_from_double(t == DType::tf32 ? DType::f32 : t, want.data(), i, fill_value(42, i, -1.0f, 1.0f));
      const double v = tb::load_as_double(t, got.data(), i);
      zeros += v == 0.0;
      EXPECT_TRUE(v >= -1.0 && v <= 1.0) << "element " << i << " = " << v;
    }
    for (std::size_t i = 0; i < got.size(); ++i) mismatches += got[i] != want[i];
    EXPECT_EQ(mismatches, 0);
    EXPECT_LT(zeros, int(n / 100));
  }
}

TEST(FillUniform, RejectsBadArguments) {
  SKIP_WITHOUT_GPU();
  DeviceContext dc(0);
  DeviceBuffer buf(dc.device(), 1024);
  EXPECT_THROW(fill_uniform(buf.as<unsigned char>() + 1, DType::f32, 16, 1, -1, 1, dc.stream()), tb::Error);
  EXPECT_THROW(fill_uniform(buf.get(), DType::f32, 16, 1, 1, -1, dc.stream()), tb::Error);
  EXPECT_THROW(fill_uniform(buf.get(), DType::e4m3, 16, 1, -1000, 1000, dc.stream()), tb::Error);
  EXPECT_THROW(fill_uniform(buf.get(), DType::i32, 16, 1, -1, 1, dc.stream()), tb::Error);
}

}  // namespace
