// parallel/decoder_cpu_parallel_moe.cpp: the MLP of a MoE layer in the sharded CPU decoder (model/config.h MoeConfig
// has the math; ops/cpu/moe.h the routing ops), on this rank's rows x [rows, d]:
//   logits = x Wr^T;  s = scores(logits);  p = probs(s);  routes = route(s) (then capacity);  xp = permute(x)
//   per expert e: o_e = act(xp_e W1e^T) W2e^T;  y = unpermute(o) (+ act(x Ws1^T) Ws2^T, the shared experts)
// Backward, from dy:
//   do, dw = unpermute'(dy);  per expert: dxp_e = (act'(do_e W2e)) W1e, dW2e += do_e^T g_e, dW1e += dh_e^T xp_e
//   ds = weights'(dw) + probs'(grad_scale · dp);  dlogits = scores'(ds) + z'(grad_scale · dz)
//   dx = permute'(dxp) + dlogits Wr + shared'(dy);  dWr += dlogits^T x
// Losses (per micro-batch, counts and sums over its T tokens, all-reduced over cp and SP's tp first), with c_i the
// pairs routed to expert i, P_i the sum of p over the tokens:
//   aux = E / (T² k) · sum_i c_i P_i                       dp_ti += aux_loss · E c_i / (T² k)
//   seq = (1/B) sum_b sum_i (c_bi E / (k S)) (P_bi / S)    dp_ti += seq_aux_loss · c_bi E / (k S) / (B S)
//   z   = (1/T) sum_t lse(logits_t)²                        dz = z_loss / T
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "model/decoder_common.h"
#include "ops/cpu/linear.h"
#include "ops/cpu/moe.h"
#include "parallel/decoder_cpu_parallel.h"
#include "parallel/decoder_cpu_parallel_state.h"

