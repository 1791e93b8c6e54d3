// bench/lab/adamw_lab.cpp: the optimizer's kernels alone against the copy ceiling (a lab, not part of trainbench):
// is each at the bandwidth its bytes allow? Over P parameters in one tensor, split master (bf16 weight + 16-bit
// residual), fp32 gradients, as trainbench's default state; ideal DRAM bytes per parameter (ops/cuda/adamw.h):
//   grad norm 4 (g read)      AdamW, fp32 moments 28 (g, w, lo, m, v read; w, lo, m, v written)      bf16 moments 20
// rate = bytes / median time (bench/loop.h, 10 after 3); the ceiling is cudaMemcpyAsync of 4 GiB (read + write).
// Usage: adamw_lab [P_millions=2800]
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

#include "bench/loop.h"
#include "core/error.h"
#include "ops/cuda/adamw.h"
#include "ops/cuda/context.h"
#include "ops/cuda/fill.h"

int main(int argc, char** argv) {
  using namespace tb;
  const std::size_t P = std::size_t(argc > 1 ? std::atol(argv[1]) : 2800) * 1000000;
  ops::DeviceContext dc(0);
  cudaStream_t st = dc.stream();
  ops::DeviceBuffer w(0, P * 2), lo(0, P * 2), grad(0, P * 4), mom(0, P * 8), scratch(0, 2 * (std::size_t(4) << 30));
  ops::fill_uniform(w.get(), DType::bf16, P, 3, -1, 1, st);
  TB_CHECK(cudaMemsetAsync(lo.get(), 0, lo.bytes(), st));
  ops::fill_uniform(grad.get(), DType::f32, P, 4, -1e-3f, 1e-3f, st);
  TB_CHECK(cudaMemsetAsync(mom.get(), 0, mom.bytes(), st));
  auto group = [&](DType moments) {
    ops::AdamWTensor t;
    const std::size_t msize = dtype_size(moments);
    t.model = w.as<__nv_bfloat16>(), t.master_lo = lo.as<std::int16_t>(), t.grad = grad.as<float>();
    t.exp_avg = mom.get(), t.exp_avg_sq = static_cast<char*>(mom.get()) + P * msize, t.numel = std::int64_t(P);
    return ops::AdamWGroup(0, std::span<const ops::AdamWTensor>(&t, 1), moments);
  };
  const ops::AdamWGroup f32 = group(DType::f32), bf16 = group(DType::bf16);
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
  const double gp = 1e-9 * double(P);
  std::printf("copy 4 GiB          %8.3f ms  %.2f TB/s (read + write)\n", tc, 2e-9 * double(half) / tc);
  std::printf("grad norm           %8.3f ms  %.2f TB/s (%zu M params x 4 B)\n", tn, 4 * gp / tn, P / 1000000);
  std::printf("AdamW fp32 moments  %8.3f ms  %.2f TB/s (x 28 B)\n", ta, 28 * gp / ta);
  std::printf("AdamW bf16 moments  %8.3f ms  %.2f TB/s (x 20 B)\n", tb, 20 * gp / tb);
  return 0;
}
