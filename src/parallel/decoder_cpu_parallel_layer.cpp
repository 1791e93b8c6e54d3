// parallel/decoder_cpu_parallel_layer.cpp: one layer of the sharded CPU decoder (parallel/decoder_cpu_parallel.h has
// the forward), on this rank's rows, and the tp / cp exchanges it needs. Backward, with dnext the gradient of the
// sum h = x + resid leaving the layer:
// (A MoE layer's MLP: parallel/decoder_cpu_parallel_moe.cpp, on this rank's rows without gather or reduce; a MLA
// layer's attention, from dr2 to dy1: parallel/decoder_cpu_parallel_mla.cpp.)
//   dM = gather(dnext);  dg = dM Wfc2;  dh = act'(dg);  dy2 = reduce(dh Wfc1);  dr2 = dnorm2(dy2) + dnext
//   dA = gather(dr2);  do = dA Wout;  dq, dK, dV = attention'(do);  dk, dv = reduce-scatter over cp of dK, dV
//   dq, dk = rope^-1;  dy1 = reduce(dqkv Wqkv);  dnext = dnorm1(dy1) + dr2
// gather: SP all-gather over tp (else identity); reduce: SP reduce-scatter over tp (else all-reduce).
// LoRA's adapters run after each linear they are on (parallel/decoder_cpu_parallel_lora.cpp).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "model/decoder_common.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/linear.h"
#include "ops/cpu/norm.h"
#include "ops/cpu/rope.h"
#include "parallel/decoder_cpu_parallel.h"
#include "parallel/decoder_cpu_parallel_state.h"

