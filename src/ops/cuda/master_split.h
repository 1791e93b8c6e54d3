// ops/cuda/master_split.h: fp32 master weights stored as two 16-bit halves, exactly: the bf16 model weight
// (round to nearest, ties away from zero) and a 16-bit residual, so the model copy IS half of the master and a
// step writes 4 bytes of master per parameter instead of 4 (fp32) + 2 (bf16 copy).
//   hi  = bf16 of |p| rounded to nearest, ties away from zero (sign of p)  = the model weight the GEMMs read
//   lo  = (|p| - |hi|) / unit  as int16, unit = 2^(E - 150) for hi's exponent field E >= 1 (2^-149 for E = 0), and
//         2^(E - 151) when hi is a power of two and |p| lies below it (p in the binade under hi: rounding carried);
//         never below 2^-149.  |lo| <= 2^15 because |p| - |hi| is at most half a bf16 ulp, and a tie rounds away
//         from zero so the residual of a tie is -2^15 (fits), never +2^15.
//   join(hi, lo) = sign(hi) (|hi| + lo unit): exact for every finite p (the sum is the representable |p|); inf and
//   NaN keep hi (a NaN stays a NaN) and lo 0. Finite values that would round to the bf16 infinity (|p| >= 3.3961e38,
//   bits 0x7f7f8000 and up) saturate: hi is the largest bf16 and the residual is clamped (not exact there).
// unit is the fp32 spacing between |hi| and |p| (the one binade they share, or p's when rounding carried), so lo is
// the count of fp32 steps between them: lo = bits(|p|) - bits(|hi|), and join is bits(|hi|) + lo: integer arithmetic
// only (an ldexpf each way made AdamW issue-bound: 19 ms for 2.8 G parameters whether its moments were fp32 or bf16).
// Host and device (the CPU tests check every edge case against these same functions).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TB_MS_HD __host__ __device__ __forceinline__
#else
#define TB_MS_HD inline
#endif

namespace tb::ops {

struct MasterHalves {
  std::uint16_t hi;  // bf16 bits
  std::int16_t lo;
};

TB_MS_HD MasterHalves split_master(float p) {
  std::uint32_t u;
  memcpy(&u, &p, sizeof u);
  const std::uint32_t sign = u & 0x80000000u, mag = u & 0x7fffffffu;
  if (mag >= 0x7f800000u) {  // inf keeps its bits; a NaN stays a NaN (quiet bit set)
    const std::uint16_t hi = std::uint16_t(u >> 16) | (mag > 0x7f800000u ? 0x40 : 0);
    return {hi, 0};
  }
  std::uint32_t hmag = (mag + 0x8000u) >> 16;  // to nearest, ties away from zero
  if (hmag >= 0x7f80u) hmag = 0x7f7fu;        // would round to inf: saturate
  std::int32_t k = std::int32_t(mag) - std::int32_t(hmag << 16);  // fp32 steps from |hi| to |p|
  if (k > 32767) k = 32767;  // saturated values only
  return {std::uint16_t((sign >> 16) | hmag), std::int16_t(k)};
}

TB_MS_HD float join_master(std::uint16_t hi, std::int16_t lo) {
  const std::uint32_t hmag = hi & 0x7fffu;
  std::uint32_t bits = std::uint32_t(hi) << 16;
  if (hmag < 0x7f80u) bits = (bits & 0x80000000u) | std::uint32_t(std::int32_t(hmag << 16) + lo);
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace tb::ops
