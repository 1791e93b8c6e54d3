// ops/cpu/rope.h: rotary position embedding on Q or K (CPU reference), rotate-half convention.
//   x: [batch, seq, heads, head_dim] (any strides: Q and K may be views into a fused QKV buffer);
//   the position of x[b, p, h, :] is p. For i < d/2 the pair (x_i, x_{i+d/2}) is rotated by p * inv_freq[i]:
//     y_i       = x_i * cos - x_{i+d/2} * sin
//     y_{i+d/2} = x_{i+d/2} * cos + x_i * sin
//   Backward is the inverse rotation (angle -p * inv_freq[i]) applied to dy. Both work in place.
//   The _at forms take the positions: x[b, j, h, :] is at position positions[j] (positions.size() == seq; context
//   parallel holds non-contiguous chunks of the sequence).
// Frequencies: inv_freq[i] = theta^(-2i/d). Llama 3.1 scaling (factor, low, high, original context L):
//   wavelen = 2 pi / inv_freq[i]
//   wavelen < L / high: unchanged;  wavelen > L / low: inv_freq / factor;
//   else smooth = (L / wavelen - low) / (high - low), inv_freq = (1 - smooth) * inv_freq / factor + smooth * inv_freq
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ops/cpu/common.h"

namespace tb::ops::cpu {

struct RopeScaling {
  double factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
  int original_max_position = 8192;
};

// head_dim / 2 frequencies; scaling == nullptr: unscaled.
std::vector<double> rope_inv_freq(int head_dim, double theta, const RopeScaling* scaling = nullptr);

template <class T>
void rope_forward(TensorView<T> x, std::span<const double> inv_freq);
template <class T>
void rope_backward(TensorView<T> dx, std::span<const double> inv_freq);
template <class T>
void rope_forward_at(TensorView<T> x, std::span<const double> inv_freq, std::span<const std::int64_t> positions);
template <class T>
void rope_backward_at(TensorView<T> dx, std::span<const double> inv_freq, std::span<const std::int64_t> positions);

}  // namespace tb::ops::cpu
