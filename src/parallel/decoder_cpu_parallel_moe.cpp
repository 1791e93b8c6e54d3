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
// A proxy of an ep rank (MoeConfig ep_proxy, token_share; one rank): the layer runs on the first rows / token_share
// rows (the others leave it as zero, and their gradient through it is zero), the losses count those rows as the
// micro-batch (in sequences of gcd(rows, seq) tokens), and pair (t, e) runs on the held expert e mod (E / ep_proxy).
// Expert parallel (ep > 1, ep rank r holding experts [r El, (r+1) El), El = E / ep), between permute and unpermute:
//   counts c_e of the kept pairs -> all-to-all over ep (El per peer): counts[s, j] = rows of source s for local j
//   xp (expert order: the rows for rank r are contiguous) -> all-to-all (send_rows, recv_rows) -> sorted expert-major
//   xe;  eo_e = expert(xe_e) for the local experts;  back to source-major -> all-to-all back -> eo (expert order)
//   backward: do -> the same dispatch -> dxe = experts'(do_e) -> the same combine -> dxp
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
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

// The rows a MoE layer runs on and the micro-batch its losses see: all of them, or a proxy's token share.
struct MoeRows {
  std::int64_t rows, batch, seq;
};
MoeRows moe_rows(const model::MoeConfig& m, std::int64_t rows, std::int64_t batch, std::int64_t seq) {
  if (m.token_share == 1) return {rows, batch, seq};
  TB_REQUIRE(rows % m.token_share == 0, "CPU decoder: token_share " + std::to_string(m.token_share) +
                                            " must divide the micro-batch's " + std::to_string(rows) + " tokens");
  const std::int64_t r = rows / m.token_share, s = std::gcd(r, seq);
  return {r, r / s, s};
}

// The routes the experts run on: a proxy's pairs on its held experts (e mod held); the routes themselves otherwise.
template <class T>
const cpu::Routes<T>& held_routes(const model::MoeConfig& m, const cpu::Routes<T>& r, cpu::Routes<T>& scratch) {
  if (m.ep_proxy == 1) return r;
  scratch = r;
  scratch.experts = m.local_experts();
  for (std::int32_t& e : scratch.expert)
    if (e >= 0) e %= scratch.experts;
  return scratch;
}

}  // namespace

template <class T>
void ShardedCpuDecoder<T>::reset_moe_stats() {
  int layers = 0;
  for (int l = first_; l < last_; ++l) layers += cfg_.is_moe_layer(l);
  moe_stats_ = {};
  moe_stats_.experts = cfg_.moe.experts;
  moe_stats_.tokens_per_expert.assign(std::size_t(layers * cfg_.moe.experts), 0);
  if (cfg_.moe.bias_update_rate > 0 && expert_bias_.empty())  // (the bias lives across resets)
    expert_bias_.assign(moe_stats_.tokens_per_expert.size(), 0.0),
        expert_load_.assign(moe_stats_.tokens_per_expert.size(), 0.0);
}

template <class T>
void ShardedCpuDecoder<T>::update_expert_bias() {
  const auto E = std::size_t(cfg_.moe.experts);
  for (std::size_t l = 0; l < expert_bias_.size() / E; ++l)
    cpu::update_expert_bias(std::span<double>(expert_bias_).subspan(l * E, E),
                            std::span<const double>(expert_load_).subspan(l * E, E), cfg_.moe.bias_update_rate);
  std::fill(expert_load_.begin(), expert_load_.end(), 0.0);
}

