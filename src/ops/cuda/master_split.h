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
// Host and device (the CPU tests check every edge case against these same functions).
#pragma once

#include <math.h>

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

TB_MS_HD int master_unit_exp(std::uint32_t hi_mag, bool below) {
  const int e = int(hi_mag >> 7);
  if (e == 0) return -149;
  const int u = e - 150 - ((below && (hi_mag & 0x7f) == 0) ? 1 : 0);
  return u < -149 ? -149 : u;
}

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
  float fm, fh;
  const std::uint32_t hbits = hmag << 16;
  memcpy(&fm, &mag, sizeof fm);
  memcpy(&fh, &hbits, sizeof fh);
  const float diff = fm - fh;  // exact (Sterbenz), at most half a bf16 ulp
  const int ue = master_unit_exp(hmag, diff < 0);
  float k = ldexpf(diff, -ue);  // an integer in [-32768, 32767] (but for saturated values)
  if (k > 32767.0f) k = 32767.0f;
  return {std::uint16_t((sign >> 16) | hmag), std::int16_t(k)};
}

TB_MS_HD float join_master(std::uint16_t hi, std::int16_t lo) {
  const std::uint32_t hmag = hi & 0x7fffu;
  const std::uint32_t bits = std::uint32_t(hi) << 16;
  float h;
  memcpy(&h, &bits, sizeof h);
  if (hmag >= 0x7f80u) return h;
  const std::uint32_t mbits = hmag << 16;
  float fh;
  memcpy(&fh, &mbits, sizeof fh);
  const float mag = fh + ldexpf(float(lo), master_unit_exp(hmag, lo < 0));
  return (hi & 0x8000u) ? -mag : mag;
}

}  // namespace tb::ops
