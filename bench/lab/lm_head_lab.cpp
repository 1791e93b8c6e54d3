// bench/lab/lm_head_lab.cpp: the LM head + cross-entropy (ops/cuda/cross_entropy.h), forward and backward, bf16 against
// FP8 at several chunk sizes, on one GPU (a lab, not part of trainbench): the numbers behind the FP8 head's chunk.
// Shapes: t = 8192 tokens, V = 128256, h = 4096 (Llama 3.1 8B) and 8192 (70B); random (never zero) x and W.
// Work: 6 t V h FLOPs (three GEMMs). FP8 also times the per-step cast of W into Wq and Wq^T (one amax pass and one
// cast + transpose: 5 V h bytes moved), reported apart. Timed through bench/loop.h (median of 10 after 3).
// Usage: lm_head_lab [tokens=8192]
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "bench/loop.h"
#include "core/error.h"
#include "ops/cuda/context.h"
#include "ops/cuda/cross_entropy.h"
#include "ops/cuda/fill.h"
#include "ops/cuda/fp8.h"

int main(int argc, char** argv) {
  using namespace tb;
  using bf16 = __nv_bfloat16;
  const std::int64_t t = argc > 1 ? std::atol(argv[1]) : 8192, V = 128256;
  ops::DeviceContext dc(0);
  cudaStream_t st = dc.stream();
  std::vector<std::int32_t> host_targets(static_cast<std::size_t>(t));
  for (std::int64_t i = 0; i < t; ++i) host_targets[std::size_t(i)] = std::int32_t((i * 7919) % V);
  ops::DeviceBuffer targets(0, std::size_t(t) * 4), loss(0, 256);
  TB_CHECK(cudaMemcpy(targets.get(), host_targets.data(), host_targets.size() * 4, cudaMemcpyHostToDevice));
  ops::Fp8Scales scales(0, 3, 1, st);  // W, x, dlogits

  for (const std::int64_t h : {std::int64_t(4096), std::int64_t(8192)}) {
    ops::DeviceBuffer x(0, std::size_t(t * h) * 2), w(0, std::size_t(V * h) * 2), dx(0, std::size_t(t * h) * 2);
    ops::DeviceBuffer dw(0, std::size_t(V * h) * 4), wq(0, std::size_t(V * h)), wqt(0, std::size_t(V * h));
    ops::fill_uniform(x.get(), DType::bf16, std::size_t(t * h), 1, -1, 1, st);
    ops::fill_uniform(w.get(), DType::bf16, std::size_t(V * h), 2, -0.02f, 0.02f, st);
    const double tflop = 6e-12 * double(t) * double(V) * double(h);
    const TensorView<bf16> dxv(dx.as<bf16>(), {t, h});
    const TensorView<float> dwv(dw.as<float>(), {V, h});
    const TensorView<const bf16> xv(x.as<bf16>(), {t, h}), wv(w.as<bf16>(), {V, h});
    std::printf("h = %lld (t = %lld, V = %lld): %.2f TFLOP per call\n", (long long)h, (long long)t, (long long)V, tflop);
    for (int chunk : {2048, 4096, 8192}) {
      const ops::LmHeadCeScratch L = ops::lm_head_ce_scratch(t, V, h, chunk);
      ops::DeviceBuffer scratch(0, L.bytes);
      const double ms = bench::median_ms(0, st, [&] {
        ops::lm_head_cross_entropy(dc, dxv, dwv, xv, wv, targets.as<std::int32_t>(), chunk, 1.0f, loss.as<float>(),
                                   {scratch.get(), L.bytes});
      });
      std::printf("  bf16 chunk %5d: %8.2f ms  %6.0f TFLOP/s  scratch %.2f GB\n", chunk, ms, tflop / ms * 1e3,
                  L.bytes / 1e9);
    }
    const ops::Fp8Meta wm = scales.meta(0);
    ops::Fp8CastArgs wa;
    wa.x = w.as<bf16>(), wa.rows = V, wa.cols = h, wa.q = wq.get(), wa.qt = wqt.get(), wa.type = DType::e4m3;
    wa.amax_in = wm.amax, wa.scale = wm.scale, wa.scale_inv = wm.scale_inv;
    const double cast_ms = bench::median_ms(0, st, [&] {
      TB_CHECK(cudaMemsetAsync(wm.amax, 0, sizeof(float), st));
      ops::fp8_amax(w.as<bf16>(), std::size_t(V * h), wm.amax, st);
      ops::fp8_cast(wa, st);
    });
    std::printf("  fp8 W cast (amax + cast + transpose): %.2f ms\n", cast_ms);
    ops::LmHeadFp8 f;
    f.wq = wq.as<std::uint8_t>(), f.wqt = wqt.as<std::uint8_t>(), f.w_scale_inv = wm.scale_inv;
    f.x = scales.meta(1), f.dlogits = scales.meta(2);
    for (int chunk : {1024, 2048, 4096}) {
      const ops::LmHeadCeScratch L = ops::lm_head_ce_scratch(t, V, h, chunk, true);
      ops::DeviceBuffer scratch(0, L.bytes);
      const double ms = bench::median_ms(0, st, [&] {
        ops::lm_head_cross_entropy_fp8(dc, dxv, dwv, xv, f, V, targets.as<std::int32_t>(), chunk, 1.0f,
                                       loss.as<float>(), {scratch.get(), L.bytes});
      });
      std::printf("  fp8  chunk %5d: %8.2f ms  %6.0f TFLOP/s  scratch %.2f GB\n", chunk, ms, tflop / ms * 1e3,
                  L.bytes / 1e9);
    }
  }
  return 0;
}
