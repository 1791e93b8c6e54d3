// model/decoder_common.h: internal helpers of the dense decoder's implementations (the CPU one,
// parallel/decoder_cpu_parallel*.cpp, which model/decoder_cpu.h wraps for one rank; the CUDA one; the CPU trainer):
// views of slots and scratch buffers, the config-to-op mappings (norm kind, activation, RoPE frequencies) and the
// token-id check. Not a public API: no layer above parallel/ includes it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "model/config.h"
#include "model/param_layout.h"
#include "ops/cpu/activation.h"
#include "ops/cpu/norm.h"
#include "ops/cpu/rope.h"

namespace tb::model::detail {

inline ops::cpu::NormKind norm_kind(Norm n) {
  switch (n) {
    case Norm::rmsnorm: return ops::cpu::NormKind::rmsnorm;
    case Norm::layernorm: return ops::cpu::NormKind::layernorm;
    case Norm::layernorm1p: return ops::cpu::NormKind::layernorm1p;
  }
  return ops::cpu::NormKind::rmsnorm;
}

// RoPE frequencies of the config (empty for learned positions), for the rotated width (MLA: qk_rope_head_dim).
inline std::vector<double> rope_inv_freq(const ModelConfig& c) {
  if (c.pos != Pos::rope) return {};
  const ops::cpu::RopeScaling s{c.rope_scaling.factor, c.rope_scaling.low_freq_factor, c.rope_scaling.high_freq_factor,
                                c.rope_scaling.original_max_position};
  return ops::cpu::rope_inv_freq(c.rope_dim(), c.rope_theta, c.rope_scaling.enabled ? &s : nullptr);
}

// The view of a slot inside a flat buffer (an empty view for an absent slot, index -1).
template <class T>
TensorView<T> slot_view(T* buf, const DenseLayout& L, int index) {
  if (index < 0) return {};
  const Slot& s = L.slots[std::size_t(index)];
  T* p = buf + s.offset;
  return s.shape.size() == 1 ? TensorView<T>(p, {s.shape[0]}) : TensorView<T>(p, {s.shape[0], s.shape[1]});
}

template <class T>
TensorView<T> slot_view(std::vector<T>& buf, const DenseLayout& L, int index) {
  return slot_view(buf.data(), L, index);
}

// A [rows, cols] (or [n]) contiguous view of v, resized to fit.
template <class T>
TensorView<T> mat(std::vector<T>& v, std::int64_t rows, std::int64_t cols) {
  v.resize(std::size_t(rows * cols));
  return TensorView<T>(v.data(), {rows, cols});
}

template <class T>
TensorView<T> vec(std::vector<T>& v, std::int64_t n) {
  v.resize(std::size_t(n));
  return TensorView<T>(v.data(), {n});
}

// [batch, seq, heads, head_dim] view of `heads` heads starting at column `col` of a [batch * seq, width] buffer.
template <class T>
TensorView<T> heads_view(std::vector<T>& v, std::int64_t col, std::int64_t batch, std::int64_t seq,
                         std::int64_t heads, std::int64_t head_dim, std::int64_t width) {
  return TensorView<T>(v.data() + col, Shape{batch, seq, heads, head_dim}, Shape{seq * width, width, head_dim, 1}, 4);
}

template <class T>
void act_forward(Act a, TensorView<T> y, TensorView<const T> x) {
  switch (a) {
    case Act::swiglu: return ops::cpu::swiglu_forward<T>(y, x);
    case Act::gelu: return ops::cpu::gelu_forward<T>(y, x);
    case Act::sqrelu: return ops::cpu::sqrelu_forward<T>(y, x);
  }
}

template <class T>
void act_backward(Act a, TensorView<T> dx, TensorView<const T> dy, TensorView<const T> x) {
  switch (a) {
    case Act::swiglu: return ops::cpu::swiglu_backward<T>(dx, dy, x);
    case Act::gelu: return ops::cpu::gelu_backward<T>(dx, dy, x);
    case Act::sqrelu: return ops::cpu::sqrelu_backward<T>(dx, dy, x);
  }
}

// Rows of the fc1 weight: gate and up for swiglu, up alone otherwise.
inline std::int64_t fc1_rows(const ModelConfig& c) { return c.act == Act::swiglu ? 2 * std::int64_t(c.ffn) : c.ffn; }

inline void check_ids(std::span<const std::int32_t> ids, int vocab, const char* what) {
  for (std::size_t i = 0; i < ids.size(); ++i)
    TB_REQUIRE(ids[i] >= 0 && ids[i] < vocab, std::string("dense decoder: ") + what + " " +
                                                  std::to_string(ids[i]) + " at index " + std::to_string(i) +
                                                  " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
}

}  // namespace tb::model::detail