namespace tb::parallel {
namespace {

namespace cpu = tb::ops::cpu;
using model::detail::heads_view;
using model::detail::mat;
using model::detail::vec;

}  // namespace

// The n token rows of a [rows, d] tensor: SP all-gathers the tp shards into buf; without SP they are all here.
template <class T>
TensorView<const T> ShardedCpuDecoder<T>::gather_rows(std::vector<T>& buf, CView local, std::int64_t n) {
  if (!sp_) return local;
  const std::int64_t d = local.size(1);
  auto full = mat(buf, n, d);
  tp_.all_gather(local.data(), full.data(), std::size_t(local.numel()), dtype_of<T>());
  return full;
}

// dst [rows, d] = this rank's rows of the sum over tp of partial [n, d] (SP: reduce-scatter; else all-reduce).
template <class T>
void ShardedCpuDecoder<T>::reduce_rows(View dst, const std::vector<T>& partial, std::int64_t n) {
  const auto t = dtype_of<T>();
  if (sp_)
    tp_.reduce_scatter(partial.data(), dst.data(), std::size_t(dst.numel()), t);
  else
    tp_.all_reduce(partial.data(), dst.data(), std::size_t(n * dst.size(1)), t);
}

// kv [batch * seq, width] in natural order = columns [col, col + width) of every cp rank's qkv [n, *], gathered.
template <class T>
void ShardedCpuDecoder<T>::gather_kv(const State& s, const std::vector<T>& qkv, std::int64_t col, std::int64_t width,
                                     std::vector<T>& kv) {
  const int cp = cp_.size();
  const std::int64_t qkv_width = std::int64_t(qkv.size()) / s.n, sl = s.seq / cp;
  std::vector<T>& mine = scratch_->kv_mine;
  std::vector<T>& all = scratch_->kv_all;
  mine.resize(std::size_t(s.n * width)), all.resize(std::size_t(cp * s.n * width));
  for (std::int64_t t = 0; t < s.n; ++t) std::copy_n(qkv.data() + t * qkv_width + col, width, mine.data() + t * width);
  cp_.all_gather(mine.data(), all.data(), mine.size(), dtype_of<T>());
  kv.resize(std::size_t(s.batch * s.seq * width));
  for (int r = 0; r < cp; ++r) {
    const std::vector<std::int64_t> pos = cp_positions(cp, r, s.seq);
    for (std::int64_t b = 0; b < s.batch; ++b)
      for (std::int64_t j = 0; j < sl; ++j)
        std::copy_n(all.data() + ((r * s.batch + b) * sl + j) * width, width,
                    kv.data() + (b * s.seq + pos[std::size_t(j)]) * width);
  }
}

// The mirror of gather_kv: columns [col, col + width) of dqkv = sum over cp ranks of their dkv at our positions.
template <class T>
void ShardedCpuDecoder<T>::scatter_dkv(const State& s, const std::vector<T>& dkv, std::int64_t col, std::int64_t width,
                                       std::vector<T>& dqkv) {
  const int cp = cp_.size();
  const std::int64_t qkv_width = std::int64_t(dqkv.size()) / s.n, sl = s.seq / cp;
  std::vector<T>& all = scratch_->kv_all;
  std::vector<T>& mine = scratch_->kv_mine;
  all.resize(std::size_t(cp * s.n * width)), mine.resize(std::size_t(s.n * width));
  for (int r = 0; r < cp; ++r) {
    const std::vector<std::int64_t> pos = cp_positions(cp, r, s.seq);
    for (std::int64_t b = 0; b < s.batch; ++b)
      for (std::int64_t j = 0; j < sl; ++j)
        std::copy_n(dkv.data() + (b * s.seq + pos[std::size_t(j)]) * width, width,
                    all.data() + ((r * s.batch + b) * sl + j) * width);
  }
  cp_.reduce_scatter(all.data(), mine.data(), mine.size(), dtype_of<T>());
  for (std::int64_t t = 0; t < s.n; ++t) std::copy_n(mine.data() + t * width, width, dqkv.data() + t * qkv_width + col);
}

template <class T>
void ShardedCpuDecoder<T>::layer_forward(State& s, int l, CView x, CView resid, View out) {
  const model::ModelConfig& c = cfg_;
  const auto& L = local_.layers[std::size_t(l - first_)];
  LayerActs& A = s.layers[std::size_t(l - first_)];
  const auto nk = model::detail::norm_kind(c.norm);
  const std::int64_t d = dims_.d, n = s.n, rows = s.rows;
  std::vector<T>& partial = scratch_->partial;
  // attention
  auto r1 = mat(A.r1, rows, d), y1 = mat(A.y1, rows, d);
  cpu::add_norm_forward<T>(nk, y1, r1, vec(A.mean1, rows), vec(A.rstd1, rows), x, resid, P(L.norm1_w), P(L.norm1_b),
                           c.norm_eps);
  if (L.mla()) {  // the attention output lands in out (x is consumed)
    mla_forward(s, L, A, y1, out);
  } else {
    const auto qkv = mat(A.qkv, n, dims_.width);
    const CView y1g = gather_rows(A.y1g, y1, n);
    cpu::linear_forward<T>(qkv, y1g, P(L.qkv));
    lora_forward(s, L, A, L.qkv, y1g, qkv);
    attention_forward(s, A);
    const auto o = mat(A.o, n, dims_.ql), attn = mat(partial, n, d);
    cpu::linear_forward<T>(attn, o, P(L.out));
    lora_forward(s, L, A, L.out, o, attn);
    reduce_rows(out, partial, n);
  }
  // MLP
  auto r2 = mat(A.r2, rows, d), y2 = mat(A.y2, rows, d);
  cpu::add_norm_forward<T>(nk, y2, r2, vec(A.mean2, rows), vec(A.rstd2, rows), out, r1, P(L.norm2_w), P(L.norm2_b),
                           c.norm_eps);
  if (L.moe()) return moe_forward(s, L, A, y2, out);  // on this rank's rows
  auto h = mat(A.h, n, dims_.fc1l), g = mat(A.g, n, dims_.ffl), mlp = mat(partial, n, d);
  const CView y2g = gather_rows(A.y2g, y2, n);
  cpu::linear_forward<T>(h, y2g, P(L.fc1));
  lora_forward(s, L, A, L.fc1, y2g, h);
  model::detail::act_forward<T>(c.act, g, h);
  cpu::linear_forward<T>(mlp, g, P(L.fc2));
  lora_forward(s, L, A, L.fc2, g, mlp);
  reduce_rows(out, partial, n);
}

// A.qkv [n, width] (this rank's heads) -> rope at the tokens' positions; K, V gathered over cp; A.o, A.lse.
template <class T>
void ShardedCpuDecoder<T>::attention_forward(const State& s, LayerActs& A) {
  const Dims& D = dims_;
  const std::int64_t b = s.batch, sl = std::int64_t(s.pos.size()), kvw = 2 * D.kvdl;
  auto q = heads_view(A.qkv, 0, b, sl, D.hl, D.hd, D.width);
  if (cfg_.pos == model::Pos::rope) {
    rope(s, q, false);
    rope(s, heads_view(A.qkv, D.ql, b, sl, D.kvl, D.hd, D.width), false);
  }
  gather_kv(s, A.qkv, D.ql, kvw, A.kv);
  mat(A.o, s.n, D.ql);
  const auto o = heads_view(A.o, 0, b, sl, D.hl, D.hd, D.ql);
  const auto lse = vec(A.lse, b * D.hl * sl).reshape({b, D.hl, sl});
  const auto k = heads_view(A.kv, 0, b, s.seq, D.kvl, D.hd, kvw);
  const auto v = heads_view(A.kv, D.kvdl, b, s.seq, D.kvl, D.hd, kvw);
  attend(s, o, lse, q, k, v);
}

// The local queries against the gathered keys: causal by absolute position, or within each segment (packed rows).
template <class T>
void ShardedCpuDecoder<T>::attend(const State& s, View o, View lse, CView q, CView k, CView v) const {
  if (s.seg_pos.empty())
    cpu::attention_forward_at<T>(o, lse, q, k, v, s.pos);
  else
    cpu::attention_forward_packed<T>(o, lse, q, k, v, s.seg_pos);
}

template <class T>
void ShardedCpuDecoder<T>::attend_backward(const State& s, View dq, View dk, View dv, CView dout, CView q, CView k,
                                           CView v, CView o, CView lse) const {
  if (s.seg_pos.empty())
    cpu::attention_backward_at<T>(dq, dk, dv, dout, q, k, v, o, lse, s.pos);
  else
    cpu::attention_backward_packed<T>(dq, dk, dv, dout, q, k, v, o, lse, s.seg_pos);
}

// RoPE (or its inverse) on q or k heads [b, sl, heads, hd] at the tokens' positions: the cp rank's positions, shared by
// the rows, or (packed rows) each row's positions in its segments.
template <class T>
void ShardedCpuDecoder<T>::rope(const State& s, View x, bool backward) const {
  const auto apply = [&](View rows, std::span<const std::int64_t> pos) {
    if (backward)
      cpu::rope_backward_at<T>(rows, inv_freq_, pos);
    else
      cpu::rope_forward_at<T>(rows, inv_freq_, pos);
  };
  if (s.seg_pos.empty()) return apply(x, s.pos);
  const std::int64_t sl = x.size(1);
  for (std::int64_t r = 0; r < x.size(0); ++r)
    apply(x.slice0(r, r + 1), std::span<const std::int64_t>(s.seg_pos).subspan(std::size_t(r * sl), std::size_t(sl)));
}

template <class T>
void ShardedCpuDecoder<T>::layer_backward(State& s, int l, View dnext) {
  const model::ModelConfig& c = cfg_;
  const auto& L = local_.layers[std::size_t(l - first_)];
  LayerActs& A = s.layers[std::size_t(l - first_)];
  const auto nk = model::detail::norm_kind(c.norm);
  const std::int64_t d = dims_.d, n = s.n, rows = s.rows;
  auto full = [&](std::vector<T>& gathered, std::vector<T>& local) {  // a saved gather_rows result
    return sp_ ? CView(gathered.data(), {n, d}) : CView(local.data(), {rows, d});
  };
  Scratch& S = *scratch_;
  auto dy = mat(S.dy, rows, d), dr2 = mat(S.dr2, rows, d);
  // MLP
  if (L.moe()) {
    moe_backward(s, L, A, dnext, dy);
  } else {
    auto dg = mat(S.dg, n, dims_.ffl), dh = mat(S.dh, n, dims_.fc1l), dy2 = mat(S.partial, n, d);
    const CView dm = gather_rows(S.gathered, dnext, n), g = mat(A.g, n, dims_.ffl), y2 = full(A.y2g, A.y2);
    cpu::linear_backward<T>(dg, G(L.fc2), {}, dm, g, P(L.fc2));
    lora_backward(s, L, A, L.fc2, g, dm, dg);
    model::detail::act_backward<T>(c.act, dh, dg, mat(A.h, n, dims_.fc1l));
    cpu::linear_backward<T>(dy2, G(L.fc1), {}, dh, y2, P(L.fc1));
    lora_backward(s, L, A, L.fc1, y2, dh, dy2);
    reduce_rows(dy, S.partial, n);
  }
  cpu::add_norm_backward<T>(nk, dr2, G(L.norm2_w), G(L.norm2_b), dy, dnext, mat(A.r2, rows, d), P(L.norm2_w),
                            vec(A.mean2, rows), vec(A.rstd2, rows));
  // attention
  if (L.mla()) {
    mla_backward(s, L, A, dr2, dy);
  } else {
    const auto dout = mat(S.dout, n, dims_.ql), dy1 = mat(S.partial, n, d);
    const CView da = gather_rows(S.gathered, dr2, n), o = mat(A.o, n, dims_.ql), y1 = full(A.y1g, A.y1);
    cpu::linear_backward<T>(dout, G(L.out), {}, da, o, P(L.out));
    lora_backward(s, L, A, L.out, o, da, dout);
    attention_backward(s, A, S.dout, S.dqkv);
    const auto dqkv = mat(S.dqkv, n, dims_.width);
    cpu::linear_backward<T>(dy1, G(L.qkv), {}, dqkv, y1, P(L.qkv));
    lora_backward(s, L, A, L.qkv, y1, dqkv, dy1);
    reduce_rows(dy, S.partial, n);
  }
  cpu::add_norm_backward<T>(nk, dnext, G(L.norm1_w), G(L.norm1_b), dy, dr2, mat(A.r1, rows, d), P(L.norm1_w),
                            vec(A.mean1, rows), vec(A.rstd1, rows));
}

// dout [n, ql] -> dqkv [n, width]: dq of the local queries; dK, dV of all keys reduce-scattered over cp to their
// owners; the inverse rope on dq and dk.
template <class T>
void ShardedCpuDecoder<T>::attention_backward(const State& s, LayerActs& A, std::vector<T>& dout,
                                              std::vector<T>& dqkv) {
  const Dims& D = dims_;
  const std::int64_t b = s.batch, sl = std::int64_t(s.pos.size()), kvw = 2 * D.kvdl;
  std::vector<T>& dkv = scratch_->dkv;
  mat(dqkv, s.n, D.width);
  mat(dkv, b * s.seq, kvw);
  auto dq = heads_view(dqkv, 0, b, sl, D.hl, D.hd, D.width);
  const auto dk = heads_view(dkv, 0, b, s.seq, D.kvl, D.hd, kvw);
  const auto dv = heads_view(dkv, D.kvdl, b, s.seq, D.kvl, D.hd, kvw);
  const auto d_o = heads_view(dout, 0, b, sl, D.hl, D.hd, D.ql), q = heads_view(A.qkv, 0, b, sl, D.hl, D.hd, D.width);
  const auto k = heads_view(A.kv, 0, b, s.seq, D.kvl, D.hd, kvw);
  const auto v = heads_view(A.kv, D.kvdl, b, s.seq, D.kvl, D.hd, kvw);
  const auto o = heads_view(A.o, 0, b, sl, D.hl, D.hd, D.ql);
  const TensorView<T> lse(A.lse.data(), {b, D.hl, sl});
  attend_backward(s, dq, dk, dv, d_o, q, k, v, o, lse);
  scatter_dkv(s, dkv, D.ql, kvw, dqkv);
  if (cfg_.pos == model::Pos::rope) {
    rope(s, dq, true);
    rope(s, heads_view(dqkv, D.ql, b, sl, D.kvl, D.hd, D.width), true);
  }
}

// The members defined here, for the two types the class is instantiated for (decoder_cpu_parallel.cpp).
#define TB_INSTANTIATE(T)                                                                                          \
  template TensorView<const T> ShardedCpuDecoder<T>::gather_rows(std::vector<T>&, CView, std::int64_t);            \
  template void ShardedCpuDecoder<T>::reduce_rows(View, const std::vector<T>&, std::int64_t);                      \
  template void ShardedCpuDecoder<T>::gather_kv(const State&, const std::vector<T>&, std::int64_t, std::int64_t,   \
                                                std::vector<T>&);                                                  \
  template void ShardedCpuDecoder<T>::scatter_dkv(const State&, const std::vector<T>&, std::int64_t, std::int64_t, \
                                                  std::vector<T>&);                                                \
  template void ShardedCpuDecoder<T>::layer_forward(State&, int, CView, CView, View);                              \
  template void ShardedCpuDecoder<T>::attention_forward(const State&, LayerActs&);                                 \
  template void ShardedCpuDecoder<T>::rope(const State&, View, bool) const;                                        \
  template void ShardedCpuDecoder<T>::attend(const State&, View, View, CView, CView, CView) const;                 \
  template void ShardedCpuDecoder<T>::attend_backward(const State&, View, View, View, CView, CView, CView, CView,  \
                                                      CView, CView) const;                                         \
  template void ShardedCpuDecoder<T>::layer_backward(State&, int, View);                                           \
  template void ShardedCpuDecoder<T>::attention_backward(const State&, LayerActs&, std::vector<T>&, std::vector<T>&);
TB_INSTANTIATE(float)
TB_INSTANTIATE(double)
#undef TB_INSTANTIATE

}  // namespace tb::parallel
