// ops/cpu/activation.h: the MLP activations (CPU reference), elementwise over rows; dx is written.
//   swiglu:  x: [t, 2f] holds gate in columns [0, f) and up in columns [f, 2f) (the fused fc1 output:
//            rows [0, f) of the fc1 weight are the gate projection, rows [f, 2f) the up projection)
//            y[t,i] = silu(g) * u,  silu(g) = g * sigmoid(g),  y: [t, f]
//            dg = dy * u * sigmoid(g) * (1 + g * (1 - sigmoid(g))),  du = dy * silu(g)
//   gelu:    tanh approximation (GPT-2/3, Megatron): y = 0.5 x (1 + tanh(c (x + 0.044715 x^3))), c = sqrt(2/pi)
//            dy/dx = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) c (1 + 3 * 0.044715 x^2),  u = c (x + 0.044715 x^3)
//   sqrelu:  y = max(x, 0)^2,  dy/dx = 2 max(x, 0)
#pragma once

#include "ops/cpu/common.h"

namespace tb::ops::cpu {

template <class T>
void swiglu_forward(TensorView<T> y, In<T> x);
template <class T>
void swiglu_backward(TensorView<T> dx, In<T> dy, In<T> x);

template <class T>
void gelu_forward(TensorView<T> y, In<T> x);
template <class T>
void gelu_backward(TensorView<T> dx, In<T> dy, In<T> x);

template <class T>
void sqrelu_forward(TensorView<T> y, In<T> x);
template <class T>
void sqrelu_backward(TensorView<T> dx, In<T> dy, In<T> x);

}  // namespace tb::ops::cpu
