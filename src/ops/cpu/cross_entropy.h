// ops/cpu/cross_entropy.h: mean cross-entropy over tokens, and the chunked LM head fused with it (CPU reference).
//   logits: [t, V], targets: [t] in [0, V)
//   loss     = (1/t) sum_r [ lse(logits[r,:]) - logits[r, target[r]] ],  lse = log sum_v exp
//   dlogits  = (softmax(logits[r,:]) - onehot(target[r])) * grad_scale / t
// lm_head_cross_entropy: logits = x W^T (x: [t, h], W: [V, h]) computed `chunk` tokens at a time, so at most
// [chunk, V] logits exist at once (what the CUDA backend does; full [t, V] fp32 logits are never held):
//   per chunk c: logits_c = x_c W^T;  loss += sum over c's rows;  dlogits_c as above;
//                dx_c = dlogits_c W (written);  dW += dlogits_c^T x_c (accumulated)
// An empty dlogits / dx / dW view skips that gradient (both empty: forward only). Returns the mean loss.
// Loss weights (a loss mask with its normaliser; train/data.h has the ones packed data uses): with weights w [t],
//   loss     = sum_r w_r [ lse(logits[r,:]) - logits[r, target[r]] ]          (the weighted sum, not divided by t)
//   dlogits  = w_r (softmax(logits[r,:]) - onehot(target[r])) * grad_scale    (a row of weight 0: zeros)
#pragma once

#include <cstdint>
#include <span>

#include "ops/cpu/common.h"

namespace tb::ops::cpu {

template <class T>
double cross_entropy(TensorView<T> dlogits, In<T> logits, std::span<const std::int32_t> targets,
                     double grad_scale = 1.0, std::span<const double> weights = {});

template <class T>
double lm_head_cross_entropy(TensorView<T> dx, TensorView<T> dw, In<T> x, In<T> w,
                             std::span<const std::int32_t> targets, int chunk, double grad_scale = 1.0,
                             std::span<const double> weights = {});

}  // namespace tb::ops::cpu
