// parallel/decoder_cpu_parallel_mla.cpp: the attention of a multi-head latent attention layer in the sharded CPU
// decoder (model/config.h MlaConfig has the math), from this rank's rows y1 [rows, d] to the out projection's output.
// Hl = heads / tp local heads, Dqk = Dn + Dr, W = Rq + Rkv + Dr the latent width:
//   lat = [y1 W_dq^T | y1 W_dkv^T]  [rows, W];  latn = [RMSNorm(c_q) | RMSNorm(c_kv) | RoPE(k_rope)] (row positions)
//   LAT = gather(latn)  [n, W]  (SP: all-gather over tp; the latents are small, the up projections run per head)
//   q = LAT_q W_uq^T (Rq = 0: gather(y1) W_q^T)  [n, Hl Dqk], RoPE on each head's rope part;  kv = LAT_kv W_ukv^T
//   kvh = [K | V] [n, Hl (Dqk + Dv)] with K_h = [k_nope_h | k_rope] (ops/cpu/mla.h);  gathered over cp as the dense
//   layer's K, V;  o = attention(q, K, V) with the qk width Dqk and the v width Dv;  out = reduce(o W_o^T)
// Backward, from dr2 [rows, d]:
//   do = gather(dr2) W_o;  dq, dK, dV = attention'(do) (dK, dV reduce-scattered over cp);  RoPE^-1 on dq's rope parts
//   dkv = [dK_nope | dV] per head;  dLAT = [dq W_uq | dkv W_ukv | sum_h dK_rope]  (partial over tp: the local heads)
//   dlat = reduce(dLAT) (SP: reduce-scatter; else all-reduce);  RoPE^-1 on its k_rope part;  the norms' backward
//   dy1 = dlat_q W_dq + dlat_kv W_dkv  (Rq = 0: + reduce(dq W_q))
// W_dq, W_dkv and the latent norms are replicated over tp and run on this rank's rows: with SP their gradients are
// partial sums over the token rows, reduced with the other replicated slots' (G(), end_replicated_grads).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "model/decoder_common.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/linear.h"
#include "ops/cpu/mla.h"
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

// Columns [c0, c0 + c) of a [rows, cols] matrix view.
template <class P>
TensorView<P> cols(TensorView<P> m, std::int64_t c0, std::int64_t c) {
  return TensorView<P>(m.data() + c0, Shape{m.size(0), c}, Shape{m.stride(0), 1}, 2);
}

// [batch, seq, heads, dim] view of `dim` columns at `col` of each head of width `head` in a [batch seq, heads head]
// buffer (the rope parts of q: dim Dr at Dn of each Dqk-wide head).
template <class T>
TensorView<T> head_part(T* buf, std::int64_t col, std::int64_t batch, std::int64_t seq, std::int64_t heads,
                        std::int64_t head, std::int64_t dim) {
  return TensorView<T>(buf + col, Shape{batch, seq, heads, dim}, Shape{seq * heads * head, heads * head, head, 1}, 4);
}

// A [1, rows, 1, dim] view of columns [col, col + dim) of a [rows, width] buffer: one rope part per row.
template <class T>
TensorView<T> row_part(T* buf, std::int64_t col, std::int64_t rows, std::int64_t width, std::int64_t dim) {
  return TensorView<T>(buf + col, Shape{1, rows, 1, dim}, Shape{rows * width, width, dim, 1}, 4);
}

// This rank's MLA widths: Hl heads; the latent width W = Rq + Rkv + Dr; q, kv, kvh ([K | V]) and o per token.
struct MlaDims {
  std::int64_t hl, dn, dr, dv, dqk, rq, rkv, w, qw, kvw, kvhw, ow;
};

MlaDims mla_dims(const model::ModelConfig& c, std::int64_t hl) {
  const model::MlaConfig& m = c.mla;
  const std::int64_t dn = m.qk_nope_head_dim, dr = m.qk_rope_head_dim, dv = m.v_head_dim, dqk = dn + dr;
  return {hl, dn, dr, dv, dqk, m.q_lora_rank, m.kv_lora_rank, m.q_lora_rank + m.kv_lora_rank + dr,
          hl * dqk, hl * (dn + dv), hl * (dqk + dv), hl * dv};
}

}  // namespace