// This MoE layer's index among the stage's MoE layers (the layer whose activations A is).
template <class T>
int ShardedCpuDecoder<T>::moe_index(const State& s, const LayerActs& A) const {
  int layer = 0;
  for (int l = first_; l < last_ && &s.layers[std::size_t(l - first_)] != &A; ++l) layer += cfg_.is_moe_layer(l);
  return layer;
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
  cpu::RouteOptions opt = route_options(m);
  if (!expert_bias_.empty())
    opt.bias = std::span<const double>(expert_bias_).subspan(std::size_t(moe_index(s, A) * m.experts),
                                                             std::size_t(m.experts));
  const std::int64_t rows = moe_rows(m, s.rows, s.batch, s.seq).rows, d = dims_.d, E = m.experts, k = m.top_k;
  std::fill(out.data(), out.data() + s.rows * d, T(0));
  x = CView(x.data(), {rows, d});
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
  A.dispatch = cpu::make_dispatch(held_routes(m, A.routes, scratch_->held));
  const cpu::Dispatch& D = A.dispatch;
  const std::int64_t kept = D.rows();
  auto xp = mat(A.xp, kept, d);
  cpu::permute<T>(xp, x, D, int(k));
  mat(A.eo, kept, d);
  if (ep_) {  // to the experts' owners and back
    ep_plan(A.ep, D);
    ep_dispatch(A.ep, A.xp, A.xe);
    experts_forward(L, A.ep.offsets, A, A.xe, scratch_->ee);
    ep_combine(A.ep, scratch_->ee, A.eo);
  } else {
    experts_forward(L, D.offsets, A, A.xp, A.eo);
  }
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
  const auto [rows, B, S] = moe_rows(m, s.rows, s.batch, s.seq);
  const std::int64_t E = m.experts, k = m.top_k;
  const double tokens = double(B) * double(S);
  // [c_i (E) | P_i (E) | c_bi (B E) | P_bi (B E) | sum_t lse²]
  std::vector<double> sums(std::size_t(2 * E + 2 * B * E + 1), 0.0);
  double* c = sums.data();
  double* psum = c + E;
  double* cb = psum + E;
  double* pb = cb + B * E;
  const std::int64_t begin = sp_ ? tp_.rank() * rows : 0, sl = m.token_share == 1 ? std::int64_t(s.pos.size()) : S;
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

  const int layer = moe_index(s, A);
  for (std::int64_t i = 0; i < E; ++i) moe_stats_.tokens_per_expert[std::size_t(layer * E + i)] += std::int64_t(c[i]);
  if (!expert_load_.empty())
    for (std::int64_t i = 0; i < E; ++i) expert_load_[std::size_t(layer * E + i)] += c[i];
  moe_stats_.aux += aux, moe_stats_.seq_aux += seq, moe_stats_.z += z;
  moe_stats_.objective += m.aux_loss * aux + m.seq_aux_loss * seq + m.z_loss * z;
}

