// ops/cpu/adamw.cpp: see adamw.h. Plain loops, double arithmetic per element.
#include "ops/cpu/adamw.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"

namespace tb::ops::cpu {
namespace {

void check_hyper(const AdamWParams& hp, std::int64_t step) {
  TB_REQUIRE(step >= 1, fmt::format("adamw: step must be >= 1 (the 1-based t of the bias correction), got {}; "
                                    "count steps from 1",
                                    step));
  TB_REQUIRE(std::isfinite(hp.lr) && hp.lr >= 0,
             fmt::format("adamw: lr must be finite and >= 0, got {}; check the LR schedule", hp.lr));
  TB_REQUIRE(hp.beta1 >= 0 && hp.beta1 < 1 && hp.beta2 >= 0 && hp.beta2 < 1,
             fmt::format("adamw: betas must lie in [0, 1), got beta1 {} beta2 {}; typical 0.9 and 0.95..0.999",
                         hp.beta1, hp.beta2));
  TB_REQUIRE(hp.eps > 0, fmt::format("adamw: eps must be > 0, got {}; typical 1e-8", hp.eps));
  TB_REQUIRE(std::isfinite(hp.weight_decay) && hp.weight_decay >= 0,
             fmt::format("adamw: weight_decay must be finite and >= 0, got {}; typical 0.01..0.1", hp.weight_decay));
}

template <class T>
void step_impl(std::span<T> p, std::span<const T> g, std::span<T> m, std::span<T> v, const AdamWParams& hp,
               std::int64_t step, std::span<const std::uint8_t> mask) {
  check_hyper(hp, step);
  TB_REQUIRE(g.size() == p.size() && m.size() == p.size() && v.size() == p.size(),
             fmt::format("adamw: params, grads, m, v must have the same length, got {}, {}, {}, {}; "
                         "allocate the moments like the parameters",
                         p.size(), g.size(), m.size(), v.size()));
  TB_REQUIRE(mask.empty() || mask.size() == p.size(),
             fmt::format("adamw: decay_mask has {} entries for {} parameters; give one byte per parameter "
                         "or an empty mask to decay all",
                         mask.size(), p.size()));
  const double b1 = hp.beta1, b2 = hp.beta2;
  const double bc1 = 1 - std::pow(b1, double(step));
  const double bc2 = 1 - std::pow(b2, double(step));
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double gi = double(g[i]);
    const double mi = b1 * double(m[i]) + (1 - b1) * gi;
    const double vi = b2 * double(v[i]) + (1 - b2) * gi * gi;
    const double mhat = mi / bc1;
    const double vhat = vi / bc2;
    const double wd = (mask.empty() || mask[i] != 0) ? hp.weight_decay : 0.0;
    const double pi = double(p[i]);
    p[i] = T(pi - hp.lr * (mhat / (std::sqrt(vhat) + hp.eps) + wd * pi));
    m[i] = T(mi);
    v[i] = T(vi);
  }
}

template <class T>
double norm_impl(std::span<const T> g) {
  double sum_sq = 0;
  for (const T x : g) sum_sq += double(x) * double(x);
  return std::sqrt(sum_sq);
}

template <class T>
double clip_impl(std::span<T> g, double max_norm) {
  TB_REQUIRE(max_norm > 0, fmt::format("clip_grad_norm: max_norm must be > 0, got {}; typical 1.0 "
                                       "(to disable clipping, do not call it)",
                                       max_norm));
  const double norm = norm_impl(std::span<const T>(g));
  if (!std::isfinite(norm) || norm <= max_norm) return norm;
  const double scale = max_norm / (norm + 1e-6);
  for (T& x : g) x = T(double(x) * scale);
  return norm;
}

}  // namespace

void adamw_step(std::span<float> params, std::span<const float> grads, std::span<float> m, std::span<float> v,
                const AdamWParams& hp, std::int64_t step, std::span<const std::uint8_t> decay_mask) {
  step_impl(params, grads, m, v, hp, step, decay_mask);
}
void adamw_step(std::span<double> params, std::span<const double> grads, std::span<double> m, std::span<double> v,
                const AdamWParams& hp, std::int64_t step, std::span<const std::uint8_t> decay_mask) {
  step_impl(params, grads, m, v, hp, step, decay_mask);
}

double grad_norm(std::span<const float> g) { return norm_impl(g); }
double grad_norm(std::span<const double> g) { return norm_impl(g); }

double clip_grad_norm(std::span<float> g, double max_norm) { return clip_impl(g, max_norm); }
double clip_grad_norm(std::span<double> g, double max_norm) { return clip_impl(g, max_norm); }

}  // namespace tb::ops::cpu
