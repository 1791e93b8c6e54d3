// bench/lab/membw_lab.cu: device-copy variants timed side by side (a kernel lab, not part of trainbench).
// Floor: 2 x bytes / HBM bandwidth (4.8 TB/s datasheet) -> 1 GiB copy >= 0.447 ms.
// Variants: grid-stride copy with 4 or 8 16-byte loads in flight per thread, with and without
// streaming cache hints (ld.global.cs / st.global.cs), block-contiguous chunks, and cudaMemcpyAsync.
#include <cuda_runtime.h>

#include <cstdio>
#include <functional>

#include "bench/loop.h"
#include "core/error.h"

namespace {
template <int U, bool CS>
__global__ void copy_strided(const float4* __restrict__ a, float4* __restrict__ b, size_t n4) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (U - 1) * stride < n4; i += U * stride) {
    float4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = CS ? __ldcs(a + i + u * stride) : a[i + u * stride];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (CS) __stcs(b + i + u * stride, v[u]);
      else b[i + u * stride] = v[u];
    }
  }
  for (; i < n4; i += stride) b[i] = a[i];
}

// Each block copies contiguous chunks of blockDim * U vectors.
template <int U>
__global__ void copy_chunked(const float4* __restrict__ a, float4* __restrict__ b, size_t n4) {
  const size_t chunk = size_t(blockDim.x) * U;
  for (size_t base = size_t(blockIdx.x) * chunk; base < n4; base += size_t(gridDim.x) * chunk) {
    float4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const size_t i = base + u * blockDim.x + threadIdx.x;
      if (i < n4) v[u] = __ldcs(a + i);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const size_t i = base + u * blockDim.x + threadIdx.x;
      if (i < n4) __stcs(b + i, v[u]);
    }
  }
}
}  // namespace

int main() {
  const size_t bytes = size_t(1) << 30, n4 = bytes / 16;
  int sms = 0;
  TB_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  float4 *a, *b;
  TB_CHECK(cudaMalloc(&a, bytes));
  TB_CHECK(cudaMalloc(&b, bytes));
  TB_CHECK(cudaMemset(a, 0x3f, bytes));
  cudaStream_t s;
  TB_CHECK(cudaStreamCreate(&s));
  tb::bench::LoopSpec loop;
  loop.warmup = 5;
  loop.iters = 30;
  auto run = [&](const char* name, const std::function<void()>& f) {
    const auto t = tb::bench::time_stream(loop, 0, s, [&](int) { f(); }).summary();
    std::printf("%-34s %7.3f TB/s  (median %.3f ms, p90 %.3f)\n", name, 2.0 * bytes / (t.median * 1e-3) / 1e12,
                t.median, t.p90);
  };
  for (int bpsm : {1, 2, 4, 8}) {
    char name[64];
    std::snprintf(name, sizeof name, "strided u4 512t x %d/SM", bpsm);
    run(name, [&] { copy_strided<4, false><<<sms * bpsm, 512, 0, s>>>(a, b, n4); });
    std::snprintf(name, sizeof name, "strided u8 512t x %d/SM", bpsm);
    run(name, [&] { copy_strided<8, false><<<sms * bpsm, 512, 0, s>>>(a, b, n4); });
    std::snprintf(name, sizeof name, "strided u4 cs 512t x %d/SM", bpsm);
    run(name, [&] { copy_strided<4, true><<<sms * bpsm, 512, 0, s>>>(a, b, n4); });
    std::snprintf(name, sizeof name, "strided u8 cs 512t x %d/SM", bpsm);
    run(name, [&] { copy_strided<8, true><<<sms * bpsm, 512, 0, s>>>(a, b, n4); });
    std::snprintf(name, sizeof name, "chunked u8 cs 256t x %d/SM", bpsm);
    run(name, [&] { copy_chunked<8><<<sms * bpsm * 2, 256, 0, s>>>(a, b, n4); });
  }
  run("cudaMemcpyAsync D2D", [&] { TB_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s)); });
  return 0;
}