template <class T>
void ShardedCpuDecoder<T>::mla_forward(const State& s, const model::DenseLayout::Layer& L, LayerActs& A, CView y1,
                                       View out) {
  const MlaDims D = mla_dims(cfg_, dims_.hl);
  const std::int64_t rows = s.rows, n = s.n, b = s.batch, sl = std::int64_t(s.pos.size());
  const auto rms = cpu::NormKind::rmsnorm;
  // the latents of this rank's rows
  auto lat = mat(A.lat, rows, D.w), latn = mat(A.latn, rows, D.w);
  if (D.rq > 0) cpu::linear_forward<T>(cols(lat, 0, D.rq), y1, P(L.q_down));
  cpu::linear_forward<T>(cols(lat, D.rq, D.rkv + D.dr), y1, P(L.kv_down));
  if (D.rq > 0)
    cpu::norm_forward<T>(rms, cols(latn, 0, D.rq), {}, vec(A.rstdq, rows), cols(lat, 0, D.rq), P(L.q_norm), {},
                         cfg_.norm_eps);
  cpu::norm_forward<T>(rms, cols(latn, D.rq, D.rkv), {}, vec(A.rstdkv, rows), cols(lat, D.rq, D.rkv), P(L.kv_norm), {},
                       cfg_.norm_eps);
  const std::int64_t kr = D.rq + D.rkv;  // the k_rope column
  for (std::int64_t r = 0; r < rows; ++r) std::copy_n(&lat(r, kr), D.dr, &latn(r, kr));
  cpu::rope_forward_at<T>(row_part(latn.data(), kr, rows, D.w, D.dr), inv_freq_, row_positions(s));
  // the cp rank's tokens: queries, keys and values of the local heads
  const CView latg = gather_rows(A.latg, latn, n);
  auto q = mat(A.mq, n, D.qw), kv = mat(A.mkv, n, D.kvw);
  cpu::linear_forward<T>(q, D.rq > 0 ? cols(latg, 0, D.rq) : gather_rows(A.y1g, y1, n), P(L.q_up));
  rope(s, head_part(A.mq.data(), D.dn, b, sl, D.hl, D.dqk, D.dr), false);
  cpu::linear_forward<T>(kv, cols(latg, D.rq, D.rkv), P(L.kv_up));
  auto kvh = mat(A.mkvh, n, D.kvhw);
  cpu::mla_k_forward<T>(TensorView<T>(kvh.data(), Shape{n, D.hl, D.dqk}, Shape{D.kvhw, D.dqk, 1}, 3),
                        TensorView<const T>(kv.data(), Shape{n, D.hl, D.dn}, Shape{D.kvw, D.dn + D.dv, 1}, 3),
                        cols(latg, kr, D.dr));
  for (std::int64_t t = 0; t < n; ++t)
    for (std::int64_t h = 0; h < D.hl; ++h)
      std::copy_n(&kv(t, h * (D.dn + D.dv) + D.dn), D.dv, &kvh(t, D.qw + h * D.dv));
  gather_kv(s, A.mkvh, 0, D.kvhw, A.kv);  // every key of the sequence (cp)
  mat(A.o, n, D.ow);
  attend(s, heads_view(A.o, 0, b, sl, D.hl, D.dv, D.ow), vec(A.lse, b * D.hl * sl).reshape({b, D.hl, sl}),
         heads_view(A.mq, 0, b, sl, D.hl, D.dqk, D.qw), heads_view(A.kv, 0, b, s.seq, D.hl, D.dqk, D.kvhw),
         heads_view(A.kv, D.qw, b, s.seq, D.hl, D.dv, D.kvhw));
  std::vector<T>& partial = scratch_->partial;
  cpu::linear_forward<T>(mat(partial, n, dims_.d), mat(A.o, n, D.ow), P(L.out));
  reduce_rows(out, partial, n);
}