template <class T>
void ShardedCpuDecoder<T>::moe_backward(const State& s, const model::DenseLayout::Layer& L, LayerActs& A, CView dy,
                                        View dx) {
  const model::MoeConfig& m = cfg_.moe;
  const cpu::RouteOptions opt = route_options(m);
  const std::int64_t rows = moe_rows(m, s.rows, s.batch, s.seq).rows, d = dims_.d, E = m.experts, k = m.top_k;
  const cpu::Dispatch& D = A.dispatch;
  const std::int64_t kept = D.rows();
  Scratch& S = *scratch_;
  const CView x(A.y2.data(), {rows, d});
  std::fill(dx.data() + rows * d, dx.data() + s.rows * d, T(0));  // a proxy's rows past its token share
  dy = CView(dy.data(), {rows, d});
  dx = View(dx.data(), {rows, d});
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
  mat(S.dxp, kept, d);
  if (ep_) {  // the output gradients to the experts' owners, the input gradients back
    ep_dispatch(A.ep, S.dop, S.ee);
    experts_backward(L, A.ep.offsets, A, A.xe, S.ee, S.a2a_back);
    ep_combine(A.ep, S.a2a_back, S.dxp);
  } else {
    experts_backward(L, D.offsets, A, A.xp, S.dop, S.dxp);
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

// Expert parallel, before the exchange: the pairs per expert (D.offsets) go to the experts' owners (ep rank r holds
// experts [r El, (r+1) El)), which learn how many rows of each source come for each of their experts.
template <class T>
void ShardedCpuDecoder<T>::ep_plan(EpPlan& plan, const cpu::Dispatch& D) {
  const int ep = ep_->size();
  const std::int64_t El = cfg_.moe.experts / ep;
  std::vector<int> mine(std::size_t(ep * El));
  for (std::int64_t e = 0; e < ep * El; ++e)
    mine[std::size_t(e)] = int(D.offsets[std::size_t(e + 1)] - D.offsets[std::size_t(e)]);
  plan.counts.assign(mine.size(), 0);
  const std::vector<std::size_t> each(static_cast<std::size_t>(ep), static_cast<std::size_t>(El));
  ep_->all_to_all_v(std::span<const int>(mine), each, std::span<int>(plan.counts), each);
  plan.send_rows.assign(std::size_t(ep), 0), plan.recv_rows.assign(std::size_t(ep), 0);
  for (int r = 0; r < ep; ++r) {
    plan.send_rows[std::size_t(r)] = std::size_t(D.offsets[std::size_t((r + 1) * El)] - D.offsets[std::size_t(r * El)]);
    for (std::int64_t j = 0; j < El; ++j)
      plan.recv_rows[std::size_t(r)] += std::size_t(plan.counts[std::size_t(r * El + j)]);
  }
  // source-major row of (source s, local expert j, i-th row): start[s][j] + i; expert-major: j, then s, then i
  std::vector<std::int64_t> start(std::size_t(ep * El));
  std::int64_t at = 0;
  for (std::size_t sj = 0; sj < start.size(); ++sj) start[sj] = at, at += plan.counts[sj];
  plan.offsets.assign(std::size_t(El + 1), 0);
  plan.order.clear();
  for (std::int64_t j = 0; j < El; ++j) {
    for (int r = 0; r < ep; ++r) {
      const std::size_t sj = std::size_t(r * El + j);
      for (std::int64_t i = 0; i < plan.counts[sj]; ++i) plan.order.push_back(start[sj] + i);
    }
    plan.offsets[std::size_t(j + 1)] = std::int64_t(plan.order.size());
  }
}

// rows [kept, d] in expert order -> the owners; what arrives, source-major, sorted expert-major into expert_major.
template <class T>
void ShardedCpuDecoder<T>::ep_dispatch(const EpPlan& plan, const std::vector<T>& rows, std::vector<T>& expert_major) {
  const std::size_t d = std::size_t(dims_.d), n = plan.order.size();
  std::vector<std::size_t> sc(plan.send_rows), rc(plan.recv_rows);
  for (std::size_t& c : sc) c *= d;
  for (std::size_t& c : rc) c *= d;
  std::vector<T>& got = scratch_->a2a;
  got.resize(n * d);
  ep_->all_to_all_v(std::span<const T>(rows.data(), std::accumulate(sc.begin(), sc.end(), std::size_t(0))), sc,
                    std::span<T>(got), rc);
  expert_major.resize(n * d);
  for (std::size_t i = 0; i < n; ++i)
    std::copy_n(got.data() + std::size_t(plan.order[i]) * d, d, expert_major.data() + i * d);
}

// The mirror: expert-major rows back to source-major order, to their sources, into rows [kept, d] (expert order).
template <class T>
void ShardedCpuDecoder<T>::ep_combine(const EpPlan& plan, const std::vector<T>& expert_major, std::vector<T>& rows) {
  const std::size_t d = std::size_t(dims_.d), n = plan.order.size();
  std::vector<T>& back = scratch_->a2a;
  back.resize(n * d);
  for (std::size_t i = 0; i < n; ++i)
    std::copy_n(expert_major.data() + i * d, d, back.data() + std::size_t(plan.order[i]) * d);
  std::vector<std::size_t> sc(plan.recv_rows), rc(plan.send_rows);
  for (std::size_t& c : sc) c *= d;
  for (std::size_t& c : rc) c *= d;
  rows.resize(std::accumulate(rc.begin(), rc.end(), std::size_t(0)));
  ep_->all_to_all_v(std::span<const T>(back), sc, std::span<T>(rows), rc);
}

// out = expert j's MLP on rows [offsets[j], offsets[j+1]) of in, for the experts this rank holds (local index j);
// their fc1 output and activation into A.eh, A.eg.
template <class T>
void ShardedCpuDecoder<T>::experts_forward(const model::DenseLayout::Layer& L, std::span<const std::int64_t> offsets,
                                           LayerActs& A, const std::vector<T>& in, std::vector<T>& out) {
  const std::int64_t d = dims_.d, rows = offsets.back(), f = cfg_.expert_ffn();
  const std::int64_t f1 = cfg_.act == model::Act::swiglu ? 2 * f : f;
  mat(A.eh, rows, f1), mat(A.eg, rows, f), mat(out, rows, d);
  for (std::size_t j = 0; j + 1 < offsets.size(); ++j) {
    const std::int64_t r0 = offsets[j], n = offsets[j + 1] - r0;
    if (n == 0) continue;
    auto h = rows_of(A.eh, r0, n, f1), g = rows_of(A.eg, r0, n, f);
    cpu::linear_forward<T>(h, TensorView<const T>(in.data() + r0 * d, {n, d}), P(L.expert_fc1[j]));
    model::detail::act_forward<T>(cfg_.act, g, h);
    cpu::linear_forward<T>(rows_of(out, r0, n, d), g, P(L.expert_fc2[j]));
  }
}

// din = the experts' input gradients from their output gradients dout (rows as experts_forward's); weight gradients
// accumulated.
template <class T>
void ShardedCpuDecoder<T>::experts_backward(const model::DenseLayout::Layer& L, std::span<const std::int64_t> offsets,
                                            LayerActs& A, const std::vector<T>& in, const std::vector<T>& dout,
                                            std::vector<T>& din) {
  const std::int64_t d = dims_.d, rows = offsets.back(), f = cfg_.expert_ffn();
  const std::int64_t f1 = cfg_.act == model::Act::swiglu ? 2 * f : f;
  Scratch& S = *scratch_;
  mat(S.deg, rows, f), mat(S.deh, rows, f1), mat(din, rows, d);
  for (std::size_t j = 0; j + 1 < offsets.size(); ++j) {
    const std::int64_t r0 = offsets[j], n = offsets[j + 1] - r0;
    if (n == 0) continue;
    auto dg = rows_of(S.deg, r0, n, f), dh = rows_of(S.deh, r0, n, f1);
    const int fc1 = L.expert_fc1[j], fc2 = L.expert_fc2[j];
    cpu::linear_backward<T>(dg, G(fc2), {}, TensorView<const T>(dout.data() + r0 * d, {n, d}), rows_of(A.eg, r0, n, f),
                            P(fc2));
    model::detail::act_backward<T>(cfg_.act, dh, dg, rows_of(A.eh, r0, n, f1));
    cpu::linear_backward<T>(rows_of(din, r0, n, d), G(fc1), {}, dh, TensorView<const T>(in.data() + r0 * d, {n, d}),
                            P(fc1));
  }
}

#define TB_INSTANTIATE(T)                                                                                              \
  template void ShardedCpuDecoder<T>::reset_moe_stats();                                                               \
  template void ShardedCpuDecoder<T>::update_expert_bias();                                                            \
  template int ShardedCpuDecoder<T>::moe_index(const State&, const LayerActs&) const;                                  \
  template void ShardedCpuDecoder<T>::reduce_over_tokens(std::span<double>);                                           \
  template void ShardedCpuDecoder<T>::moe_forward(const State&, const model::DenseLayout::Layer&, LayerActs&, CView,   \
                                                  View);                                                               \
  template void ShardedCpuDecoder<T>::moe_losses(const State&, LayerActs&);                                            \
  template void ShardedCpuDecoder<T>::moe_backward(const State&, const model::DenseLayout::Layer&, LayerActs&, CView,  \
                                                   View);                                                              \
  template void ShardedCpuDecoder<T>::ep_plan(EpPlan&, const cpu::Dispatch&);                                          \
  template void ShardedCpuDecoder<T>::ep_dispatch(const EpPlan&, const std::vector<T>&, std::vector<T>&);              \
  template void ShardedCpuDecoder<T>::ep_combine(const EpPlan&, const std::vector<T>&, std::vector<T>&);               \
  template void ShardedCpuDecoder<T>::experts_forward(const model::DenseLayout::Layer&, std::span<const std::int64_t>, \
                                                      LayerActs&, const std::vector<T>&, std::vector<T>&);             \
  template void ShardedCpuDecoder<T>::experts_backward(const model::DenseLayout::Layer&,                               \
                                                       std::span<const std::int64_t>, LayerActs&,                      \
                                                       const std::vector<T>&, const std::vector<T>&, std::vector<T>&);
TB_INSTANTIATE(float)
TB_INSTANTIATE(double)
#undef TB_INSTANTIATE

}  // namespace tb::parallel
