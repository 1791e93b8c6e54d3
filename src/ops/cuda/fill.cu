// ops/cuda/fill.cu: see fill.h. One grid-stride kernel per storage type; each thread writes 16 bytes at a
// time (8 bf16, 16 fp8, ...); the last n % width elements are written one by one.
#include "ops/cuda/fill.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <string>

#include "core/error.h"

namespace tb::ops {
namespace {

struct ToF64 {
  using T = double;
  __device__ T operator()(float v) const { return v; }
};
struct ToF32 {
  using T = float;
  __device__ T operator()(float v) const { return v; }
};
struct ToBF16 {
  using T = unsigned short;
  __device__ T operator()(float v) const { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
};
struct ToF16 {
  using T = unsigned short;
  __device__ T operator()(float v) const { return __half_as_ushort(__float2half_rn(v)); }
};
template <__nv_fp8_interpretation_t Kind>
struct ToFP8 {
  using T = __nv_fp8_storage_t;
  __device__ T operator()(float v) const { return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, Kind); }
};

template <class Conv>
__global__ void fill_kernel(typename Conv::T* __restrict__ dst, std::size_t n, std::uint64_t seed, float lo,
                            float hi) {
  using T = typename Conv::T;
  constexpr int kVec = 16 / sizeof(T);
  struct alignas(16) Pack {
    T v[kVec];
  };
  const Conv conv;
  const std::size_t packs = n / kVec;
  const std::size_t tid = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t p = tid; p < packs; p += stride) {
    Pack pack;
#pragma unroll
    for (int j = 0; j < kVec; ++j) pack.v[j] = conv(fill_value(seed, p * kVec + j, lo, hi));
    reinterpret_cast<Pack*>(dst)[p] = pack;
  }
  const std::size_t tail = packs * kVec + tid;  // fewer than kVec elements, one per thread
  if (tail < n) dst[tail] = conv(fill_value(seed, tail, lo, hi));
}

template <class Conv>
void launch(void* dst, std::size_t n, std::uint64_t seed, float lo, float hi, cudaStream_t stream) {
  constexpr int kThreads = 256;
  constexpr std::size_t kVec = 16 / sizeof(typename Conv::T);
  const std::size_t blocks = std::clamp<std::size_t>((n / kVec + kThreads - 1) / kThreads, 1, 8192);
  fill_kernel<Conv><<<unsigned(blocks), kThreads, 0, stream>>>(static_cast<typename Conv::T*>(dst), n, seed, lo, hi);
  TB_CHECK_LAUNCH();
}

__global__ void fill_normal_kernel(float* __restrict__ dst, std::size_t n, std::uint64_t seed, float mean,
                                   float std, std::uint64_t first) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = fmaf(std, normal_value(seed, first + i), mean);
}

__global__ void fill_uniform_f32_kernel(float* __restrict__ dst, std::size_t n, std::uint64_t seed, float lo, float hi,
                                        std::uint64_t first) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = fill_value(seed, first + i, lo, hi);
}

__global__ void cast_kernel(unsigned short* __restrict__ dst, const float* __restrict__ src, std::size_t n) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = __bfloat16_as_ushort(__float2bfloat16_rn(src[i]));
}

unsigned grid_for(std::size_t n) { return unsigned(std::clamp<std::size_t>((n + 255) / 256, 1, 8192)); }

}  // namespace

void fill_normal(float* dst, std::size_t n, std::uint64_t seed, float mean, float std, cudaStream_t stream,
                 std::uint64_t first) {
  if (n == 0) return;
  TB_REQUIRE(dst && reinterpret_cast<std::uintptr_t>(dst) % 4 == 0, "fill_normal: dst must be a 4-byte aligned "
                                                                     "device pointer");
  TB_REQUIRE(std >= 0 && std::isfinite(mean) && std::isfinite(std), "fill_normal: needs a finite mean and std >= 0");
  fill_normal_kernel<<<grid_for(n), 256, 0, stream>>>(dst, n, seed, mean, std, first);
  TB_CHECK_LAUNCH();
}

void fill_uniform_f32(float* dst, std::size_t n, std::uint64_t seed, float lo, float hi, cudaStream_t stream,
                      std::uint64_t first) {
  if (n == 0) return;
  TB_REQUIRE(dst && reinterpret_cast<std::uintptr_t>(dst) % 4 == 0 && std::isfinite(lo) && std::isfinite(hi) && lo < hi,
             "fill_uniform_f32: needs a 4-byte aligned device pointer and finite lo < hi");
  fill_uniform_f32_kernel<<<grid_for(n), 256, 0, stream>>>(dst, n, seed, lo, hi, first);
  TB_CHECK_LAUNCH();
}

void cast_f32_to_bf16(void* dst, const float* src, std::size_t n, cudaStream_t stream) {
  if (n == 0) return;
  TB_REQUIRE(dst && src && reinterpret_cast<std::uintptr_t>(dst) % 4 == 0 &&
                 reinterpret_cast<std::uintptr_t>(src) % 4 == 0,
             "cast_f32_to_bf16: dst and src must be 4-byte aligned device pointers");
  cast_kernel<<<grid_for(n), 256, 0, stream>>>(static_cast<unsigned short*>(dst), src, n);
  TB_CHECK_LAUNCH();
}

void fill_uniform(void* dst, DType t, std::size_t n, std::uint64_t seed, float lo, float hi, cudaStream_t stream) {
  if (n == 0) return;
  const std::string what = "fill_uniform(" + std::string(dtype_name(t)) + "): ";
  TB_REQUIRE(dst && reinterpret_cast<std::uintptr_t>(dst) % 16 == 0,
             what + "dst must be a 16-byte aligned device pointer (cudaMalloc'ed)");
  TB_REQUIRE(lo < hi, what + "needs lo < hi (got " + std::to_string(lo) + ", " + std::to_string(hi) + ")");
  TB_REQUIRE(t == DType::i32 || (std::fabs(lo) <= dtype_max(t) && std::fabs(hi) <= dtype_max(t)),
             what + "lo and hi must be finite in the type (|x| <= " + std::to_string(dtype_max(t)) + ")");
  switch (t) {
    case DType::f64: return launch<ToF64>(dst, n, seed, lo, hi, stream);
    case DType::f32:
    case DType::tf32: return launch<ToF32>(dst, n, seed, lo, hi, stream);
    case DType::bf16: return launch<ToBF16>(dst, n, seed, lo, hi, stream);
    case DType::f16: return launch<ToF16>(dst, n, seed, lo, hi, stream);
    case DType::e4m3: return launch<ToFP8<__NV_E4M3>>(dst, n, seed, lo, hi, stream);
    case DType::e5m2: return launch<ToFP8<__NV_E5M2>>(dst, n, seed, lo, hi, stream);
    case DType::i32: break;
  }
  raise_config(what + "not a floating type; fill_uniform fills f64 f32 tf32 f16 bf16 e4m3 e5m2");
}

}  // namespace tb::ops
