// model/decoder_cpu.cpp: forward and backward of the dense decoder on the CPU reference ops (see the .h).
// Backward, in reverse (dnext: gradient reaching the sum r = x + resid of the next norm, i.e. both the
// layer's output x and its residual r2):
//   dyf = dLM/dyf;  dnext = dnormf(dyf)
//   per layer, last first:
//     dg = dnext W2;  dh = act'(dg);  dy2 = dh W1;  dr2 = dnorm2(dy2) + dnext
//     do = dr2 Wout;  dq, dk, dv = attention'(do);  dq, dk = rope^-1(dq, dk);  dy1 = dqkv Wqkv
//     dnext = dnorm1(dy1) + dr2
//   dE[tokens] += dnext (and dP[position] += dnext)
#include "model/decoder_cpu.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "model/decoder_common.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/cross_entropy.h"
#include "ops/cpu/embedding.h"
#include "ops/cpu/linear.h"
#include "ops/cpu/norm.h"
#include "ops/cpu/rope.h"

namespace tb::model {
namespace {

namespace cpu = tb::ops::cpu;
using detail::act_backward;
using detail::act_forward;
using detail::check_ids;
using detail::heads_view;
using detail::mat;
using detail::norm_kind;
using detail::slot_view;
using detail::vec;

}  // namespace

template <class T>
CpuDecoder<T>::CpuDecoder(const ModelConfig& cfg, std::uint64_t seed) : cfg_(cfg), layout_(model::dense_layout(cfg)) {
  params_.resize(layout_.total);
  grads_.assign(layout_.total, T(0));
  init_params<T>(params_, layout_, seed);
  inv_freq_ = detail::rope_inv_freq(cfg_);
}

template <class T>
std::span<T> CpuDecoder<T>::param(std::string_view name) {
  const Slot& s = layout_.at(name);
  return std::span<T>(params_).subspan(s.offset, s.size);
}

template <class T>
std::span<T> CpuDecoder<T>::grad(std::string_view name) {
  const Slot& s = layout_.at(name);
  return std::span<T>(grads_).subspan(s.offset, s.size);
}

template <class T>
void CpuDecoder<T>::zero_grads() {
  std::fill(grads_.begin(), grads_.end(), T(0));
}

template <class T>
void CpuDecoder<T>::set_lm_head_chunk(int tokens) {
  TB_REQUIRE(tokens >= 1, "dense decoder: the LM-head chunk must be at least 1 token, got " + std::to_string(tokens));
  lm_head_chunk_ = tokens;
}

template <class T>
double CpuDecoder<T>::forward(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets, int batch,
                              int seq) {
  return run(tokens, targets, batch, seq, false, 1.0);
}

template <class T>
double CpuDecoder<T>::forward_backward(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets,
                                       int batch, int seq, double grad_scale) {
  return run(tokens, targets, batch, seq, true, grad_scale);
}

template <class T>
double CpuDecoder<T>::run(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets, int batch,
                          int seq, bool backward, double grad_scale) {
  const ModelConfig& c = cfg_;
  TB_REQUIRE(batch >= 1 && seq >= 1, "dense decoder: batch and seq must be >= 1, got batch " +
                                         std::to_string(batch) + " seq " + std::to_string(seq));
  TB_REQUIRE(seq <= c.seq, "dense decoder: seq " + std::to_string(seq) + " is longer than the model's " +
                               std::to_string(c.seq) + " positions");
  const std::int64_t n = std::int64_t(batch) * seq;
  TB_REQUIRE(std::int64_t(tokens.size()) == n && std::int64_t(targets.size()) == n,
             "dense decoder: batch " + std::to_string(batch) + " x seq " + std::to_string(seq) + " needs " +
                 std::to_string(n) + " tokens and targets, got " + std::to_string(tokens.size()) + " and " +
                 std::to_string(targets.size()));
  check_ids(tokens, c.vocab, "token");
  check_ids(targets, c.vocab, "target");

  const cpu::NormKind nk = norm_kind(c.norm);
  const double eps = c.norm_eps;
  const std::int64_t d = c.d_model, hd = c.head_dim, qd = c.q_dim(), kvd = c.kv_dim(), width = qd + 2 * kvd;
  const std::int64_t ffn = c.ffn, fc1_rows = detail::fc1_rows(c);
  auto P = [&](int index) { return slot_view(params_, layout_, index); };
  auto G = [&](int index) { return slot_view(grads_, layout_, index); };
  acts_.resize(std::size_t(c.layers));

  // Forward.
  auto x0 = mat(x0_, n, d);
  cpu::embedding_forward<T>(x0, P(layout_.embed), tokens);
  if (c.pos == Pos::learned) cpu::position_embedding_add<T>(x0, P(layout_.pos_embed), seq);
  auto m = mat(m_, n, d);  // MLP output of a layer, the x of the next
  TensorView<const T> x = x0, resid;
  for (int l = 0; l < c.layers; ++l) {
    const DenseLayout::Layer& L = layout_.layers[std::size_t(l)];
    LayerActs& A = acts_[std::size_t(l)];
    auto r1 = mat(A.r1, n, d), y1 = mat(A.y1, n, d), qkv = mat(A.qkv, n, width), o = mat(A.o, n, qd);
    auto r2 = mat(A.r2, n, d), y2 = mat(A.y2, n, d), h = mat(A.h, n, fc1_rows), g = mat(A.g, n, ffn);
    cpu::add_norm_forward<T>(nk, y1, r1, vec(A.mean1, n), vec(A.rstd1, n), x, resid, P(L.norm1_w), P(L.norm1_b), eps);
    cpu::linear_forward<T>(qkv, y1, P(L.qkv));
    auto q = heads_view(A.qkv, 0, batch, seq, c.heads, hd, width);
    auto k = heads_view(A.qkv, qd, batch, seq, c.kv_heads, hd, width);
    auto v = heads_view(A.qkv, qd + kvd, batch, seq, c.kv_heads, hd, width);
    if (c.pos == Pos::rope) {
      cpu::rope_forward<T>(q, inv_freq_);
      cpu::rope_forward<T>(k, inv_freq_);
    }
    A.lse.resize(std::size_t(n * c.heads));
    auto lse = TensorView<T>(A.lse.data(), {batch, c.heads, seq});
    cpu::attention_forward<T>(heads_view(A.o, 0, batch, seq, c.heads, hd, qd), lse, q, k, v);
    auto a = mat(m_, n, d);  // the attention output lands in m (free until the MLP writes it)
    cpu::linear_forward<T>(a, o, P(L.out));
    cpu::add_norm_forward<T>(nk, y2, r2, vec(A.mean2, n), vec(A.rstd2, n), a, r1, P(L.norm2_w), P(L.norm2_b), eps);
    cpu::linear_forward<T>(h, y2, P(L.fc1));
    act_forward<T>(c.act, g, h);
    cpu::linear_forward<T>(m, g, P(L.fc2));
    x = m;
    resid = r2;
  }
  auto rf = mat(rf_, n, d), yf = mat(yf_, n, d), meanf = vec(meanf_, n), rstdf = vec(rstdf_, n);
  cpu::add_norm_forward<T>(nk, yf, rf, meanf, rstdf, x, resid, P(layout_.final_norm_w), P(layout_.final_norm_b), eps);
  if (!backward)
    return cpu::lm_head_cross_entropy<T>({}, {}, yf, P(layout_.lm_head), targets, lm_head_chunk_);

  // Backward.
  std::vector<T> dyf_buf, dnext_buf, dr2_buf, dy_buf, dg_buf, dh_buf, do_buf, dqkv_buf;
  auto dyf = mat(dyf_buf, n, d);
  const double loss = cpu::lm_head_cross_entropy<T>(dyf, G(layout_.lm_head), yf, P(layout_.lm_head), targets,
                                                    lm_head_chunk_, grad_scale);
  auto dnext = mat(dnext_buf, n, d), dr2 = mat(dr2_buf, n, d), dy = mat(dy_buf, n, d);
  auto dg = mat(dg_buf, n, ffn), dh = mat(dh_buf, n, fc1_rows), dout = mat(do_buf, n, qd);
  auto dqkv = mat(dqkv_buf, n, width);
  cpu::add_norm_backward<T>(nk, dnext, G(layout_.final_norm_w), G(layout_.final_norm_b), dyf, {}, rf,
                            P(layout_.final_norm_w), meanf, rstdf);
  for (int l = c.layers - 1; l >= 0; --l) {
    const DenseLayout::Layer& L = layout_.layers[std::size_t(l)];
    LayerActs& A = acts_[std::size_t(l)];
    auto r1 = mat(A.r1, n, d), y1 = mat(A.y1, n, d), o = mat(A.o, n, qd);
    auto r2 = mat(A.r2, n, d), y2 = mat(A.y2, n, d), h = mat(A.h, n, fc1_rows), g = mat(A.g, n, ffn);
    // MLP
    cpu::linear_backward<T>(dg, G(L.fc2), {}, dnext, g, P(L.fc2));
    act_backward<T>(c.act, dh, dg, h);
    cpu::linear_backward<T>(dy, G(L.fc1), {}, dh, y2, P(L.fc1));
    cpu::add_norm_backward<T>(nk, dr2, G(L.norm2_w), G(L.norm2_b), dy, dnext, r2, P(L.norm2_w), vec(A.mean2, n),
                              vec(A.rstd2, n));
    // attention
    cpu::linear_backward<T>(dout, G(L.out), {}, dr2, o, P(L.out));
    auto dq = heads_view(dqkv_buf, 0, batch, seq, c.heads, hd, width);
    auto dk = heads_view(dqkv_buf, qd, batch, seq, c.kv_heads, hd, width);
    auto dv = heads_view(dqkv_buf, qd + kvd, batch, seq, c.kv_heads, hd, width);
    auto lse = TensorView<T>(A.lse.data(), {batch, c.heads, seq});
    cpu::attention_backward<T>(dq, dk, dv, heads_view(do_buf, 0, batch, seq, c.heads, hd, qd),
                               heads_view(A.qkv, 0, batch, seq, c.heads, hd, width),
                               heads_view(A.qkv, qd, batch, seq, c.kv_heads, hd, width),
                               heads_view(A.qkv, qd + kvd, batch, seq, c.kv_heads, hd, width),
                               heads_view(A.o, 0, batch, seq, c.heads, hd, qd), lse);
    if (c.pos == Pos::rope) {
      cpu::rope_backward<T>(dq, inv_freq_);
      cpu::rope_backward<T>(dk, inv_freq_);
    }
    cpu::linear_backward<T>(dy, G(L.qkv), {}, dqkv, y1, P(L.qkv));
    cpu::add_norm_backward<T>(nk, dnext, G(L.norm1_w), G(L.norm1_b), dy, dr2, r1, P(L.norm1_w), vec(A.mean1, n),
                              vec(A.rstd1, n));
  }
  cpu::embedding_backward<T>(G(layout_.embed), dnext, tokens);
  if (c.pos == Pos::learned) cpu::position_embedding_backward<T>(G(layout_.pos_embed), dnext, seq);
  return loss;
}

template class CpuDecoder<float>;
template class CpuDecoder<double>;

}  // namespace tb::model
