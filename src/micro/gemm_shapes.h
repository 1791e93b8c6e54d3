// micro/gemm_shapes.h: the GEMMs of one transformer layer, as named shape sets for the GEMM benchmark.
// A linear layer Y[M,N] = X[M,K] W[N,K]^T (W in nn.Linear layout, M = tokens per micro-batch) runs three
// GEMMs, written as our GEMM D[m,n] = A[m,k] B[n,k]^T (ops/cuda/gemm.h):
//   fprop  Y  = X W^T          m = M, n = N, k = K
//   dgrad  dX = dY W           m = M, n = K, k = N
//   wgrad  dW = dY^T X         m = N, n = K, k = M
// Layers at tensor-parallel size tp (d = d_model, h = heads, g = kv_heads, hd = head_dim, f = ffn):
//   qkv   N = (h + 2g) hd / tp, K = d          proj  N = d, K = h hd / tp
//   fc1   N = 2 f / tp, K = d  (SwiGLU up+gate fused)        fc2   N = d, K = f / tp
// Names: "<model>/tp<tp>/<layer>.<pass>", e.g. "llama3.1-8b/tp1/qkv.fprop" (8192x6144x4096).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tb::micro {

struct TransformerDims {
  std::string_view name;
  std::int64_t d_model, ffn, heads, kv_heads, head_dim;
};

struct NamedGemm {
  std::string name;
  std::int64_t m, n, k;
  bool fprop;  // forward GEMMs (FP8 recipes use fast accumulation on these only)
};

inline constexpr std::int64_t kDefaultGemmTokens = 8192;  // seq 8192 x micro-batch 1

std::vector<std::string> gemm_shape_set_names();       // "llama3.1-8b", "llama3.1-70b"
const TransformerDims& transformer_dims(std::string_view set);  // unknown: Error{config} listing the known sets
// The 12 GEMMs (4 layers x fprop, dgrad, wgrad) of one layer at tp. tp must divide heads, kv_heads and ffn.
std::vector<NamedGemm> gemm_shape_set(std::string_view set, int tp, std::int64_t tokens = kDefaultGemmTokens);

}  // namespace tb::micro
