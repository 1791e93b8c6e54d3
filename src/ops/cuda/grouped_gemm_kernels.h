// ops/cuda/grouped_gemm_kernels.h: the compiled CUTLASS grouped GEMM kernels behind GroupedGemmPlan
// (ops/cuda/grouped_gemm.h), without CUTLASS's headers. In CUTLASS's terms each group computes
//   D_g[M,N] = alpha_g * A_g[M,K] · B_g[K,N] + beta * C_g      (C_g = D_g; beta 0: C is not read)
// with (M, N, K), the pointers and the leading dimensions read from device arrays (Arrays, below) that
// the plan's prepare kernel fills on the stream before each launch. A kernel is a family (element types and
// operand layouts, below) compiled in a configuration (schedule, tile, cluster: GroupedGemmConfig).
//
// Which (family, configuration) pairs are compiled: grouped_gemm_instances.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "ops/cuda/grouped_gemm.h"

namespace tb::ops::grouped {

// Element types (A x B -> D) and CUTLASS operand layouts: t = row-major A / column-major B (K-major, the only
// FP8 layout), n = column-major A / row-major B (M- or N-major). tn: abt and every fp8 layout; tt: bf16 ab;
// nt: bf16 atb. fast: FP8 fast accumulation (no promotion of partial sums to fp32).
enum class Family : std::uint8_t {
  bf16_tn_bf16,
  bf16_tt_bf16,
  bf16_nt_bf16,
  bf16_nt_f32,
  e4m3_tn_bf16_fast,
  e4m3_tn_bf16,
  e4m3xe5m2_tn_bf16,
  e5m2xe4m3_tn_bf16,
  e4m3_tn_f32,
  e5m2xe4m3_tn_f32,
};

// The plan's device arrays, one entry per group (layouts as CUTLASS reads them: a problem shape is three ints
// {M, N, K}; a stride is the one dynamic leading dimension of the operand's cute stride).
struct Arrays {
  int groups = 0;
  int* shapes = nullptr;                // [groups][3]
  const void** a = nullptr;             // [groups]
  const void** b = nullptr;             // [groups]
  const void** c = nullptr;             // [groups], = d
  void** d = nullptr;                   // [groups]
  std::int64_t* lda = nullptr;          // [groups]
  std::int64_t* ldb = nullptr;          // [groups]
  std::int64_t* ldd = nullptr;          // [groups], also C's
  const float** alpha = nullptr;        // [groups] pointers into alpha_values
  float* alpha_values = nullptr;        // [groups]
  float* beta = nullptr;                // one
};

// One initialized kernel over a plan's arrays and its own workspace (the per-SM TMA descriptors).
class Runner {
 public:
  virtual ~Runner() = default;
  virtual void run(cudaStream_t stream) = 0;  // enqueues the kernel; launches only (graph-capturable)
};

using MakeRunner = std::unique_ptr<Runner> (*)(int device, const Arrays& arrays, GroupedGemmRaster raster);

// What the prepare kernel reads: group g's rows are [start[g], start[g] + m_g), m_g = count[g] clamped to the
// plan's rows. Row operands advance by *_step bytes per row; grouped operands come from *_groups[g].
struct Prepare {
  int groups = 0;
  std::int64_t rows = 0;
  const std::int32_t* start = nullptr;
  const std::int32_t* count = nullptr;
  int vary = 0;                // which of {M, N, K} is m_g: 0 (abt, ab) or 2 (atb)
  int fixed[3] = {0, 0, 0};    // the other extents
  const char* a = nullptr;
  std::int64_t a_step = 0;
  const char* b = nullptr;
  std::int64_t b_step = 0;
  const void* const* b_groups = nullptr;
  char* d = nullptr;
  std::int64_t d_step = 0;
  void* const* d_groups = nullptr;
  const float* a_scale = nullptr;  // null: 1
  int a_scale_stride = 0;          // group g reads a_scale[g * stride]
  const float* b_scale = nullptr;
  int b_scale_stride = 0;
  bool accumulate = false;
  std::int64_t zero_bytes = 0;  // > 0: groups with m_g = 0 get their D_g (zero_bytes bytes) zeroed
};
// Fills arrays' shapes, pointers, alphas and beta from p on the stream (and zeroes D of empty groups).
void prepare(const Prepare& p, const Arrays& arrays, int blocks, cudaStream_t stream);

}  // namespace tb::ops::grouped
