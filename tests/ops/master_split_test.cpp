// Tests ops/cuda/master_split.h on the host: join(split(p)) == p bit for bit for every finite p (10M random bit
// patterns, every exponent, plus the edge cases: zeros, denormals, the smallest normal, values just below powers of
// two whose rounding carries into the next binade, exact ties, the largest floats, inf, NaN); hi is p rounded to the
// nearest bf16 (the host conversion float_to_bf16, which breaks ties to even: the two differ only on exact ties,
// where split rounds away from zero). Finite values that would round to the bf16 infinity saturate.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "ops/cuda/master_split.h"

namespace {

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

void check(float p) {
  const tb::ops::MasterHalves h = tb::ops::split_master(p);
  const float back = tb::ops::join_master(h.hi, h.lo);
  if (std::isnan(p)) {
    ASSERT_TRUE(std::isnan(back));
    return;
  }
  if (std::isfinite(p) && (bits_of(p) & 0x7fffffffu) >= 0x7f7f8000u) {  // saturates (documented): hi = bf16 max
    ASSERT_EQ(h.hi & 0x7fffu, 0x7f7fu);
    return;
  }
  ASSERT_EQ(bits_of(back), bits_of(p)) << "p " << p << " bits " << std::hex << bits_of(p) << " hi " << h.hi << " lo "
                                      << std::dec << h.lo;
  if (std::isinf(p) || std::fabs(p) >= 3.3e38f) return;
  const bool tie = (bits_of(p) & 0xffffu) == 0x8000u;
  if (!tie) {
    ASSERT_EQ(h.hi, tb::float_to_bf16(p)) << "p " << p;  // round to nearest
  } else {
    ASSERT_EQ(h.hi & 0x7fffu, ((bits_of(p) & 0x7fffffffu) + 0x8000u) >> 16) << "tie away from zero " << p;
  }
}

TEST(MasterSplit, RoundTripsRandomBitPatterns) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<std::uint32_t> u;
  for (int i = 0; i < 10'000'000; ++i) check(from_bits(u(rng)));
}

TEST(MasterSplit, RoundTripsEdgeCases) {
  std::vector<float> cases = {0.0f, -0.0f, std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min(),
                              std::numeric_limits<float>::min(), -std::numeric_limits<float>::min(),
                              std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                              std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN(), from_bits(0x7f800001u), 1.0f, -1.0f,
                              from_bits(0x3f808000u), from_bits(0xbf808000u), from_bits(0x3f818000u), 3.3895e38f};
  for (int e = 0; e < 255; ++e)  // just below and above every power of two, and its ties
    for (std::uint32_t m : {0x7fffffu, 0x7f8000u, 0x7f7fffu, 0x7f8001u, 0x000000u, 0x000001u, 0x008000u, 0x7fc000u})
      for (std::uint32_t s : {0u, 0x80000000u}) cases.push_back(from_bits(s | (std::uint32_t(e) << 23) | m));
  for (std::uint32_t m = 0; m < 0x800000u; m += 0x1235u) cases.push_back(from_bits(m));  // denormals
  for (float p : cases) check(p);
}

}  // namespace