template <class T>
void ShardedCpuDecoder<T>::mla_backward(const State& s, const model::DenseLayout::Layer& L, LayerActs& A, View dr2,
                                        View dy) {
  const MlaDims D = mla_dims(cfg_, dims_.hl);
  const std::int64_t rows = s.rows, n = s.n, d = dims_.d, b = s.batch, sl = std::int64_t(s.pos.size());
  const std::int64_t kr = D.rq + D.rkv;
  const auto rms = cpu::NormKind::rmsnorm;
  Scratch& S = *scratch_;
  const CView latg = sp_ ? CView(A.latg.data(), {n, D.w}) : CView(A.latn.data(), {rows, D.w});  // as the forward's
  // out projection and attention: dq of the local queries, dK and dV of this rank's keys (summed over cp)
  auto dout = mat(S.dout, n, D.ow);
  cpu::linear_backward<T>(dout, G(L.out), {}, gather_rows(S.gathered, dr2, n), mat(A.o, n, D.ow), P(L.out));
  auto dq = mat(S.dqkv, n, D.qw);
  mat(S.dkv, b * s.seq, D.kvhw);
  attend_backward(
      s, heads_view(S.dqkv, 0, b, sl, D.hl, D.dqk, D.qw), heads_view(S.dkv, 0, b, s.seq, D.hl, D.dqk, D.kvhw),
      heads_view(S.dkv, D.qw, b, s.seq, D.hl, D.dv, D.kvhw), heads_view(S.dout, 0, b, sl, D.hl, D.dv, D.ow),
      heads_view(A.mq, 0, b, sl, D.hl, D.dqk, D.qw), heads_view(A.kv, 0, b, s.seq, D.hl, D.dqk, D.kvhw),
      heads_view(A.kv, D.qw, b, s.seq, D.hl, D.dv, D.kvhw), heads_view(A.o, 0, b, sl, D.hl, D.dv, D.ow),
      TensorView<T>(A.lse.data(), {b, D.hl, sl}));
  auto dkvh = mat(S.dkvh, n, D.kvhw);
  scatter_dkv(s, S.dkv, 0, D.kvhw, S.dkvh);
  rope(s, head_part(S.dqkv.data(), D.dn, b, sl, D.hl, D.dqk, D.dr), true);
  // back through K's assembly and the up projections, onto the latents of every token (partial over tp)
  auto dkv = mat(S.dkvup, n, D.kvw), dlat = mat(S.dlat, n, D.w);
  cpu::mla_k_backward<T>(TensorView<T>(dkv.data(), Shape{n, D.hl, D.dn}, Shape{D.kvw, D.dn + D.dv, 1}, 3),
                         cols(dlat, kr, D.dr),
                         TensorView<const T>(dkvh.data(), Shape{n, D.hl, D.dqk}, Shape{D.kvhw, D.dqk, 1}, 3));
  for (std::int64_t t = 0; t < n; ++t)
    for (std::int64_t h = 0; h < D.hl; ++h)
      std::copy_n(&dkvh(t, D.qw + h * D.dv), D.dv, &dkv(t, h * (D.dn + D.dv) + D.dn));
  if (D.rq > 0)
    cpu::linear_backward<T>(cols(dlat, 0, D.rq), G(L.q_up), {}, dq, cols(latg, 0, D.rq), P(L.q_up));
  else  // W_q reads the gathered y1: its input gradient is reduced like qkv's
    cpu::linear_backward<T>(mat(S.partial, n, d), G(L.q_up), {}, dq,
                            sp_ ? CView(A.y1g.data(), {n, d}) : CView(A.y1.data(), {rows, d}), P(L.q_up));
  cpu::linear_backward<T>(cols(dlat, D.rq, D.rkv), G(L.kv_up), {}, dkv, cols(latg, D.rq, D.rkv), P(L.kv_up));
  // this rank's rows, summed over the tp ranks' heads; the latents' own backward
  auto dl = mat(S.dlatl, rows, D.w), draw = mat(S.dlatraw, rows, D.w);
  reduce_rows(dl, S.dlat, n);
  cpu::rope_backward_at<T>(row_part(dl.data(), kr, rows, D.w, D.dr), inv_freq_, row_positions(s));
  const CView lat(A.lat.data(), {rows, D.w});
  if (D.rq > 0)
    cpu::norm_backward<T>(rms, cols(draw, 0, D.rq), G(L.q_norm), {}, cols(dl, 0, D.rq), cols(lat, 0, D.rq),
                          P(L.q_norm), {}, vec(A.rstdq, rows));
  cpu::norm_backward<T>(rms, cols(draw, D.rq, D.rkv), G(L.kv_norm), {}, cols(dl, D.rq, D.rkv), cols(lat, D.rq, D.rkv),
                        P(L.kv_norm), {}, vec(A.rstdkv, rows));
  for (std::int64_t r = 0; r < rows; ++r) std::copy_n(&dl(r, kr), D.dr, &draw(r, kr));
  // the down projections (this rank's rows)
  const CView y1(A.y1.data(), {rows, d});
  cpu::linear_backward<T>(dy, G(L.kv_down), {}, cols(draw, D.rq, D.rkv + D.dr), y1, P(L.kv_down));
  auto dq_in = mat(S.dyq, rows, d);  // the query path's share of dy1
  if (D.rq > 0)
    cpu::linear_backward<T>(dq_in, G(L.q_down), {}, cols(draw, 0, D.rq), y1, P(L.q_down));
  else
    reduce_rows(dq_in, S.partial, n);
  for (std::int64_t i = 0; i < dy.numel(); ++i) dy.data()[i] += dq_in.data()[i];
}

// The members defined here, for the two types the class is instantiated for (decoder_cpu_parallel.cpp).
#define TB_INSTANTIATE(T)                                                                                            \
  template void ShardedCpuDecoder<T>::mla_forward(const State&, const model::DenseLayout::Layer&, LayerActs&, CView, \
                                                  View);                                                             \
  template void ShardedCpuDecoder<T>::mla_backward(const State&, const model::DenseLayout::Layer&, LayerActs&, View, \
                                                   View);
TB_INSTANTIATE(float)
TB_INSTANTIATE(double)
#undef TB_INSTANTIATE

}  // namespace tb::parallel
