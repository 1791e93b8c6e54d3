// ops/cuda/activation.h: the MLP activations on the GPU, elementwise over rows, bf16 in and out, fp32 math.
// Semantics are those of ops/cpu/activation.h (the reference these kernels are tested against):
//   swiglu:  x: [t, 2f] = [gate | up] (the fused fc1 output, gate in columns [0, f)), y: [t, f]
//            y = silu(g) * u,  silu(g) = g * sigmoid(g)
//            dg = dy * u * sigmoid(g) * (1 + g * (1 - sigmoid(g))),  du = dy * silu(g);  dx = [dg | du]: [t, 2f]
//   gelu:    tanh form: y = 0.5 x (1 + tanh(c (x + 0.044715 x^3))), c = sqrt(2/pi); dx = dy * gelu'(x)
//   sqrelu:  y = max(x, 0)^2;  dx = dy * 2 max(x, 0)
// dx is written (activation gradients are never accumulated); dx may alias x (each thread reads its elements of x
// before writing the same positions of dx). Views are 2-D with contiguous rows (a row stride
// that is a multiple of 8 is allowed, e.g. a column slice of a wider buffer); widths are multiples of 8 (swiglu:
// f a multiple of 8, so 2f of 16). Transcendentals use the fast exp (__expf; tanh(u) = 1 - 2 / (exp(2u) + 1)),
// whose error (~1e-7 relative) is far below bf16's 2^-9.
//
// amax (optional, device float): *amax = max(*amax, max |output|) over the bf16 values written (NaN propagates; one
// atomic per block), so an FP8 cast of the output (ops/cuda/fp8.h, current scaling) needs no amax pass of its own.
//
// Ideal DRAM bytes per call (n = elements of y in the forward):
//   swiglu_forward: 6n (read 2n, write n, bf16)         swiglu_backward: 10n (read dy n and x 2n, write dx 2n)
//   gelu / sqrelu forward: 4n (read x, write y)         backward: 6n (read dy, x; write dx)
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "core/tensor.h"
#include "ops/cuda/fp8.h"

namespace tb::ops {

using bf16 = __nv_bfloat16;

enum class Activation { swiglu, gelu, sqrelu };
// The kind's *_forward / *_backward below.
void activation_forward(Activation act, TensorView<bf16> y, TensorView<const bf16> x, cudaStream_t stream,
                        float* amax = nullptr);
void activation_backward(Activation act, TensorView<bf16> dx, TensorView<const bf16> dy, TensorView<const bf16> x,
                         cudaStream_t stream, float* amax = nullptr);

void swiglu_forward(TensorView<bf16> y, TensorView<const bf16> x, cudaStream_t stream, float* amax = nullptr);
void swiglu_backward(TensorView<bf16> dx, TensorView<const bf16> dy, TensorView<const bf16> x, cudaStream_t stream,
                     float* amax = nullptr);

void gelu_forward(TensorView<bf16> y, TensorView<const bf16> x, cudaStream_t stream, float* amax = nullptr);
void gelu_backward(TensorView<bf16> dx, TensorView<const bf16> dy, TensorView<const bf16> x, cudaStream_t stream,
                   float* amax = nullptr);

void sqrelu_forward(TensorView<bf16> y, TensorView<const bf16> x, cudaStream_t stream, float* amax = nullptr);

// The forward straight into FP8, for an FP8 GEMM whose scale is known before the pass (delayed scaling): per element
// y = the bf16 value *_forward writes, then cast as fp8_cast does with the transposed copy: q = fp8(y scale) [t, n]
// (if cast.q) and qt [n, t], amax_out (if set) recording max |y|. y itself is not written: one pass reading x
// (read 2n or 4n, write 2n bytes) instead of the forward plus the cast (read 3n or 5n, write 4n). Bit for bit the
// forward followed by fp8_cast. cast.x must be null and cast.rows / cols the output's [t, n]; cast.amax_in is
// refused (current scaling needs the amax before the cast: use *_forward with amax, then fp8_cast).
void activation_forward_fp8(Activation act, TensorView<const bf16> x, const Fp8CastArgs& cast, cudaStream_t stream);
// The backward straight into FP8 likewise, for the FP8 GEMMs of the layer below (fc1's dgrad and wgrad): dx = the bf16
// value *_backward writes ([t, 2f] for swiglu, [t, n] otherwise: cast.rows / cols), cast to q and qt, amax_out
// recording max |dx|; dx is not written: one pass reading dy and x (swiglu: read 6f, write 4f bytes per row) instead
// of the backward plus the cast (read 10f, write 8f). Bit for bit the backward followed by fp8_cast; the same
// refusals as activation_forward_fp8.
void activation_backward_fp8(Activation act, TensorView<const bf16> dy, TensorView<const bf16> x,
                             const Fp8CastArgs& cast, cudaStream_t stream);
void sqrelu_backward(TensorView<bf16> dx, TensorView<const bf16> dy, TensorView<const bf16> x, cudaStream_t stream,
                     float* amax = nullptr);

}  // namespace tb::ops
