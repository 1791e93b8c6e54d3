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

#include "core/counter_rng.h"
#include "core/dtype.h"

namespace tb::ops {

using tb::normal_value;
using tb::splitmix64;

// The float of element i before it is rounded to the storage type.
TB_HOST_DEVICE inline float fill_value(std::uint64_t seed, std::uint64_t i, float lo, float hi) {
  return fmaf(hi - lo, uniform_value(seed, i), lo);
}

// n elements of type t at dst (device, 16-byte aligned), uniform in [lo, hi]; lo < hi, both finite in t.
// Floating types only (f64 f32 tf32 f16 bf16 e4m3 e5m2; tf32 is stored as f32, unrounded).
void fill_uniform(void* dst, DType t, std::size_t n, std::uint64_t seed, float lo, float hi, cudaStream_t stream);

// n fp32 values at dst (device, 4-byte aligned): dst[i] = fma(std, normal_value(seed, first + i), mean) (model
// initialisation; `first` lets a long stream be drawn in pieces).
void fill_normal(float* dst, std::size_t n, std::uint64_t seed, float mean, float std, cudaStream_t stream,
                 std::uint64_t first = 0);
// The same with uniform draws: dst[i] = fill_value(seed, first + i, lo, hi) (a uniform init, model/params.h).
void fill_uniform_f32(float* dst, std::size_t n, std::uint64_t seed, float lo, float hi, cudaStream_t stream,
                      std::uint64_t first = 0);

// dst[i] = bf16(src[i]) rounded to nearest even, n elements (device pointers, 4-byte aligned).
void cast_f32_to_bf16(void* dst, const float* src, std::size_t n, cudaStream_t stream);

}  // namespace tb::ops
