// ops/cuda/norm_common.cuh: what ops/cuda/norm.cu and ops/cuda/norm_fp8.cu share (include from .cu only).
// defines: the effective weight (layernorm1p: w + 1) and the output formula y = (r - mean) * rstd * w_eff + b, one
//          inline function each, so the forward kernel and the FP8 cast's NormSource compute y bit for bit alike;
//          norm_forward_rows, the forward's host entry (y optional: the FP8 variants write only r, mean, rstd).
#pragma once

#include <string>

#include "ops/cuda/kernel_common.cuh"
#include "ops/cuda/norm.h"

namespace tb::ops::detail {

inline constexpr int kNormRms = int(NormKind::rmsnorm), kNormLayer1p = int(NormKind::layernorm1p);

__device__ __forceinline__ float norm_weight(float w, int kind) { return kind == kNormLayer1p ? w + 1.f : w; }

__device__ __forceinline__ void norm_weight8(const bf16* w, int col, int kind, float (&f)[8]) {
  unpack8(load8(w + col), f);
#pragma unroll
  for (int k = 0; k < 8; ++k) f[k] = norm_weight(f[k], kind);
}

// fp32, before the bf16 rounding. Explicit roundings (a subtract, a multiply, then one fused multiply-add) so that
// no caller's context changes how the compiler contracts it. mu = 0 for rmsnorm; b = 0 without a bias.
__device__ __forceinline__ float norm_out(float r, float mu, float rs, float w, float b) {
  return __fmaf_rn(__fmul_rn(__fsub_rn(r, mu), rs), w, b);
}

// The forward over x [rows, dim]: r (if given; residual_in added when given), mean (layernorms), rstd, and y when
// y is not empty (then amax, if set, records max |y| as stored). Checks every view, then launches one kernel.
void norm_forward_rows(NormKind kind, TensorView<bf16> y, TensorView<bf16> r, TensorView<float> mean,
                       TensorView<float> rstd, TensorView<const bf16> x, TensorView<const bf16> residual_in,
                       TensorView<const bf16> w, TensorView<const bf16> b, float eps, cudaStream_t stream, float* amax,
                       const std::string& what);

}  // namespace tb::ops::detail
