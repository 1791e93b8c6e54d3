// micro/membw_kernels.cu: copy/read/write/triad kernels (see membw_kernels.h for bytes per call).
#include <cuda_runtime.h>

#include "core/error.h"
#include "micro/membw_kernels.h"

namespace tb::micro {
namespace {

constexpr int kThreads = 512;
constexpr int kUnroll = 4;  // independent 16-byte loads in flight per thread

__global__ void read_kernel(const float4* __restrict__ a, float* __restrict__ sink, size_t n4) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  float acc = 0.f;
  for (; i + (kUnroll - 1) * stride < n4; i += kUnroll * stride) {
    float4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = a[i + u * stride];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc += v[u].x + v[u].y + v[u].z + v[u].w;
  }
  for (; i < n4; i += stride) acc += a[i].x + a[i].y + a[i].z + a[i].w;
  if (acc == 1234.5678f) sink[threadIdx.x] = acc;  // keeps the loads alive; practically never stores
}

__global__ void write_kernel(float4* __restrict__ b, size_t n4, float value) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const float4 v = make_float4(value, value, value, value);
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += stride) b[i] = v;
}

__global__ void triad_kernel(const float4* __restrict__ a, const float4* __restrict__ b, float4* __restrict__ c,
                             size_t n4, float s) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < n4; i += kUnroll * stride) {
    float4 x[kUnroll], y[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      x[u] = a[i + u * stride];
      y[u] = b[i + u * stride];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      c[i + u * stride] = make_float4(x[u].x + s * y[u].x, x[u].y + s * y[u].y, x[u].z + s * y[u].z, x[u].w + s * y[u].w);
  }
  for (; i < n4; i += stride)
    c[i] = make_float4(a[i].x + s * b[i].x, a[i].y + s * b[i].y, a[i].z + s * b[i].z, a[i].w + s * b[i].w);
}

__global__ void fill_kernel(float* p, size_t n, float seed) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    p[i] = seed + float(i % 1021) * 0.001f;
}

}  // namespace

double membw_bytes(MemKernel k, size_t n) {
  const double b = double(n) * sizeof(float);
  switch (k) {
    case MemKernel::copy: return 2 * b;
    case MemKernel::read: return b;
    case MemKernel::write: return b;
    case MemKernel::triad: return 3 * b;
  }
  return 0;
}

void launch_membw(MemKernel k, float* a, float* b, float* c, size_t n, int sms, cudaStream_t stream) {
  TB_REQUIRE(n % 4 == 0, "membw: buffer size must be a multiple of 16 bytes");
  const size_t n4 = n / 4;
  const int blocks = sms * (2048 / kThreads);  // one full wave of resident threads
  auto* a4 = reinterpret_cast<float4*>(a);
  auto* b4 = reinterpret_cast<float4*>(b);
  auto* c4 = reinterpret_cast<float4*>(c);
  switch (k) {
    case MemKernel::copy:  // the CUDA driver's device copy beat every kernel variant of bench/lab/membw_lab.cu
      TB_CHECK(cudaMemcpyAsync(b, a, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
      return;
    case MemKernel::read: read_kernel<<<blocks, kThreads, 0, stream>>>(a4, b, n4); break;
    case MemKernel::write: write_kernel<<<blocks, kThreads, 0, stream>>>(b4, n4, 1.5f); break;
    case MemKernel::triad: triad_kernel<<<blocks, kThreads, 0, stream>>>(a4, b4, c4, n4, 0.5f); break;
  }
  TB_CHECK_LAUNCH();
}

void fill_membw(float* p, size_t n, float seed, cudaStream_t stream) {
  fill_kernel<<<1024, 256, 0, stream>>>(p, n, seed);
  TB_CHECK_LAUNCH();
}

}  // namespace tb::micro
