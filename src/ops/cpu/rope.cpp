// ops/cpu/rope.cpp: inv_freq (with Llama 3.1 scaling) and the rotate-half rotation; formulas in rope.h.
#include "ops/cpu/rope.h"

#include <cmath>
#include <numbers>
#include <string>

namespace tb::ops::cpu {
namespace {

// Rotates every pair of x by sign * position * inv_freq[i] (sign -1: the inverse rotation). The position of
// x[b, p, ...] is positions[p], or p when positions is empty.
template <class T>
void rotate(TensorView<T> x, std::span<const double> inv_freq, std::span<const std::int64_t> positions, double sign,
            const char* what) {
  TB_REQUIRE(x.rank() == 4, std::string(what) + ": x must be [batch, seq, heads, head_dim], got " + x.shape_str());
  const std::int64_t d = x.size(3), half = d / 2;
  TB_REQUIRE(d % 2 == 0 && std::int64_t(inv_freq.size()) == half,
             std::string(what) + ": head_dim " + std::to_string(d) + " must be even and have head_dim/2 = " +
                 std::to_string(inv_freq.size()) + " frequencies");
  TB_REQUIRE(positions.empty() || std::int64_t(positions.size()) == x.size(1),
             std::string(what) + ": " + std::to_string(positions.size()) + " positions for x " + x.shape_str());
  for (std::int64_t b = 0; b < x.size(0); ++b)
    for (std::int64_t p = 0; p < x.size(1); ++p)
      for (std::int64_t h = 0; h < x.size(2); ++h)
        for (std::int64_t i = 0; i < half; ++i) {
          const double pos = positions.empty() ? double(p) : double(positions[std::size_t(p)]);
          const double angle = sign * pos * inv_freq[i];
          const double c = std::cos(angle), s = std::sin(angle);
          const double x1 = x(b, p, h, i), x2 = x(b, p, h, i + half);
          x(b, p, h, i) = T(x1 * c - x2 * s);
          x(b, p, h, i + half) = T(x2 * c + x1 * s);
        }
}

}  // namespace

std::vector<double> rope_inv_freq(int head_dim, double theta, const RopeScaling* scaling) {
  TB_REQUIRE(head_dim >= 2 && head_dim % 2 == 0,
             "rope: head_dim must be even and >= 2, got " + std::to_string(head_dim));
  TB_REQUIRE(theta > 1, "rope: theta must be > 1, got " + std::to_string(theta));
  std::vector<double> inv(std::size_t(head_dim / 2));
  for (int i = 0; i < head_dim / 2; ++i) inv[std::size_t(i)] = std::pow(theta, -2.0 * i / head_dim);
  if (!scaling) return inv;
  const RopeScaling& s = *scaling;
  TB_REQUIRE(s.factor > 0 && s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor &&
                 s.original_max_position > 0,
             "rope: scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor, original_max_position > 0");
  const double orig = s.original_max_position;
  const double low_wavelen = orig / s.low_freq_factor, high_wavelen = orig / s.high_freq_factor;
  for (double& f : inv) {
    const double wavelen = 2 * std::numbers::pi / f;
    if (wavelen < high_wavelen) continue;  // high frequency: unchanged
    if (wavelen > low_wavelen) {
      f /= s.factor;  // low frequency: slowed by factor
    } else {
      const double smooth = (orig / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = (1 - smooth) * f / s.factor + smooth * f;
    }
  }
  return inv;
}

template <class T>
void rope_forward(TensorView<T> x, std::span<const double> inv_freq) {
  rotate(x, inv_freq, {}, +1.0, "rope_forward");
}

template <class T>
void rope_backward(TensorView<T> dx, std::span<const double> inv_freq) {
  rotate(dx, inv_freq, {}, -1.0, "rope_backward");
}

template <class T>
void rope_forward_at(TensorView<T> x, std::span<const double> inv_freq, std::span<const std::int64_t> positions) {
  TB_REQUIRE(x.rank() == 4 && std::int64_t(positions.size()) == x.size(1),
             "rope_forward_at: " + std::to_string(positions.size()) + " positions for x " + x.shape_str());
  rotate(x, inv_freq, positions, +1.0, "rope_forward_at");
}

template <class T>
void rope_backward_at(TensorView<T> dx, std::span<const double> inv_freq, std::span<const std::int64_t> positions) {
  TB_REQUIRE(dx.rank() == 4 && std::int64_t(positions.size()) == dx.size(1),
             "rope_backward_at: " + std::to_string(positions.size()) + " positions for x " + dx.shape_str());
  rotate(dx, inv_freq, positions, -1.0, "rope_backward_at");
}

template void rope_forward<float>(TensorView<float>, std::span<const double>);
template void rope_forward<double>(TensorView<double>, std::span<const double>);
template void rope_backward<float>(TensorView<float>, std::span<const double>);
template void rope_backward<double>(TensorView<double>, std::span<const double>);
template void rope_forward_at<float>(TensorView<float>, std::span<const double>, std::span<const std::int64_t>);
template void rope_forward_at<double>(TensorView<double>, std::span<const double>, std::span<const std::int64_t>);
template void rope_backward_at<float>(TensorView<float>, std::span<const double>, std::span<const std::int64_t>);
template void rope_backward_at<double>(TensorView<double>, std::span<const double>, std::span<const std::int64_t>);

}  // namespace tb::ops::cpu
