// ops/cuda/norm_fp8.cu: norm_forward_fp8 / add_norm_forward_fp8 (see norm.h), the norms' forward written as FP8 for
// the next FP8 GEMM (delayed scaling). Two passes:
//   1. norm.cu's forward kernel without y: r (add_norm), mean (layernorms), rstd;
//   2. the cast + transpose tiles of ops/cuda/fp8_cast.cuh over NormSource, which recomputes per element
//        y = bf16((r - mean) * rstd * w_eff + b)   (w_eff = w + 1 for layernorm1p; rmsnorm: mean = 0, b = 0)
//      through the forward kernel's own functions (norm_common.cuh) from the stored r (or x) and statistics, and
//      writes q = fp8(y scale) (if wanted) and qt: bit for bit fp8_cast of the bf16 op's y.
// Ideal DRAM bytes (e = rows*dim, with q): 6e (norm), 10e (add_norm: read x, residual_in, write r, read r back);
// norm.h lists the small terms.
#include "ops/cuda/norm.h"

#include <cstdint>
#include <string>

#include "ops/cuda/fp8_cast.cuh"
#include "ops/cuda/kernel_common.cuh"
#include "ops/cuda/norm_common.cuh"

namespace tb::ops {
namespace {

using namespace detail;

// y at (row, col) of the forward's output, rounded to bf16 as the forward kernel stores it.
struct NormSource {
  const bf16* x;  // the normalised input: r, or x of the plain norm
  std::int64_t xs;
  const bf16* w;
  const bf16* b;      // null: no bias
  const float* mean;  // null: rmsnorm
  const float* rstd;
  int kind;
  __device__ __forceinline__ float at(std::int64_t r, std::int64_t c) const {
    const float mu = mean ? mean[r] : 0.f, bias = b ? __bfloat162float(b[c]) : 0.f;
    const float wc = norm_weight(__bfloat162float(w[c]), kind);
    return round_bf16(norm_out(__bfloat162float(x[r * xs + c]), mu, rstd[r], wc, bias));
  }
  struct Raw {
    uint4 x;
    float mu, rs;
  };
  __device__ __forceinline__ Raw fetch(std::int64_t r, std::int64_t c) const {
    return {detail::load8(x + r * xs + c), mean ? mean[r] : 0.f, rstd[r]};
  }
  __device__ __forceinline__ void values(const Raw& raw, std::int64_t c, float (&v)[8]) const {
    float wv[8], out[8], bv[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    norm_weight8(w, int(c), kind, wv);
    if (b) unpack8(detail::load8(b + c), bv);
    unpack8(raw.x, v);
#pragma unroll
    for (int k = 0; k < 8; ++k) out[k] = norm_out(v[k], raw.mu, raw.rs, wv[k], bv[k]);
    unpack8(pack8(out), v);
  }
};

// Checks cast against the output [rows, dim] (nothing is launched before every check passed), then the two passes.
void forward_fp8(NormKind kind, const Fp8CastArgs& cast, TensorView<bf16> r, TensorView<float> mean,
                 TensorView<float> rstd, TensorView<const bf16> x, TensorView<const bf16> residual_in,
                 TensorView<const bf16> w, TensorView<const bf16> b, float eps, cudaStream_t stream, const char* name) {
  const std::string what = str(name, "(", dtype_name(cast.type), ")");
  TB_REQUIRE(x.rank() == 2, what + ": x must be [rows, dim], got " + x.shape_str());
  const std::int64_t rows = x.size(0), dim = x.size(1);
  const CastTarget p = fused_cast_target(cast, rows, dim, what);
  norm_forward_rows(kind, {}, r, mean, rstd, x, residual_in, w, b, eps, stream, nullptr, what);
  if (rows == 0) return;
  const TensorView<const bf16> src = r.data() ? TensorView<const bf16>(r) : x;
  const NormSource s{src.data(),  src.stride(0), w.data(), b.data(), kind == NormKind::rmsnorm ? nullptr : mean.data(),
                     rstd.data(), int(kind)};
  // Rows of r / x and w, b allow 16-byte loads (checked by norm_forward_rows): the vector tiles when the shape allows.
  launch_cast_transpose(s, p, cast.type == DType::e4m3, true, what, stream);
}

}  // namespace

void norm_forward_fp8(NormKind kind, const Fp8CastArgs& cast, TensorView<float> mean, TensorView<float> rstd,
                      TensorView<const bf16> x, TensorView<const bf16> w, TensorView<const bf16> b, float eps,
                      cudaStream_t stream) {
  forward_fp8(kind, cast, {}, mean, rstd, x, {}, w, b, eps, stream, "norm_forward_fp8");
}

void add_norm_forward_fp8(NormKind kind, const Fp8CastArgs& cast, TensorView<bf16> r, TensorView<float> mean,
                          TensorView<float> rstd, TensorView<const bf16> x, TensorView<const bf16> residual_in,
                          TensorView<const bf16> w, TensorView<const bf16> b, float eps, cudaStream_t stream) {
  TB_REQUIRE(r.data() != nullptr, "add_norm_forward_fp8: r (the next residual) is required");
  forward_fp8(kind, cast, r, mean, rstd, x, residual_in, w, b, eps, stream, "add_norm_forward_fp8");
}

}  // namespace tb::ops
