// ops/cuda/mla.h: the data movement of multi-head latent attention around its SDPA on the GPU (bf16). Semantics are
// those of ops/cpu/mla.h (the reference these kernels are tested against), T tokens, H heads:
//   mla_k_forward:   k[t, h, :Dn] = k_nope[t, h, :],  k[t, h, Dn:] = k_rope[t, :]   (k_rope broadcast to every head)
//   mla_k_backward:  dk_nope[t, h, :] = dk[t, h, :Dn],  dk_rope[t, :] = sum_h dk[t, h, Dn:]   (written; the sum in
//                    fp32 in head order, one rounding to bf16: deterministic)
// Shapes: k, dk [T, H, Dn + Dr]; k_nope, dk_nope [T, H, Dn]; k_rope, dk_rope [T, Dr]; strided views (k_nope inside the
// kv_up output [T, H (Dn + Dv)], k_rope inside the kv_down output [T, Rkv + Dr]) whose last dimension is contiguous,
// with Dn, Dr and every other stride multiples of 8 and 16-byte aligned starts (16-byte accesses). One thread per
// token and 8-column chunk of a head, looping over the heads (the shared k_rope chunk read once, or summed in
// registers). The values (V) need no kernel: cuDNN reads and writes them in place through their strides.
// Ideal DRAM bytes: forward 2 T (H Dn + Dr) read + 2 T H (Dn + Dr) written; backward 2 T H (Dn + Dr) read +
// 2 T (H Dn + Dr) written.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "core/tensor.h"

namespace tb::ops {

using bf16 = __nv_bfloat16;

void mla_k_forward(TensorView<bf16> k, TensorView<const bf16> k_nope, TensorView<const bf16> k_rope,
                   cudaStream_t stream);
void mla_k_backward(TensorView<bf16> dk_nope, TensorView<bf16> dk_rope, TensorView<const bf16> dk,
                    cudaStream_t stream);

}  // namespace tb::ops
