// ops/cuda/gemm.h: cuBLASLt GEMM, planned once per shape and run many times.
//   D[m,n] = a_scale * b_scale * A[m,k] · B[n,k]^T  (+ D when accumulate)   row-major; B in nn.Linear weight
//   layout [out, in]; fp32 accumulate; flops = 2 m n k. Scales apply to fp8 inputs only (per-tensor, device floats).
// Other layouts (GemmShape::layout), for backward passes, without copies:
//   ab:  D[m,n] = A[m,k] · B[k,n]      (dX = dY · W: B is the weight [out=k, in=n] as stored)
//   atb: D[m,n] = A[k,m]^T · B[k,n]    (dW = dY^T · X: A is dY [tokens=k, out=m], B is X [tokens=k, in=n])
// accumulate: D += product (beta = 1, C = D in place; cuBLASLt allows C == D with the same layout), e.g. fp32
// weight gradients summed over chunks and micro-batches.
// Types (a x b -> d): bf16 -> bf16, f16 -> f16, tf32 -> f32 (f32 storage, CUBLAS_COMPUTE_32F_FAST_TF32),
// f32 -> f32, e4m3 -> bf16, e4m3 x e5m2 -> bf16, e5m2 x e4m3 -> bf16 (there is no e5m2 x e5m2 GEMM),
// bf16 -> f32 (fp32 output, e.g. weight gradients accumulated in fp32), e4m3 -> f32 and e5m2 x e4m3 -> f32 (FP8
// weight gradients: dW = dY^T X with transposed fp8 copies, accumulated in fp32).
// cuBLASLt is column-major, and a row-major [r,c] buffer is a column-major [c,r] one, so we ask for
// D^T[n,m] = op(B)^T · op(A)^T with cuBLAS's "A" = our B and cuBLAS's "B" = our A:
//   abt: cuA = B as col-major [k,n] with op T, cuB = A as col-major [k,m] with op N  (the "TN" layout that
//        Hopper FP8 requires; fp8 GEMMs support abt only)
//   ab:  cuA = B as col-major [n,k] with op N, cuB = A as col-major [k,m] with op N  ("NN")
//   atb: cuA = B as col-major [n,k] with op N, cuB = A as col-major [m,k] with op T  ("NT")
// Nothing is copied or transposed; leading dimensions are the row lengths (dense rows), unless lda / ldd say
// otherwise: then A's or D's rows are that many elements apart (a block of columns of a wider tensor, e.g. a LoRA
// adapter's rows of a fused linear's output), every pointer needs only 16-byte alignment, and the plan picks among the
// algorithms that take it. alpha (run): D = alpha · product (+ D), a host float (a LoRA adapter's alpha / r).
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <compare>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "ops/cpu/gemm_ref.h"
#include "ops/cuda/blas.h"

namespace tb::ops {

// How A and B are stored (row-major), see the top of this file. abt is the default and the only fp8 layout.
enum class GemmLayout : std::uint8_t {
  abt,  // D = A[m,k] · B[n,k]^T
  ab,   // D = A[m,k] · B[k,n]
  atb,  // D = A[k,m]^T · B[k,n]
};
std::string_view gemm_layout_name(GemmLayout l);  // "abt" "ab" "atb"

struct GemmShape {
  std::int64_t m = 0, n = 0, k = 0;
  DType a = DType::bf16, b = DType::bf16, d = DType::bf16;
  bool fast_accum = false;  // fp8 only: CUBLASLT_MATMUL_DESC_FAST_ACCUM (no periodic promotion to fp32)
  GemmLayout layout = GemmLayout::abt;
  bool accumulate = false;  // D += product (beta = 1, C = D) instead of D = product
  int sm_target = 0;  // > 0: plan for this many SMs (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET), leaving the rest to a
                      // concurrent stream; 0: the whole GPU
  std::int64_t lda = 0, ldd = 0;  // elements between A's rows, D's rows (0: dense; see the top)
  bool strided() const { return lda > 0 || ldd > 0; }
  auto operator<=>(const GemmShape&) const = default;
};

// f(std::type_identity<T>{}) with T float for f32, __nv_bfloat16 for bf16 (e.g. gradients of either type).
template <class F>
void with_float_type(DType t, F&& f) {
  if (t == DType::bf16)
    f(std::type_identity<__nv_bfloat16>{});
  else
    f(std::type_identity<float>{});
}

struct GemmTypes {
  DType a, b, d;
};
std::span<const GemmTypes> gemm_type_combos();  // every supported a x b -> d, in the order listed above
std::string gemm_types_name(DType a, DType b);  // "bf16", "e4m3", "e4m3xe5m2"
// "e4m3xe5m2->bf16 m=96 n=160 k=64 fast_accum"; a non-default layout and accumulate are appended
// ("bf16->f32 m=1000 n=64 k=37 atb accumulate").
std::string describe(const GemmShape& s);
// Throws tb::Error{config} saying what is wrong and what to do: unsupported types, bad dimensions, fp8
// dimensions not multiples of 16, fast_accum on a non-fp8 GEMM, an fp8 GEMM in a layout other than abt.
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
  void run(void* d, const void* a, const void* b, Workspace ws, cudaStream_t stream, GemmScales scales = {},
           float alpha = 1.0f) const;

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

// Checks elements of D (device) against ops/cpu/gemm_ref: copies the rows (for ab / atb: the columns) of A and
// B and the rows of D they need to the host after the stream's work is done. a_scale, b_scale: the values
// behind GemmScales (1 when none). Any layout; not for accumulate shapes (D then holds C + A·B, and C is gone):
// check the product of a non-accumulating run instead.
GemmCheck verify_gemm(const GemmShape& s, const void* d, const void* a, const void* b, double a_scale,
                      double b_scale, std::span<const GemmIndex> elements, cudaStream_t stream);

}  // namespace tb::ops
