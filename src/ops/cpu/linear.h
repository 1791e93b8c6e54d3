// ops/cpu/linear.h: a linear layer in nn.Linear layout (CPU reference).
//   forward:  y[t,n] = sum_k x[t,k] * W[n,k] (+ b[n])        x: [T, K], W: [N, K], b: [N], y: [T, N]
//   backward: dx[t,k] = sum_n dy[t,n] * W[n,k]               (written; skipped when dx is empty)
//             dW[n,k] += sum_t dy[t,n] * x[t,k]              (accumulated; skipped when empty)
//             db[n]   += sum_t dy[t,n]                       (accumulated; skipped when empty)
#pragma once

#include "ops/cpu/common.h"

namespace tb::ops::cpu {

template <class T>
void linear_forward(TensorView<T> y, In<T> x, In<T> w, In<T> b = {});
template <class T>
void linear_backward(TensorView<T> dx, TensorView<T> dw, TensorView<T> db, In<T> dy, In<T> x, In<T> w);

}  // namespace tb::ops::cpu
