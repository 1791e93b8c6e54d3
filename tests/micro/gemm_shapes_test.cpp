// Tests micro/gemm_shapes: the transformer-layer GEMM shapes (fprop, dgrad, wgrad of qkv, proj, fc1, fc2)
// against hand-computed values, and FLOPs against 2 * tokens * layer matmul params / tp.
#include <gtest/gtest.h>

#include <map>

#include "core/error.h"
#include "micro/gemm_shapes.h"

namespace {

using tb::micro::gemm_shape_set;
using tb::micro::NamedGemm;

std::map<std::string, NamedGemm> by_name(const std::vector<NamedGemm>& v) {
  std::map<std::string, NamedGemm> m;
  for (const auto& g : v) m.emplace(g.name, g);
  return m;
}

void expect_shape(const NamedGemm& g, std::int64_t m, std::int64_t n, std::int64_t k) {
  EXPECT_EQ(g.m, m) << g.name;
  EXPECT_EQ(g.n, n) << g.name;
  EXPECT_EQ(g.k, k) << g.name;
}

TEST(GemmShapes, Llama8bTp1) {
  const auto s = by_name(gemm_shape_set("llama3.1-8b", 1));
  ASSERT_EQ(s.size(), 12u);
  // qkv: N = (32 + 2*8) * 128 = 6144, K = 4096
  expect_shape(s.at("llama3.1-8b/tp1/qkv.fprop"), 8192, 6144, 4096);
  expect_shape(s.at("llama3.1-8b/tp1/qkv.dgrad"), 8192, 4096, 6144);
  expect_shape(s.at("llama3.1-8b/tp1/qkv.wgrad"), 6144, 4096, 8192);
  expect_shape(s.at("llama3.1-8b/tp1/proj.fprop"), 8192, 4096, 4096);
  expect_shape(s.at("llama3.1-8b/tp1/fc1.fprop"), 8192, 28672, 4096);
  expect_shape(s.at("llama3.1-8b/tp1/fc2.fprop"), 8192, 4096, 14336);
  expect_shape(s.at("llama3.1-8b/tp1/fc2.wgrad"), 4096, 14336, 8192);
  EXPECT_TRUE(s.at("llama3.1-8b/tp1/fc1.fprop").fprop);
  EXPECT_FALSE(s.at("llama3.1-8b/tp1/fc1.dgrad").fprop);
  EXPECT_FALSE(s.at("llama3.1-8b/tp1/fc1.wgrad").fprop);
}

TEST(GemmShapes, TensorParallelShards) {
  const auto s8 = by_name(gemm_shape_set("llama3.1-8b", 4));
  expect_shape(s8.at("llama3.1-8b/tp4/qkv.fprop"), 8192, 1536, 4096);
  expect_shape(s8.at("llama3.1-8b/tp4/proj.fprop"), 8192, 4096, 1024);
  const auto s70 = by_name(gemm_shape_set("llama3.1-70b", 4));
  expect_shape(s70.at("llama3.1-70b/tp4/fc1.fprop"), 8192, 14336, 8192);
  expect_shape(s70.at("llama3.1-70b/tp4/fc2.dgrad"), 8192, 7168, 8192);
  const auto s70t8 = by_name(gemm_shape_set("llama3.1-70b", 8, 4096));
  expect_shape(s70t8.at("llama3.1-70b/tp8/qkv.fprop"), 4096, 1280, 8192);  // (64 + 16) * 128 / 8
}

// Per layer, fprop FLOPs = 2 * tokens * (matmul params / tp); dgrad and wgrad cost the same as fprop.
TEST(GemmShapes, FlopsMatchParameterCount) {
  for (const char* set : {"llama3.1-8b", "llama3.1-70b"}) {
    const auto& d = tb::micro::transformer_dims(set);
    const double params = double(d.d_model) * (d.heads + 2 * d.kv_heads) * d.head_dim  // qkv
                          + double(d.heads) * d.head_dim * d.d_model                   // proj
                          + double(d.d_model) * 2 * d.ffn                              // fc1 (up + gate)
                          + double(d.ffn) * d.d_model;                                 // fc2
    for (int tp : {1, 2, 4, 8}) {
      const std::int64_t tokens = 8192;
      double fprop = 0, dgrad = 0, wgrad = 0;
      for (const auto& g : gemm_shape_set(set, tp, tokens)) {
        const double flops = 2.0 * double(g.m) * double(g.n) * double(g.k);
        if (g.name.ends_with(".fprop")) fprop += flops;
        if (g.name.ends_with(".dgrad")) dgrad += flops;
        if (g.name.ends_with(".wgrad")) wgrad += flops;
      }
      EXPECT_DOUBLE_EQ(fprop, 2.0 * tokens * params / tp) << set << " tp" << tp;
      EXPECT_DOUBLE_EQ(dgrad, fprop) << set << " tp" << tp;
      EXPECT_DOUBLE_EQ(wgrad, fprop) << set << " tp" << tp;
    }
  }
  // Llama 3.1 8B: 218,103,808 matmul parameters per layer.
  EXPECT_EQ(4096LL * 6144 + 4096LL * 4096 + 4096LL * 28672 + 14336LL * 4096, 218103808LL);
}

TEST(GemmShapes, BadTensorParallelSizeThrows) {
  EXPECT_THROW(gemm_shape_set("llama3.1-8b", 3), tb::Error);   // 32 heads
  EXPECT_THROW(gemm_shape_set("llama3.1-8b", 16), tb::Error);  // 8 kv_heads
  EXPECT_THROW(gemm_shape_set("llama3.1-70b", 0), tb::Error);
  try {
    gemm_shape_set("llama3.1-8b", 16);
  } catch (const tb::Error& e) {
    EXPECT_EQ(e.kind(), tb::Error::Kind::config);
    EXPECT_NE(std::string(e.what()).find("kv_heads (8)"), std::string::npos) << e.what();
  }
}

TEST(GemmShapes, UnknownSetListsKnownOnes) {
  try {
    gemm_shape_set("llama3.1-7b", 1);
    FAIL() << "expected tb::Error";
  } catch (const tb::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("llama3.1-7b"), std::string::npos) << m;
    EXPECT_NE(m.find("llama3.1-8b"), std::string::npos) << m;
    EXPECT_NE(m.find("llama3.1-70b"), std::string::npos) << m;
  }
}

}  // namespace
