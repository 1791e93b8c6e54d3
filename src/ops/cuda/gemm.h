// ops/cuda/gemm.h: cuBLASLt GEMM, planned once per shape and run many times.
//   D[m,n] = a_scale * b_scale * A[m,k] · B[n,k]^T     row-major; B in nn.Linear weight layout [out, in];
//   fp32 accumulate; flops = 2 m n k. Scales apply to fp8 inputs only (per-tensor, device floats).
// Types (a x b -> d): bf16 -> bf16, f16 -> f16, tf32 -> f32 (f32 storage, CUBLAS_COMPUTE_32F_FAST_TF32),
// f32 -> f32, e4m3 -> bf16, e4m3 x e5m2 -> bf16, e5m2 x e4m3 -> bf16 (there is no e5m2 x e5m2 GEMM).
// cuBLASLt is column-major, and a row-major [r,c] buffer is a column-major [c,r] one, so we ask for
// D^T[n,m] = B[n,k] · A^T[k,m]: cuBLAS's "A" is our B with op T, cuBLAS's "B" is our A with op N. This is
// the "TN" layout Hopper FP8 requires; nothing is copied or transposed.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <compare>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "ops/cpu/gemm_ref.h"
#include "ops/cuda/blas.h"

namespace tb::ops {

struct GemmShape {
  std::int64_t m = 0, n = 0, k = 0;
  DType a = DType::bf16, b = DType::bf16, d = DType::bf16;
  bool fast_accum = false;  // fp8 only: CUBLASLT_MATMUL_DESC_FAST_ACCUM (no periodic promotion to fp32)
  auto operator<=>(const GemmShape&) const = default;
};

struct GemmTypes {
  DType a, b, d;
};
std::span<const GemmTypes> gemm_type_combos();  // every supported a x b -> d, in the order listed above
std::string gemm_types_name(DType a, DType b);  // "bf16", "e4m3", "e4m3xe5m2"
std::string describe(const GemmShape& s);        // "e4m3xe5m2->bf16 m=96 n=160 k=64 fast_accum"
// Throws tb::Error{config} saying what is wrong and what to do: unsupported types, bad dimensions, fp8
// dimensions not multiples of 16, fast_accum on a non-fp8 GEMM.
void check_gemm_shape(const GemmShape& s);

struct Workspace {
  void* ptr = nullptr;
  std::size_t bytes = 0;
};
struct GemmScales {  // device pointers to one float each; null means 1 (the plan's own unit scales)
  const float* a = nullptr;
  const float* b = nullptr;
};

// The algorithm the heuristic chose, written into results so two runs can be compared like for like.
struct GemmAlgo {
  int id = -1;
  unsigned tile = 0, stages = 0;  // cublasLtMatmulTile_t, cublasLtMatmulStages_t
  int splitk = 1;
  std::size_t workspace_bytes = 0;
  int rank = 0;        // its place in the heuristic's list (0: the heuristic's first choice)
  int candidates = 1;  // how many algorithms the heuristic offered
  std::string describe() const;  // "algo 66 tile 20 stages 36 splitK 1"
};

class GemmPlan {
 public:
  // Validates the shape, builds the descriptors and asks the heuristic once (for at most workspace_bytes of
  // workspace) for up to kCandidates algorithms, and uses its first. No algorithm: tb::Error{cublas, not
  // fatal} "no cuBLASLt algorithm for e4m3 m=.. n=.. k=..". fp8 plans own device unit scales, set before the
  // heuristic (cuBLASLt picks fp8 kernels for the scale pointers the descriptor holds then).
  // The device whose handle `lt` is must be current.
  static constexpr int kCandidates = 8;
  GemmPlan(cublasLtHandle_t lt, const GemmShape& s, std::size_t workspace_bytes);
  // Autotuning: the caller times each candidate (bench/loop.h) and selects the fastest.
  int candidates() const { return int(candidates_.size()); }
  void select(int rank);

  // d, a, b: device buffers, 256-byte aligned (cudaMalloc) as the heuristic assumed. Enqueues on stream.
  // Not thread-safe: fp8 scale pointers are set on the shared descriptor when they change.
  void run(void* d, const void* a, const void* b, Workspace ws, cudaStream_t stream, GemmScales scales = {}) const;

  const GemmShape& shape() const { return s_; }
  double flops() const { return 2.0 * double(s_.m) * double(s_.n) * double(s_.k); }
  int algo_id() const { return info_.id; }
  const GemmAlgo& algo() const { return info_; }

 private:
  GemmShape s_;
  cublasLtHandle_t lt_;
  LtOwned<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy> desc_;
  LtOwned<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy> lay_a_, lay_b_, lay_d_;  // cuBLAS's A, B, D
  std::vector<cublasLtMatmulHeuristicResult_t> candidates_;
  cublasLtMatmulAlgo_t algo_{};
  GemmAlgo info_;
  std::shared_ptr<float> unit_scales_;  // fp8: a device float = 1
  mutable GemmScales scales_set_;       // the scale pointers the descriptor holds now
};

// Checks elements of D (device) against ops/cpu/gemm_ref: copies the rows of A, B and D they need to the
// host after the stream's work is done. a_scale, b_scale: the values behind GemmScales (1 when none).
GemmCheck verify_gemm(const GemmShape& s, const void* d, const void* a, const void* b, double a_scale,
                      double b_scale, std::span<const GemmIndex> elements, cudaStream_t stream);

}  // namespace tb::ops
