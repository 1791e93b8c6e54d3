// ops/cpu/lora.h: one LoRA adapter's product and its input dropout (CPU reference; model/lora.h has the model's
// formula). x [rows, in], A [r, in], B [out, r], y and dy [rows, out] (the adapter's block of its linear's output:
// rows may be strided), z [rows, r].
//   dropout   xd[t, j] = x[t, j] · keep(t, j) · s,
//             keep(t, j) = dropout_bits(dropout_row_key(stream, index[t]), col0 + j) >= dropout_threshold(p),
//             s = dropout_keep_scale(p) ≈ 1 / (1 - p)  (core/counter_rng.h; p = 0 keeps every element: xd = x); its
//             backward dx[t, j] += dxd[t, j] · keep(t, j) · s
//   forward   z = xd A^T;  y += scale · z B^T
//   backward  dz = scale · dy B;  dB += scale · dy^T z;  dA += dz^T xd;  dxd = dz A (written; skipped when empty)
#pragma once

#include <cstdint>
#include <span>

#include "ops/cpu/common.h"

namespace tb::ops::cpu {

// Which elements a dropout keeps: row t of the input is row index[t] of a [*, cols] whole (cols: the full input
// width), its columns start at col0 of it.
struct DropoutMask {
  std::uint64_t stream = 0;
  std::span<const std::int64_t> index;
  std::int64_t col0 = 0, cols = 0;
  double p = 0;
  bool keeps(std::int64_t t, std::int64_t j) const;
};

template <class T>
void lora_dropout_forward(TensorView<T> xd, In<T> x, const DropoutMask& m);
template <class T>
void lora_dropout_backward(TensorView<T> dx, In<T> dxd, const DropoutMask& m);  // accumulates into dx

template <class T>
void lora_forward(TensorView<T> y, TensorView<T> z, In<T> xd, In<T> a, In<T> b, double scale);
template <class T>
void lora_backward(TensorView<T> dxd, TensorView<T> da, TensorView<T> db, In<T> dy, In<T> xd, In<T> z, In<T> a,
                   In<T> b, double scale);

}  // namespace tb::ops::cpu
