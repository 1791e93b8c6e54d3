// ops/cpu/moe.h: Mixture-of-Experts routing and token dispatch (CPU reference), for n tokens over E experts, k each
// (model/config.h's MoeConfig has the math of the layer):
//   router_scores     s = softmax(logits) | sigmoid(logits)                    logits, s: [n, E]
//   router_probs      p = s (softmax) | s / sum_i s_i (sigmoid): what the load-balancing losses average
//   route             chosen e_tj = top_k(s + b) (ties: the lower expert; b the expert bias, 0 without one) or
//                     balanced (g_t k + j) mod E of the token's global index g_t;
//                     w_tj = scale · s_{t,e_tj} / (normalize ? sum_j s_{t,e_tj} : 1)
//   update_expert_bias  b_i += rate · sign(mean_j c_j - c_i) for the pairs c_i routed to each expert
//   drop_over_capacity  each expert keeps its `capacity` pairs of largest weight (ties: the earlier token);
//                     a dropped pair has expert -1 and weight 0 (its weight is lost, as in Megatron-Core)
//   make_dispatch     the kept pairs (t, j) sorted by expert, token order within one: row r of the permuted tokens is
//                     pair[r] = t k + j, expert e's rows are [offsets[e], offsets[e+1])
//   permute           xp[r] = x[pair[r] / k]                     backward: dx[t] += sum of dxp over t's rows
//   unpermute         y[t] += sum_j w_tj · o[row of (t, j)]      backward: do[r] = w · dy[t];  dw_tj = dy[t] · o[r]
//   weights_backward  ds from dw: ds_e = scale · (dw_e - sum_j dw_j s_j / S) / S (normalize, S = sum of the chosen
//                     s), else scale · dw_e; for every chosen pair, dropped ones with dw 0
//   probs_backward    ds += dp (softmax) | ds_i += (dp_i - sum_m dp_m p_m) / sum s (sigmoid)
//   scores_backward   dlogits = s ⊙ (ds - sum ds ⊙ s) (softmax) | ds ⊙ s (1 - s) (sigmoid)
//   z_loss            sum_t lse(logits_t)^2;  backward: dlogits += coeff · 2 lse_t · softmax(logits_t)
// Buffers are row-major and contiguous; dx, dlogits and ds are accumulated where the line above says +=.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ops/cpu/common.h"

namespace tb::ops::cpu {

enum class Score { softmax, sigmoid };

struct RouteOptions {
  int k = 1;
  Score score = Score::softmax;
  bool normalize = true;
  double scale = 1.0;
  bool balanced = false;  // round-robin over the experts by global token index
  std::span<const double> bias = {};  // [E]: added to the scores for the choice only (empty: none)
};

template <class T>
struct Routes {  // one micro-batch's routing
  int n = 0, k = 0, experts = 0;
  std::vector<std::int32_t> expert;  // [n, k]: the chosen experts; -1 when dropped over capacity
  std::vector<std::int32_t> chosen;  // [n, k]: the chosen experts before dropping (the weights' normalisation)
  std::vector<T> weight;             // [n, k]
};

struct Dispatch {
  std::vector<std::int64_t> offsets;  // [E + 1]
  std::vector<std::int64_t> pair;     // [kept pairs]: t k + j
  std::int64_t rows() const { return std::int64_t(pair.size()); }
};

template <class T>
void router_scores(Score score, TensorView<T> s, In<T> logits);
template <class T>
void router_probs(Score score, TensorView<T> p, In<T> s);
// global_ids: the tokens' global indices (balanced routing only; else may be empty).
template <class T>
void route(Routes<T>& r, In<T> s, const RouteOptions& o, std::span<const std::int64_t> global_ids);
// Returns the pairs dropped.
template <class T>
std::int64_t drop_over_capacity(Routes<T>& r, std::int64_t capacity);
template <class T>
Dispatch make_dispatch(const Routes<T>& r);
// b[i] += rate · sign(mean(c) - c[i]) (sign 0 at the mean), for every expert i of c and b [E].
void update_expert_bias(std::span<double> b, std::span<const double> c, double rate);
// Pairs routed to each expert before dropping (chosen), [E].
template <class T>
std::vector<std::int64_t> tokens_per_expert(const Routes<T>& r);

template <class T>
void permute(TensorView<T> xp, In<T> x, const Dispatch& d, int k);
template <class T>
void permute_backward(TensorView<T> dx, In<T> dxp, const Dispatch& d, int k);
template <class T>
void unpermute(TensorView<T> y, In<T> o, const Dispatch& d, const Routes<T>& r);
// dweight: [n, k], written (0 for dropped pairs).
template <class T>
void unpermute_backward(TensorView<T> dop, std::span<T> dweight, In<T> dy, In<T> o, const Dispatch& d,
                        const Routes<T>& r);

// ds [n, E] written.
template <class T>
void weights_backward(TensorView<T> ds, In<T> s, const Routes<T>& r, std::span<const T> dweight, const RouteOptions& o);
template <class T>
void probs_backward(Score score, TensorView<T> ds, In<T> s, In<T> dp);
template <class T>
void scores_backward(Score score, TensorView<T> dlogits, In<T> s, In<T> ds);
template <class T>
double z_loss(In<T> logits);
template <class T>
void z_loss_backward(TensorView<T> dlogits, In<T> logits, double coeff);

}  // namespace tb::ops::cpu
