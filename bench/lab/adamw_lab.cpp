// bench/lab/adamw_lab.cpp: the optimizer's kernels alone against the copy ceiling (a lab, not part of trainbench):
// is each at the bandwidth its bytes allow? Over P parameters in one tensor, split master (bf16 weight + 16-bit
// residual), fp32 gradients, as trainbench's default state; ideal DRAM bytes per parameter (ops/cuda/adamw.h):
//   grad norm 4 (g read)      AdamW, fp32 moments 28 (g, w, lo, m, v read; w, lo, m, v written)      bf16 moments 20
// With FP8 copies (AdamWTensor::fp8_copy: the tensor as [P / 4096, 4096], E4M3 W and W^T with a delayed scale):
//   fp8_cast of the bf16 weight 4 (w read; q, qt written)    AdamW + copies, fp32 moments 30, bf16 moments 22
// so the fused step saves the cast's 2-byte read: (28 + 4) - 30 per parameter.
// rate = bytes / median time (bench/loop.h, 10 after 3); the ceiling is cudaMemcpyAsync of 4 GiB (read + write).
// Usage: adamw_lab [P_millions=2800]  (rounded down to a multiple of 32 x 4096)
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

#include "bench/loop.h"
#include "core/error.h"
#include "ops/cuda/adamw.h"
#include "ops/cuda/context.h"
#include "ops/cuda/fill.h"
#include "ops/cuda/fp8.h"

int main(int argc, char** argv) {
  using namespace tb;
  constexpr std::size_t kCols = 4096;
  const std::size_t P = std::size_t(argc > 1 ? std::atol(argv[1]) : 2800) * 1000000 / (32 * kCols) * (32 * kCols);
  ops::DeviceContext dc(0);
  cudaStream_t st = dc.stream();
  ops::DeviceBuffer w(0, P * 2), lo(0, P * 2), grad(0, P * 4), mom(0, P * 8), scratch(0, 2 * (std::size_t(4) << 30));
  ops::DeviceBuffer q(0, P), qt(0, P);
  const ops::Fp8Scales scales(0, 1, 1, st);  // scale 1: the uniform [-1, 1] weights fit E4M3
  ops::fill_uniform(w.get(), DType::bf16, P, 3, -1, 1, st);
  TB_CHECK(cudaMemsetAsync(lo.get(), 0, lo.bytes(), st));
  ops::fill_uniform(grad.get(), DType::f32, P, 4, -1e-3f, 1e-3f, st);
  TB_CHECK(cudaMemsetAsync(mom.get(), 0, mom.bytes(), st));
  ops::Fp8CastArgs cast;
  cast.rows = std::int64_t(P / kCols), cast.cols = kCols, cast.q = q.get(), cast.qt = qt.get();
  const ops::Fp8Meta meta = scales.meta(0);
  cast.scale = meta.scale, cast.scale_inv = meta.scale_inv, cast.amax_out = meta.amax;
  auto group = [&](DType moments, bool copies) {
    ops::AdamWTensor t;
    if (copies) t.fp8_copy = cast;
    const std::size_t msize = dtype_size(moments);
    t.model = w.as<__nv_bfloat16>(), t.master_lo = lo.as<std::int16_t>(), t.grad = grad.as<float>();
    t.exp_avg = mom.get(), t.exp_avg_sq = static_cast<char*>(mom.get()) + P * msize, t.numel = std::int64_t(P);
    return ops::AdamWGroup(0, std::span<const ops::AdamWTensor>(&t, 1), moments);
  };
  const ops::AdamWGroup f32 = group(DType::f32, false), bf16 = group(DType::bf16, false);
  const ops::AdamWGroup f32_copies = group(DType::f32, true), bf16_copies = group(DType::bf16, true);
  ops::AdamWStepScalars host{0.0f, 0, 1};  // lr 0: the weights stay as filled, every byte still moves
  ops::DeviceBuffer scalars(0, sizeof host), norm(0, sizeof(ops::GradNormResult));
  TB_CHECK(cudaMemcpy(scalars.get(), &host, sizeof host, cudaMemcpyHostToDevice));
  const auto* sc = scalars.as<ops::AdamWStepScalars>();
  auto* nr = norm.as<ops::GradNormResult>();
  dc.synchronize();
  using bench::median_ms;
  const std::size_t half = scratch.bytes() / 2;
  auto* src = static_cast<char*>(scratch.get());
  const double tc =
      median_ms(0, st, [&] { TB_CHECK(cudaMemcpyAsync(src + half, src, half, cudaMemcpyDeviceToDevice, st)); });
  const double tn = median_ms(0, st, [&] { ops::grad_norm(f32, 1.0f, nr, st); });
  const double ta = median_ms(0, st, [&] { ops::adamw_step(f32, {}, sc, nr, st); });
  const double tb = median_ms(0, st, [&] { ops::adamw_step(bf16, {}, sc, nr, st); });
  ops::Fp8CastArgs from_w = cast;
  from_w.x = w.as<__nv_bfloat16>();
  const double tq = median_ms(0, st, [&] { ops::fp8_cast(from_w, st); });
  const double taq = median_ms(0, st, [&] { ops::adamw_step(f32_copies, {}, sc, nr, st); });
  const double tbq = median_ms(0, st, [&] { ops::adamw_step(bf16_copies, {}, sc, nr, st); });
  const double gp = 1e-9 * double(P);
  std::printf("copy 4 GiB          %8.3f ms  %.2f TB/s (read + write)\n", tc, 2e-9 * double(half) / tc);
  std::printf("grad norm           %8.3f ms  %.2f TB/s (%zu M params x 4 B)\n", tn, 4 * gp / tn, P / 1000000);
  std::printf("AdamW fp32 moments  %8.3f ms  %.2f TB/s (x 28 B)\n", ta, 28 * gp / ta);
  std::printf("AdamW bf16 moments  %8.3f ms  %.2f TB/s (x 20 B)\n", tb, 20 * gp / tb);
  std::printf("fp8_cast W, W^T     %8.3f ms  %.2f TB/s (x 4 B)\n", tq, 4 * gp / tq);
  std::printf("AdamW fp32 + copies %8.3f ms  %.2f TB/s (x 30 B; apart: %.3f ms)\n", taq, 30 * gp / taq, ta + tq);
  std::printf("AdamW bf16 + copies %8.3f ms  %.2f TB/s (x 22 B; apart: %.3f ms)\n", tbq, 22 * gp / tbq, tb + tq);
  return 0;
}
