// train/row_rng.h: the random streams of the data sources (train/data.h, train/packed_data.h): row k of a stream draws
// from splitmix64 (Steele, Lea and Flood 2014) started at a state that mixes the seed and k, so a row depends on
// (seed, k) only, on any platform. And the markov task's chain: token v is followed by (base(v) + j) mod V, j uniform
// in [0, 4), base(v) a seeded hash of v (loss floor ln 4).
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>

namespace tb::train {

inline constexpr int kMarkovFanout = 4;  // successors per token in the markov task

inline std::uint64_t mix64(std::uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class RowRng {
 public:
  RowRng(std::uint64_t seed, std::int64_t row) : state_(mix64(seed ^ mix64(std::uint64_t(row) + 1))) {}
  std::uint64_t next() { return mix64(state_ += 0x9E3779B97F4A7C15ull); }
  // Uniform in [0, n): modulo of 64 bits, bias below n / 2^64 (negligible for any vocabulary or file).
  std::uint64_t below(std::uint64_t n) { return next() % n; }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // in [0, 1)
  double normal() {  // standard normal (Box-Muller)
    const double u = 1.0 - uniform(), v = uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * std::numbers::pi * v);
  }

 private:
  std::uint64_t state_;
};

// The markov task's successor of `prev` for the chain of `seed` over `vocab` tokens.
inline std::int32_t markov_successor(std::uint64_t seed, std::int32_t prev, int vocab, RowRng& rng) {
  const auto v = std::uint64_t(vocab);
  const std::uint64_t base = mix64(seed ^ 0xA5A5A5A5u ^ std::uint64_t(prev)) % v;
  return std::int32_t((base + rng.below(kMarkovFanout)) % v);
}

}  // namespace tb::train
