// core/counter_rng.h: the counter-based random draws every backend shares (host and device alike, no state):
//   splitmix64(x)                          one 64-bit mixing step (Vigna's SplitMix64)
//   uniform_value(seed, i) = top 24 bits of splitmix64(splitmix64(seed) + i * 0x9E3779B97F4A7C15) * 2^-24   in [0, 1)
//   normal_value(seed, i)  = sqrt(-2 ln(1 - u_2i)) cos(2 pi u_2i+1)   (Box-Muller on the uniforms of 2i and 2i+1)
//   step_stream(seed, step) = splitmix64(seed ^ splitmix64(step))     a fresh stream per step of a seeded process
//                                                                     (LoRA's dropout masks, model/lora.h)
//   dropout_bits(dropout_row_key(stream, row), c)                     16 bits per element for dropout (below)
// Element i depends only on (seed, i): a stream can be drawn in any order, in pieces, on any device, and the model's
// initial weights (model/params.h) are the same on the CPU and the GPU (within the last bit of the fp32 log / cos).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define TB_HOST_DEVICE __host__ __device__
#else
#define TB_HOST_DEVICE
#endif

namespace tb {

TB_HOST_DEVICE inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline constexpr std::uint64_t kUniformStride = 0x9E3779B97F4A7C15ull;

// The uniform of the counter x = splitmix64(seed) + i · kUniformStride: a run of consecutive i steps x by the stride
// (kernels draw it so, with one splitmix64 per element instead of two, and no multiply).
TB_HOST_DEVICE inline float uniform_at(std::uint64_t x) { return float(splitmix64(x) >> 40) * 0x1p-24f; }

// The uniform in [0, 1) of element i.
TB_HOST_DEVICE inline float uniform_value(std::uint64_t seed, std::uint64_t i) {
  return uniform_at(splitmix64(seed) + i * kUniformStride);
}

// A standard normal draw for element i (the first uniform taken as 1 - u, in (0, 1]).
TB_HOST_DEVICE inline float normal_value(std::uint64_t seed, std::uint64_t i) {
  const float u1 = 1.0f - uniform_value(seed, 2 * i);
  const float u2 = uniform_value(seed, 2 * i + 1);
  return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795865f * u2);
}

// Wellons' lowbias32: a 32-bit integer hash (two 32-bit multiplies; cheap where 64-bit multiplies are not).
TB_HOST_DEVICE inline std::uint32_t hash32(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  return x ^ (x >> 16);
}

// Dropout's draws (LoRA's adapters, model/lora.h), 16 bits per element of a [rows, cols] whole:
//   key(row)     = splitmix64(splitmix64(stream) + row · kUniformStride)                      one per row
//   bits(row, c) = half (c & 1) of hash32((lo(key) + (c >> 1) · 0x9E3779B9) ^ hi(key))  a hash per column pair
//   keep         = bits >= dropout_threshold(p) = min(round(p · 65536), 65535);  scale 1 / (1 - threshold / 65536)
// (the effective rate threshold / 65536 is within 2^-17 of p, and the scale makes the kept sum unbiased for it).
// (in two parts where many rows share a stream: dropout_key_base once, then each row's key from it)
TB_HOST_DEVICE inline std::uint64_t dropout_key_base(std::uint64_t stream) { return splitmix64(stream); }
TB_HOST_DEVICE inline std::uint64_t dropout_row_key_from(std::uint64_t base, std::uint64_t row) {
  return splitmix64(base + row * kUniformStride);
}
TB_HOST_DEVICE inline std::uint64_t dropout_row_key(std::uint64_t stream, std::uint64_t row) {
  return dropout_row_key_from(dropout_key_base(stream), row);
}
TB_HOST_DEVICE inline std::uint32_t dropout_pair_bits(std::uint64_t key, std::uint32_t pair) {
  return hash32((std::uint32_t(key) + pair * 0x9E3779B9u) ^ std::uint32_t(key >> 32));
}
TB_HOST_DEVICE inline std::uint32_t dropout_bits(std::uint64_t key, std::uint64_t c) {
  return (dropout_pair_bits(key, std::uint32_t(c >> 1)) >> (16 * (c & 1))) & 0xFFFFu;
}
TB_HOST_DEVICE inline std::uint32_t dropout_threshold(double p) {
  const double t = p * 65536.0 + 0.5;
  return t >= 65535.0 ? 65535u : std::uint32_t(t);
}
TB_HOST_DEVICE inline double dropout_keep_scale(double p) { return 65536.0 / (65536.0 - dropout_threshold(p)); }

// The stream of step `step` of the process seeded `seed`.
TB_HOST_DEVICE inline std::uint64_t step_stream(std::uint64_t seed, std::uint64_t step) {
  return splitmix64(seed ^ splitmix64(step));
}

}  // namespace tb
