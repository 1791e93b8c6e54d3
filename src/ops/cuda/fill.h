// ops/cuda/fill.h: random inputs (never zeros; random inputs are the rule in this project), normal draws for
// model initialisation, and the fp32 -> bf16 cast that makes the model copy of fp32 master weights.
//   x[i] = fma(hi - lo, u_i, lo),  u_i = top 24 bits of splitmix64(splitmix64(seed) + i * 0x9E3779B97F4A7C15) * 2^-24
// u_i is in [0, 1); x[i] is stored in the buffer's type with round-to-nearest-even (fp8: saturating to
// the finite range). Counter-based: element i depends only on (seed, i), never on the launch shape or
// the vector width, so the host can recompute any element (fill_value) and different seeds give
// unrelated streams.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

#if defined(__CUDACC__)
#define TB_HOST_DEVICE __host__ __device__
#else
#define TB_HOST_DEVICE
#endif

namespace tb::ops {

TB_HOST_DEVICE inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The float of element i before it is rounded to the storage type.
TB_HOST_DEVICE inline float fill_value(std::uint64_t seed, std::uint64_t i, float lo, float hi) {
  const std::uint64_t r = splitmix64(splitmix64(seed) + i * 0x9E3779B97F4A7C15ull);
  const float u = float(r >> 40) * 0x1p-24f;
  return fmaf(hi - lo, u, lo);
}

// A standard normal draw for element i (Box-Muller on the uniforms of 2i and 2i+1, first in (0, 1]):
//   z_i = sqrt(-2 ln(1 - u_2i)) cos(2 pi u_2i+1)
TB_HOST_DEVICE inline float normal_value(std::uint64_t seed, std::uint64_t i) {
  const float u1 = 1.0f - fill_value(seed, 2 * i, 0.0f, 1.0f);
  const float u2 = fill_value(seed, 2 * i + 1, 0.0f, 1.0f);
  return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795865f * u2);
}

// n elements of type t at dst (device, 16-byte aligned), uniform in [lo, hi]; lo < hi, both finite in t.
// Floating types only (f64 f32 tf32 f16 bf16 e4m3 e5m2; tf32 is stored as f32, unrounded).
void fill_uniform(void* dst, DType t, std::size_t n, std::uint64_t seed, float lo, float hi, cudaStream_t stream);

// n fp32 values at dst (device, 4-byte aligned): dst[i] = mean + std * normal_value(seed, first + i) (model
// initialisation; `first` lets a long stream be drawn in pieces).
void fill_normal(float* dst, std::size_t n, std::uint64_t seed, float mean, float std, cudaStream_t stream,
                 std::uint64_t first = 0);

// dst[i] = bf16(src[i]) rounded to nearest even, n elements (device pointers, 4-byte aligned).
void cast_f32_to_bf16(void* dst, const float* src, std::size_t n, cudaStream_t stream);

}  // namespace tb::ops
