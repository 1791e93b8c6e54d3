// ops/cpu/norm.h: RMSNorm, LayerNorm and LayerNorm1p over the last dimension (CPU reference), alone and
// fused with the residual add of a pre-norm decoder. Rows x: [rows, dim]; w, b: [dim]; mean, rstd: [rows].
//   rmsnorm:     rstd = 1/sqrt(mean(x^2) + eps)            y = x * rstd * w              (no bias)
//   layernorm:   rstd = 1/sqrt(var(x) + eps), xh = (x - mean) * rstd      y = xh * w + b
//   layernorm1p: weight stored as w - 1 (zero-centred, Nemotron)        y = xh * (1 + w) + b
//   (b may be an empty view: no bias.) Backward, with g = dy * w_eff (w_eff = w, or 1 + w):
//   rmsnorm:     dx = rstd * (g - x * rstd^2 * mean(g * x))          dw += dy * x * rstd
//   layernorm:   dx = rstd * (g - mean(g) - xh * mean(g * xh))       dw += dy * xh,  db += dy
// Fused residual form (what the decoder uses): r = x + residual_in (residual_in empty: r = x),
// y = norm(r), and r is returned as the next residual. Backward: dr = dnorm(dy) + dr_next, where dr_next
// is the gradient reaching r through its use as the next residual (empty: none); dr is the gradient of
// both x and residual_in.
#pragma once

#include "ops/cpu/common.h"

namespace tb::ops::cpu {

enum class NormKind { rmsnorm, layernorm, layernorm1p };

// mean is written for the layernorms; rmsnorm leaves it alone (it may be an empty view).
template <class T>
void norm_forward(NormKind kind, TensorView<T> y, TensorView<T> mean, TensorView<T> rstd, In<T> x, In<T> w,
                  In<T> b, double eps);
// dx written; dw, db accumulated (db must be empty when there is no bias).
template <class T>
void norm_backward(NormKind kind, TensorView<T> dx, TensorView<T> dw, TensorView<T> db, In<T> dy, In<T> x,
                   In<T> w, In<T> mean, In<T> rstd);

template <class T>
void add_norm_forward(NormKind kind, TensorView<T> y, TensorView<T> r, TensorView<T> mean, TensorView<T> rstd,
                      In<T> x, In<T> residual_in, In<T> w, In<T> b, double eps);
template <class T>
void add_norm_backward(NormKind kind, TensorView<T> dr, TensorView<T> dw, TensorView<T> db, In<T> dy,
                       In<T> dr_next, In<T> r, In<T> w, In<T> mean, In<T> rstd);

}  // namespace tb::ops::cpu
