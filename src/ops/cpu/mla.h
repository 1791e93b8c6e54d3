// ops/cpu/mla.h: the data movement of multi-head latent attention around its SDPA (CPU reference; the CUDA kernels of
// ops/cuda/mla.h are tested against it). With T tokens, H heads, Dn = qk_nope_head_dim, Dr = qk_rope_head_dim:
//   mla_k_forward:   k[t, h, :Dn] = k_nope[t, h, :],  k[t, h, Dn:] = k_rope[t, :]   (one k_rope shared by every head)
//   mla_k_backward:  dk_nope[t, h, :] = dk[t, h, :Dn],  dk_rope[t, :] = sum_h dk[t, h, Dn:]   (written, not added)
// Shapes: k, dk [T, H, Dn + Dr]; k_nope, dk_nope [T, H, Dn]; k_rope, dk_rope [T, Dr]; any strides (k_nope is a view
// into the kv_up output [T, H (Dn + Dv)], k_rope into the kv_down output [T, Rkv + Dr]). The sum in double.
#pragma once

#include "ops/cpu/common.h"

namespace tb::ops::cpu {

template <class T>
void mla_k_forward(TensorView<T> k, In<T> k_nope, In<T> k_rope);
template <class T>
void mla_k_backward(TensorView<T> dk_nope, TensorView<T> dk_rope, In<T> dk);

}  // namespace tb::ops::cpu
