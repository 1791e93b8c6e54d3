// model/attention_mla_cuda.cpp: the multi-head latent attention of a CUDA decoder block, BF16
// (model/attention_mla_cuda.h has the formulas).
#include "model/attention_mla_cuda.h"

#include <type_traits>

#include "core/error.h"
#include "model/decoder_common.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/mla.h"
#include "ops/cuda/norm.h"
#include "ops/cuda/rope.h"

namespace tb::model {
namespace {

using bf16 = __nv_bfloat16;

void mark(const LinearEnv& e, std::string_view op) {
  if (e.mark) e.mark(op);
}

// Columns [c0, c0 + cols) of a [rows, width] buffer.
template <class T>
TensorView<T> cols(T* buf, std::int64_t rows, std::int64_t width, std::int64_t c0, std::int64_t cols) {
  return TensorView<T>(buf + c0, Shape{rows, cols, 0, 0}, Shape{width, 1, 0, 0}, 2);
}

// [batch, seq, heads, dim] view of `dim` columns at `col` of each `head`-wide head of a [batch seq, heads head] buffer.
TensorView<bf16> head_part(bf16* buf, int batch, int seq, std::int64_t heads, std::int64_t head, std::int64_t col,
                           std::int64_t dim) {
  return TensorView<bf16>(buf + col, Shape{batch, seq, heads, dim},
                          Shape{std::int64_t(seq) * heads * head, heads * head, head, 1}, 4);
}

// A latent norm's gain [dim] and its gradient (of the gradients' type T).
TensorView<const bf16> gain(const LinearEnv& e, const Slot& s) {
  return TensorView<const bf16>(e.params + s.offset, {std::int64_t(s.size)});
}
template <class T>
TensorView<T> gain_grad(const LinearEnv& e, const Slot& s) {
  return TensorView<T>(static_cast<T*>(e.grad(s)), {std::int64_t(s.size)});
}

// [tokens, heads, dim] view of `dim` columns at `col` of each `head`-wide head of a [tokens, heads head] buffer.
template <class T>
TensorView<T> per_head(T* buf, std::int64_t tokens, std::int64_t heads, std::int64_t head, std::int64_t col,
                       std::int64_t dim) {
  return TensorView<T>(buf + col, Shape{tokens, heads, dim, 0}, Shape{heads * head, head, 1, 0}, 3);
}

}  // namespace

// ---- shared ------------------------------------------------------------------------------------------------------

MlaShared::MlaShared(ops::DeviceContext& dc, const ModelConfig& cfg, bool deterministic)
    : cfg_(cfg), deterministic_(deterministic), sdpa_(dc.device()) {
  const std::vector<double> inv = detail::rope_inv_freq(cfg_);
  inv_freq_ = ops::DeviceBuffer(dc.device(), inv.size() * sizeof(float));
  ops::upload_rope_inv_freq(TensorView<float>(inv_freq_.as<float>(), {std::int64_t(inv.size())}), inv, dc.stream());
}

ops::AttentionShape MlaShared::sdpa_shape(const ModelConfig& cfg, int batch, int seq, bool deterministic) {
  const MlaConfig& m = cfg.mla;
  const std::int64_t A = cfg.heads, dqk = m.qk_head_dim(), kvw = A * (m.qk_nope_head_dim + m.v_head_dim);
  ops::AttentionShape s;
  s.batch = batch, s.seq = seq, s.heads = s.kv_heads = A, s.head_dim = dqk, s.v_head_dim = m.v_head_dim;
  s.q = s.k = ops::HeadStrides{seq * A * dqk, A * dqk, dqk};
  s.v = ops::HeadStrides{seq * kvw, kvw, m.qk_nope_head_dim + m.v_head_dim};
  s.o = ops::HeadStrides{seq * A * m.v_head_dim, A * m.v_head_dim, m.v_head_dim};
  s.deterministic = deterministic;
  return s;
}

void MlaShared::prepare(int batch, int seq) { sdpa_.plan(sdpa_shape(cfg_, batch, seq, deterministic_)); }

TensorView<const float> MlaShared::inv_freq() const {
  return TensorView<const float>(inv_freq_.as<float>(), {cfg_.mla.qk_rope_head_dim / 2});
}

// ---- a layer -----------------------------------------------------------------------------------------------------

MlaAttentionCuda::MlaAttentionCuda(const ModelConfig& cfg, const DenseLayout& layout, const DenseLayout::Layer& layer)
    : cfg_(cfg),
      m_(cfg.mla),
      heads_(cfg.heads),
      q_norm_(layer.q_norm >= 0 ? &layout.slots.at(std::size_t(layer.q_norm)) : nullptr),
      kv_norm_(&layout.slots.at(std::size_t(layer.kv_norm))),
      q_down_(layer.q_down >= 0 ? std::make_unique<LinearCuda>(layout, layer.q_down) : nullptr),
      q_up_(layout, layer.q_up),
      kv_down_(layout, layer.kv_down),
      kv_up_(layout, layer.kv_up),
      out_(layout, layer.out) {
  TB_REQUIRE(layer.mla(), "CUDA decoder: internal: a MLA module for a layer without MLA parameters");
}

std::vector<LinearCuda*> MlaAttentionCuda::linears() {
  std::vector<LinearCuda*> out;
  if (q_down_) out.push_back(q_down_.get());
  for (LinearCuda* l : {&q_up_, &kv_down_, &kv_up_, &out_}) out.push_back(l);
  return out;
}

void MlaAttentionCuda::plan(ArenaPlan& a, const PlanPass& pass, int sets, std::int64_t rows,
                            const RecomputePolicy& p) {
  sets_.resize(std::size_t(sets));
  const std::span<Saved> all(sets_);
  const auto n = std::size_t(rows);
  const std::size_t rq = std::size_t(m_.q_lora_rank), rkv = std::size_t(m_.kv_lora_rank);
  const std::size_t A = std::size_t(heads_), dqk = std::size_t(m_.qk_head_dim()), dr = std::size_t(m_.qk_rope_head_dim);
  const std::size_t kvw = A * std::size_t(m_.qk_nope_head_dim + m_.v_head_dim), ow = A * std::size_t(m_.v_head_dim);
  const bool state = p.keeps_state(), cheap = p.keeps_cheap_outputs();
  plan_field(a, pass, all, &Saved::cqr, n * rq, state);
  plan_field(a, pass, all, &Saved::cq, n * rq, cheap);
  plan_field(a, pass, all, &Saved::rstdq, rq > 0 ? n : 0, state);
  plan_field(a, pass, all, &Saved::ckr, n * (rkv + dr), state);
  plan_field(a, pass, all, &Saved::ckv, n * rkv, cheap);
  plan_field(a, pass, all, &Saved::rstdkv, n, state);
  plan_field(a, pass, all, &Saved::q, n * A * dqk, state);
  plan_field(a, pass, all, &Saved::kv, n * kvw, state);
  plan_field(a, pass, all, &Saved::k, n * A * dqk, cheap);
  plan_field(a, pass, all, &Saved::o, n * ow, state);
  plan_field(a, pass, all, &Saved::lse, n * A, state);
  // the backward's, shared by the layers
  plan_field(a, pass, all, &Saved::dout, n * ow, false);
  plan_field(a, pass, all, &Saved::dq, n * A * dqk, false);
  plan_field(a, pass, all, &Saved::dk, n * A * dqk, false);
  plan_field(a, pass, all, &Saved::dkv, n * kvw, false);
  plan_field(a, pass, all, &Saved::dcq, n * rq, false);
  plan_field(a, pass, all, &Saved::dcqr, n * rq, false);
  plan_field(a, pass, all, &Saved::dckv, n * rkv, false);
  plan_field(a, pass, all, &Saved::dckr, n * (rkv + dr), false);
}

void MlaAttentionCuda::norms(const MlaCall& c, const Saved& S) const {
  const LinearEnv& e = c.e;
  const std::int64_t n = std::int64_t(c.batch) * c.seq, rq = m_.q_lora_rank, rkv = m_.kv_lora_rank;
  const auto rms = ops::NormKind::rmsnorm;
  const float eps = float(cfg_.norm_eps);
  if (rq > 0)
    ops::norm_forward(rms, {S.cq, {n, rq}}, {}, {S.rstdq, {n}}, {S.cqr, {n, rq}}, gain(e, *q_norm_), {}, eps,
                      e.dc.stream());
  ops::norm_forward(rms, {S.ckv, {n, rkv}}, {}, {S.rstdkv, {n}},
                    cols<const bf16>(S.ckr, n, rkv + m_.qk_rope_head_dim, 0, rkv), gain(e, *kv_norm_), {}, eps,
                    e.dc.stream());
  mark(e, "norm fwd");
}

void MlaAttentionCuda::keys(const MlaCall& c, const Saved& S) const {
  const std::int64_t n = std::int64_t(c.batch) * c.seq, dn = m_.qk_nope_head_dim, dr = m_.qk_rope_head_dim;
  const std::int64_t rkv = m_.kv_lora_rank, dqk = m_.qk_head_dim();
  ops::mla_k_forward(per_head(S.k, n, heads_, dqk, 0, dqk),
                     per_head<const bf16>(S.kv, n, heads_, dn + m_.v_head_dim, 0, dn),
                     cols<const bf16>(S.ckr, n, rkv + dr, rkv, dr), c.e.dc.stream());
  mark(c.e, "mla keys");
}

void MlaAttentionCuda::forward(const MlaCall& c, int set, const bf16* y1, bf16* y) {
  const LinearEnv& e = c.e;
  const Saved& S = sets_[std::size_t(set)];
  const std::int64_t n = std::int64_t(c.batch) * c.seq, rkv = m_.kv_lora_rank, dr = m_.qk_rope_head_dim;
  const std::int64_t dn = m_.qk_nope_head_dim, dqk = m_.qk_head_dim();
  cudaStream_t st = e.dc.stream();
  std::size_t k = 0;  // the linear's index in linears()' order
  if (q_down_) q_down_->forward(e, S.cqr, y1, S.lin[k++], n);
  const LinearSaved& q_saved = S.lin[k++];
  kv_down_.forward(e, S.ckr, y1, S.lin[k++], n);
  norms(c, S);
  q_up_.forward(e, S.q, q_down_ ? S.cq : y1, q_saved, n);
  ops::rope_forward(head_part(S.q, c.batch, c.seq, heads_, dqk, dn, dr), c.shared.inv_freq(), st);
  ops::rope_forward(head_part(S.ckr, c.batch, c.seq, 1, rkv + dr, rkv, dr), c.shared.inv_freq(), st);
  mark(e, "rope fwd");
  kv_up_.forward(e, S.kv, S.ckv, S.lin[k++], n);
  keys(c, S);
  const ops::AttentionShape as = MlaShared::sdpa_shape(cfg_, c.batch, c.seq, c.shared.deterministic());
  c.shared.sdpa().forward(as, {S.q, S.k, S.kv + dn, S.o, S.lse}, st);
  mark(e, "attention fwd");
  out_.forward(e, y, S.o, S.lin[k], n);
}

void MlaAttentionCuda::backward(const MlaCall& c, int set, const bf16* y1, const bf16* dy, bf16* dx) {
  const LinearEnv& e = c.e;
  const Saved& S = sets_[std::size_t(set)];
  const std::int64_t n = std::int64_t(c.batch) * c.seq, rq = m_.q_lora_rank, rkv = m_.kv_lora_rank;
  const std::int64_t dr = m_.qk_rope_head_dim, dn = m_.qk_nope_head_dim, dv = m_.v_head_dim, dqk = m_.qk_head_dim();
  cudaStream_t st = e.dc.stream();
  if (c.policy.recomputes_cheap_outputs()) {  // cq, ckv and k from what was kept
    norms(c, S);
    keys(c, S);
    mark(e, "recompute");
  }
  const std::size_t q0 = q_down_ ? 1 : 0;  // q_up's index in linears(); then kv_down, kv_up, out
  out_.backward(e, S.dout, dy, S.o, S.lin[q0 + 3], n);
  const ops::AttentionShape as = MlaShared::sdpa_shape(cfg_, c.batch, c.seq, c.shared.deterministic());
  c.shared.sdpa().backward(as, {S.q, S.k, S.kv + dn, S.o, S.dout, S.lse, S.dq, S.dk, S.dkv + dn}, st);
  mark(e, "attention bwd");
  ops::rope_backward(head_part(S.dq, c.batch, c.seq, heads_, dqk, dn, dr), c.shared.inv_freq(), st);
  ops::mla_k_backward(per_head(S.dkv, n, heads_, dn + dv, 0, dn), cols(S.dckr, n, rkv + dr, rkv, dr),
                      per_head<const bf16>(S.dk, n, heads_, dqk, 0, dqk), st);
  ops::rope_backward(head_part(S.dckr, c.batch, c.seq, 1, rkv + dr, rkv, dr), c.shared.inv_freq(), st);
  mark(e, "mla keys bwd");
  // the up projections, then the latent norms
  kv_up_.backward(e, S.dckv, S.dkv, S.ckv, S.lin[q0 + 2], n);
  const auto rms = ops::NormKind::rmsnorm;
  ops::with_float_type(e.grad_type, [&]<class T>(std::type_identity<T>) {
    ops::norm_backward<T>(rms, cols(S.dckr, n, rkv + dr, 0, rkv), gain_grad<T>(e, *kv_norm_), {}, {S.dckv, {n, rkv}},
                          cols<const bf16>(S.ckr, n, rkv + dr, 0, rkv), gain(e, *kv_norm_), {}, {S.rstdkv, {n}}, st,
                          c.norm_ws);
    if (!q_down_) return;
    q_up_.backward(e, S.dcq, S.dq, S.cq, S.lin[q0], n);
    ops::norm_backward<T>(rms, {S.dcqr, {n, rq}}, gain_grad<T>(e, *q_norm_), {}, {S.dcq, {n, rq}}, {S.cqr, {n, rq}},
                          gain(e, *q_norm_), {}, {S.rstdq, {n}}, st, c.norm_ws);
  });
  mark(e, "norm bwd");
  // the down projections: dy1 written by the query path, then the key / value path's added
  if (q_down_)
    q_down_->backward(e, dx, S.dcqr, y1, S.lin[0], n);
  else
    q_up_.backward(e, dx, S.dq, y1, S.lin[0], n);
  kv_down_.backward(e, dx, S.dckr, y1, S.lin[q0 + 1], n, {}, false, /*dx_accumulate=*/true);
}

}  // namespace tb::model
