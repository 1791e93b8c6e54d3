// ops/cpu/adamw.h: the CPU reference AdamW step, global gradient norm and norm clipping.
//
// AdamW with decoupled weight decay, exactly as torch.optim.AdamW (amsgrad off, maximize off). Step t >= 1:
//   m = b1 m + (1 - b1) g                v = b2 v + (1 - b2) g^2
//   mhat = m / (1 - b1^t)                vhat = v / (1 - b2^t)
//   p  -= lr * (mhat / (sqrt(vhat) + eps) + wd * p)      (p on the right: the value before this step)
// Per element the arithmetic is done in double and the results (p, m, v) are stored in the span's type, so
// the float overload is the reference for fp32 master weights with fp32 moments and the double one serves
// gradient checks.
//
// Weight-decay mask: decay_mask has one byte per parameter; 0 = no decay (norm gains, biases), anything else
// = decay with weight_decay. An empty mask decays every parameter.
//
// grad_norm:      ||g||_2 over all elements, accumulated in double.
// clip_grad_norm: as torch.nn.utils.clip_grad_norm_: when norm > max_norm, g *= max_norm / (norm + 1e-6);
//                 returns the norm before clipping. A non-finite norm leaves g untouched (the caller decides
//                 whether to skip the step).
#pragma once

#include <cstdint>
#include <span>

namespace tb::ops::cpu {

struct AdamWParams {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;  // torch.optim.AdamW's defaults throughout
};

// step: 1-based count of optimizer steps taken including this one (the t of the bias correction).
// params, grads, m, v: the same length; m and v start at zero before step 1.
void adamw_step(std::span<float> params, std::span<const float> grads, std::span<float> m, std::span<float> v,
                const AdamWParams& hp, std::int64_t step, std::span<const std::uint8_t> decay_mask = {});
void adamw_step(std::span<double> params, std::span<const double> grads, std::span<double> m, std::span<double> v,
                const AdamWParams& hp, std::int64_t step, std::span<const std::uint8_t> decay_mask = {});

double grad_norm(std::span<const float> g);
double grad_norm(std::span<const double> g);

double clip_grad_norm(std::span<float> g, double max_norm);
double clip_grad_norm(std::span<double> g, double max_norm);

}  // namespace tb::ops::cpu