namespace tb::parallel {
namespace {

namespace cpu = tb::ops::cpu;
using model::detail::mat;

cpu::RouteOptions route_options(const model::MoeConfig& m) {
  cpu::RouteOptions o;
  o.k = m.top_k;
  o.score = m.score == model::RouterScore::softmax ? cpu::Score::softmax : cpu::Score::sigmoid;
  o.normalize = m.normalize;
  o.scale = m.scale;
  o.balanced = m.routing == model::Routing::balanced;
  return o;
}

template <class T>
TensorView<T> rows_of(std::vector<T>& v, std::int64_t row0, std::int64_t rows, std::int64_t cols) {
  return TensorView<T>(v.data() + row0 * cols, {rows, cols});
}

}  // namespace

template <class T>
void ShardedCpuDecoder<T>::reset_moe_stats() {
  int layers = 0;
  for (int l = first_; l < last_; ++l) layers += cfg_.is_moe_layer(l);
  moe_stats_ = {};
  moe_stats_.experts = cfg_.moe.experts;
  moe_stats_.tokens_per_expert.assign(std::size_t(layers * cfg_.moe.experts), 0);
}

// Sums v over the ranks holding the other tokens of the micro-batch: cp, and tp under SP.
template <class T>
void ShardedCpuDecoder<T>::reduce_over_tokens(std::span<double> v) {
  if (sp_ && tp_.size() > 1) tp_.all_reduce(v);
  if (cp_.size() > 1) cp_.all_reduce(v);
}

template <class T>
void ShardedCpuDecoder<T>::moe_forward(const State& s, const model::DenseLayout::Layer& L, LayerActs& A, CView x,
                                       View out) {
  const model::MoeConfig& m = cfg_.moe;
  const cpu::RouteOptions opt = route_options(m);
  const std::int64_t rows = s.rows, d = dims_.d, E = m.experts, k = m.top_k;
  auto logits = mat(A.logits, rows, E), sc = mat(A.scores, rows, E), p = mat(A.probs, rows, E);
  cpu::linear_forward<T>(logits, x, P(L.router));
  cpu::router_scores<T>(opt.score, sc, logits);
  cpu::router_probs<T>(opt.score, p, sc);
  std::vector<std::int64_t> ids;  // the rows' global token indices b·seq + position (balanced routing)
  if (opt.balanced) {
    const std::int64_t begin = sp_ ? tp_.rank() * rows : 0, sl = std::int64_t(s.pos.size());
    for (std::int64_t i = 0; i < rows; ++i)
      ids.push_back((begin + i) / sl * s.seq + s.pos[std::size_t((begin + i) % sl)]);
  }
  cpu::route<T>(A.routes, sc, opt, ids);
  if (m.capacity_factor > 0) {
    const auto capacity = std::int64_t(std::ceil(m.capacity_factor * double(rows * k) / double(E)));
    moe_stats_.dropped += cpu::drop_over_capacity(A.routes, capacity);
  }
  A.dispatch = cpu::make_dispatch(A.routes);
  const cpu::Dispatch& D = A.dispatch;
  const std::int64_t kept = D.rows(), f = cfg_.expert_ffn(), f1 = cfg_.act == model::Act::swiglu ? 2 * f : f;
  auto xp = mat(A.xp, kept, d);
  cpu::permute<T>(xp, x, D, int(k));
  mat(A.eh, kept, f1), mat(A.eg, kept, f), mat(A.eo, kept, d);
  for (std::int64_t e = 0; e < E; ++e) {
    const std::int64_t r0 = D.offsets[std::size_t(e)], n = D.offsets[std::size_t(e + 1)] - r0;
    if (n == 0) continue;
    auto h = rows_of(A.eh, r0, n, f1), g = rows_of(A.eg, r0, n, f);
    cpu::linear_forward<T>(h, rows_of(A.xp, r0, n, d), P(L.expert_fc1[std::size_t(e)]));
    model::detail::act_forward<T>(cfg_.act, g, h);
    cpu::linear_forward<T>(rows_of(A.eo, r0, n, d), g, P(L.expert_fc2[std::size_t(e)]));
  }
  std::fill(out.data(), out.data() + rows * d, T(0));
  cpu::unpermute<T>(out, mat(A.eo, kept, d), D, A.routes);
  if (L.shared_fc1 >= 0) {
    const std::int64_t fs = m.shared_ffn, fs1 = cfg_.act == model::Act::swiglu ? 2 * fs : fs;
    auto h = mat(A.sh, rows, fs1), g = mat(A.sg, rows, fs);
    auto y = mat(scratch_->partial, rows, d);
    cpu::linear_forward<T>(h, x, P(L.shared_fc1));
    model::detail::act_forward<T>(cfg_.act, g, h);
    cpu::linear_forward<T>(y, g, P(L.shared_fc2));
    for (std::int64_t i = 0; i < rows * d; ++i) out.data()[i] += y.data()[i];
  }
  moe_losses(s, A);
}

// The load-balancing and z losses of one layer's routing (their values into moe_stats_, their gradient over p in
// A.dp and the z-loss coefficient in A.dz), from counts over the whole micro-batch.
template <class T>
void ShardedCpuDecoder<T>::moe_losses(const State& s, LayerActs& A) {
  const model::MoeConfig& m = cfg_.moe;
  const std::int64_t rows = s.rows, E = m.experts, k = m.top_k, B = s.batch, S = s.seq;
  const double tokens = double(B) * double(S);
  // [c_i (E) | P_i (E) | c_bi (B E) | P_bi (B E) | sum_t lse²]
  std::vector<double> sums(std::size_t(2 * E + 2 * B * E + 1), 0.0);
  double* c = sums.data();
  double* psum = c + E;
  double* cb = psum + E;
  double* pb = cb + B * E;
  const std::int64_t begin = sp_ ? tp_.rank() * rows : 0, sl = std::int64_t(s.pos.size());
  for (std::int64_t t = 0; t < rows; ++t) {
    const std::int64_t b = (begin + t) / sl;
    for (std::int64_t j = 0; j < k; ++j) {
      const std::int32_t e = A.routes.chosen[std::size_t(t * k + j)];
      c[e] += 1, cb[b * E + e] += 1;
    }
    for (std::int64_t i = 0; i < E; ++i) {
      const double v = double(A.probs[std::size_t(t * E + i)]);
      psum[i] += v, pb[b * E + i] += v;
    }
  }
  sums.back() = cpu::z_loss<T>(TensorView<const T>(A.logits.data(), {rows, E}));
  reduce_over_tokens(sums);

  double aux = 0, seq = 0;
  for (std::int64_t i = 0; i < E; ++i) aux += c[i] * psum[i];
  aux *= double(E) / (tokens * tokens * double(k));
  for (std::int64_t bi = 0; bi < B * E; ++bi) seq += cb[bi] * double(E) / double(k * S) * pb[bi] / double(S);
  seq /= double(B);
  const double z = sums.back() / tokens;
  A.dz = m.z_loss / tokens;
  if (m.aux_loss > 0 || m.seq_aux_loss > 0) {
    A.dp.assign(std::size_t(rows * E), T(0));
    for (std::int64_t t = 0; t < rows; ++t) {
      const std::int64_t b = (begin + t) / sl;
      for (std::int64_t i = 0; i < E; ++i)
        A.dp[std::size_t(t * E + i)] = T(m.aux_loss * double(E) * c[i] / (tokens * tokens * double(k)) +
                                         m.seq_aux_loss * cb[b * E + i] * double(E) / double(k * S) / double(B * S));
    }
  } else {
    A.dp.clear();
  }

  int layer = 0;  // this layer's index among the stage's MoE layers: the one whose A this is
  for (int l = first_; l < last_ && &s.layers[std::size_t(l - first_)] != &A; ++l) layer += cfg_.is_moe_layer(l);
  for (std::int64_t i = 0; i < E; ++i) moe_stats_.tokens_per_expert[std::size_t(layer * E + i)] += std::int64_t(c[i]);
  moe_stats_.aux += aux, moe_stats_.seq_aux += seq, moe_stats_.z += z;
  moe_stats_.objective += m.aux_loss * aux + m.seq_aux_loss * seq + m.z_loss * z;
}

template <class T>
void ShardedCpuDecoder<T>::moe_backward(const State& s, const model::DenseLayout::Layer& L, LayerActs& A, CView dy,
                                        View dx) {
  const model::MoeConfig& m = cfg_.moe;
  const cpu::RouteOptions opt = route_options(m);
  const std::int64_t rows = s.rows, d = dims_.d, E = m.experts, k = m.top_k;
  const cpu::Dispatch& D = A.dispatch;
  const std::int64_t kept = D.rows(), f = cfg_.expert_ffn(), f1 = cfg_.act == model::Act::swiglu ? 2 * f : f;
  Scratch& S = *scratch_;
  const CView x(A.y2.data(), {rows, d});
  // shared experts (write dx), or dx = 0
  if (L.shared_fc1 >= 0) {
    const std::int64_t fs = m.shared_ffn, fs1 = cfg_.act == model::Act::swiglu ? 2 * fs : fs;
    auto dg = mat(S.dg, rows, fs), dh = mat(S.dh, rows, fs1);
    cpu::linear_backward<T>(dg, G(L.shared_fc2), {}, dy, mat(A.sg, rows, fs), P(L.shared_fc2));
    model::detail::act_backward<T>(cfg_.act, dh, dg, mat(A.sh, rows, fs1));
    cpu::linear_backward<T>(dx, G(L.shared_fc1), {}, dh, x, P(L.shared_fc1));
  } else {
    std::fill(dx.data(), dx.data() + rows * d, T(0));
  }
  // routed experts
  auto dop = mat(S.dop, kept, d);
  S.dweight.resize(A.routes.weight.size());
  cpu::unpermute_backward<T>(dop, S.dweight, dy, mat(A.eo, kept, d), D, A.routes);
  mat(S.deg, kept, f), mat(S.deh, kept, f1), mat(S.dxp, kept, d);
  for (std::int64_t e = 0; e < E; ++e) {
    const std::int64_t r0 = D.offsets[std::size_t(e)], n = D.offsets[std::size_t(e + 1)] - r0;
    if (n == 0) continue;
    auto dg = rows_of(S.deg, r0, n, f), dh = rows_of(S.deh, r0, n, f1);
    const int fc1 = L.expert_fc1[std::size_t(e)], fc2 = L.expert_fc2[std::size_t(e)];
    cpu::linear_backward<T>(dg, G(fc2), {}, rows_of(S.dop, r0, n, d), rows_of(A.eg, r0, n, f), P(fc2));
    model::detail::act_backward<T>(cfg_.act, dh, dg, rows_of(A.eh, r0, n, f1));
    cpu::linear_backward<T>(rows_of(S.dxp, r0, n, d), G(fc1), {}, dh, rows_of(A.xp, r0, n, d), P(fc1));
  }
  cpu::permute_backward<T>(dx, mat(S.dxp, kept, d), D, int(k));
  // router
  auto ds = mat(S.ds, rows, E), dlogits = mat(S.dlogits, rows, E);
  const CView scores(A.scores.data(), {rows, E}), logits(A.logits.data(), {rows, E});
  cpu::weights_backward<T>(ds, scores, A.routes, S.dweight, opt);
  if (!A.dp.empty()) {
    for (T& v : A.dp) v = T(double(v) * s.grad_scale);
    cpu::probs_backward<T>(opt.score, ds, scores, CView(A.dp.data(), {rows, E}));
  }
  cpu::scores_backward<T>(opt.score, dlogits, scores, ds);
  if (A.dz > 0) cpu::z_loss_backward<T>(dlogits, logits, A.dz * s.grad_scale);
  auto dxr = mat(S.partial, rows, d);
  cpu::linear_backward<T>(dxr, G(L.router), {}, dlogits, x, P(L.router));
  for (std::int64_t i = 0; i < rows * d; ++i) dx.data()[i] += dxr.data()[i];
}

#define TB_INSTANTIATE(T)                                                                                             \
  template void ShardedCpuDecoder<T>::reset_moe_stats();                                                              \
  template void ShardedCpuDecoder<T>::reduce_over_tokens(std::span<double>);                                          \
  template void ShardedCpuDecoder<T>::moe_forward(const State&, const model::DenseLayout::Layer&, LayerActs&, CView,  \
                                                  View);                                                              \
  template void ShardedCpuDecoder<T>::moe_losses(const State&, LayerActs&);                                           \
  template void ShardedCpuDecoder<T>::moe_backward(const State&, const model::DenseLayout::Layer&, LayerActs&, CView, \
                                                   View);
TB_INSTANTIATE(float)
TB_INSTANTIATE(double)
#undef TB_INSTANTIATE

}  // namespace tb::parallel
