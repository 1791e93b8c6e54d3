// ops/cuda/rope.h: rotary position embedding on the GPU, rotate-half convention, in place on a strided bf16 view.
// Semantics are those of ops/cpu/rope.h (the reference these kernels are tested against):
//   x: [batch, seq, heads, d]; the position of x[b, p, h, :] is p + pos_offset (pos_offset = 0: p; context
//   parallel: a rank's contiguous chunk starting at pos_offset; ops/cpu/rope.h's _at forms with positions
//   pos_offset + p); for i < d/2 the pair (x_i, x_{i+d/2}) is rotated by angle = pos * inv_freq[i]:
//   y_i = x_i cos - x_{i+d/2} sin,  y_{i+d/2} = x_{i+d/2} cos + x_i sin.
//   Backward applies the inverse rotation (angle -pos * inv_freq[i]) to dy, also in place.
//   positions (packed rows, core/packing.h): device int32 [batch * seq], the position of x[b, p, :, :] is
//   positions[b seq + p] instead (each token's in its segment; pos_offset 0).
// Q and K of a fused QKV buffer [tokens, (H + 2G) d] (Q heads, then K heads, then V heads) take ONE call: the view
//   TensorView<bf16>(qkv, {B, S, H + G, d}, {S (H + 2G) d, (H + 2G) d, d, 1}, 4) covers Q and K and skips V.
// inv_freq: [d/2] fp32 on the device, computed on the host by ops::cpu::rope_inv_freq (Llama 3.1 scaling
//   included) and copied with upload_rope_inv_freq at setup.
// Precision: angle = float(p + pos_offset) * inv_freq[i] in fp32 (positions below 2^24, exact in fp32) (the product's rounding is at most 2^-24 * angle, e.g.
//   5e-4 rad at p = 8191 for the unscaled first frequency, as in PyTorch/HF, which also build the angles in
//   fp32), then sincosf (full-range accurate), the rotation in fp32, one rounding to bf16.
// Layout: d a multiple of 16 (each thread rotates 8 pairs with two 16-byte accesses), strides of dims 0..2
//   multiples of 8, dim 3 contiguous, a 16-byte aligned start. Each thread computes the sines and cosines of its 8
//   frequencies for one token once and rotates every head of that token with them.
//
// Ideal DRAM bytes per call: 4 * batch * seq * heads * d (read and write x in place, bf16) + 2d (inv_freq).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

#include "core/tensor.h"

namespace tb::ops {

using bf16 = __nv_bfloat16;

void rope_forward(TensorView<bf16> x, TensorView<const float> inv_freq, cudaStream_t stream,
                  std::int64_t pos_offset = 0, const std::int32_t* positions = nullptr);
void rope_backward(TensorView<bf16> dx, TensorView<const float> inv_freq, cudaStream_t stream,
                   std::int64_t pos_offset = 0, const std::int32_t* positions = nullptr);

// Converts the host frequencies (ops::cpu::rope_inv_freq) to fp32 and copies them into dst ([d/2] fp32 on the
// device). A pageable-memory copy: call at setup, not inside a captured CUDA graph; the host data may be freed as
// soon as this returns.
void upload_rope_inv_freq(TensorView<float> dst, std::span<const double> inv_freq, cudaStream_t stream);

}  // namespace tb::ops
