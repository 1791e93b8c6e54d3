// model/decoder_cpu.h: the dense decoder family (Llama 3.x, GPT-3, Nemotron-4, Mistral) on the CPU reference
// ops, in float (small --device cpu runs) or double (gradient checks). Pre-norm, residual adds fused into the
// norms (ops/cpu/norm.h):
//   x = E[tokens] (+ P[position])                                         resid = none
//   per layer:  r1 = x + resid;  y1 = norm1(r1)
//               q, k, v = y1 Wqkv^T;  q, k = rope(q, k) (pos == rope);  o = causal_gqa_attention(q, k, v)
//               r2 = o Wout^T + r1;  y2 = norm2(r2)
//               x = act(y2 W1^T) W2^T;  resid = r2                        (act: swiglu | gelu | sqrelu)
//   rf = x + resid;  yf = normf(rf);  loss = mean_t CE(yf Wlm^T, targets)  (LM head chunked over tokens)
// Backward, in reverse (dnext: gradient reaching the sum r = x + resid of the next norm, i.e. both the layer's
// output x and its residual r2):
//   dyf = dLM/dyf;  dnext = dnormf(dyf)
//   per layer, last first:
//     dg = dnext W2;  dh = act'(dg);  dy2 = dh W1;  dr2 = dnorm2(dy2) + dnext
//     do = dr2 Wout;  dq, dk, dv = attention'(do);  dq, dk = rope^-1(dq, dk);  dy1 = dqkv Wqkv
//     dnext = dnorm1(dy1) + dr2
//   dE[tokens] += dnext (and dP[position] += dnext)
// The math lives once, in parallel::ShardedCpuDecoder (parallel/decoder_cpu_parallel.h): CpuDecoder is that decoder
// on one rank (tensor- and context-parallel groups of one, comm::make_self_communicator()) holding every layer, with
// this single-rank interface. Header-only over it (its float and double code is in tb_parallel): link tb_parallel.
// Parameters: one flat buffer in the layout of model/param_layout.h; grads: the trainable parameters' gradients, in
// the layout's gradient order (model/params.h; every parameter without LoRA: the same shape as the parameters).
// forward_backward ACCUMULATES grad_scale * dloss/dparams into grads() (micro-batches add up; the caller
// zeroes); the LM head's forward and backward run in one pass, at most [chunk, vocab] logits at once.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "comm/communicator.h"
#include "model/config.h"
#include "model/param_layout.h"
#include "parallel/decoder_cpu_parallel.h"

namespace tb::model {

template <class T>
class CpuDecoder {
 public:
  CpuDecoder(const ModelConfig& cfg, std::uint64_t seed)
      : self_(comm::make_self_communicator()),
        dec_(std::make_unique<parallel::ShardedCpuDecoder<T>>(cfg, parallel::DecoderGroups{*self_, *self_})) {
    dec_->init(seed);
  }

  const ModelConfig& config() const { return dec_->config(); }
  std::span<T> params() { return dec_->params(); }
  std::span<T> grads() { return dec_->grads(); }
  std::span<const Slot> layout() const { return dec_->local_layout().slots; }
  const DenseLayout& dense_layout() const { return dec_->local_layout(); }  // model::dense_layout(config())
  // One slot's parameters, and its gradient (empty when frozen); Error{config} if unknown.
  std::span<T> param(std::string_view name) { return params().subspan(slot(name).offset, slot(name).size); }
  std::span<T> grad(std::string_view name) {
    return slot(name).has_grad() ? grads().subspan(slot(name).grad_offset, slot(name).size) : std::span<T>();
  }
  void zero_grads() { dec_->zero_grads(); }
  // What the MoE layers routed since the last reset, and their losses (model/config.h MoeConfig; forward() returns
  // the LM loss alone, so the objective whose gradient forward_backward accumulates is forward() + objective).
  const parallel::MoeStats& moe_stats() const { return dec_->moe_stats(); }
  void reset_moe_stats() { dec_->reset_moe_stats(); }
  // Aux-loss-free balancing (parallel/decoder_cpu_parallel.h): the expert bias and the loads since the last update.
  std::span<const double> expert_bias() const { return dec_->expert_bias(); }
  void update_expert_bias() { dec_->update_expert_bias(); }

  // Tokens per LM-head chunk: at most [chunk, vocab] logits exist at once (default 256).
  void set_lm_head_chunk(int tokens) { dec_->set_lm_head_chunk(tokens); }

  // tokens, targets: [batch, seq] row-major, values in [0, vocab); 1 <= seq <= config().seq.
  // Returns the mean cross-entropy over batch * seq tokens. LoRA's dropout masks: of optimizer step `step` (1-based),
  // the micro-batch's first sequence being sequence `first_sequence` of the step (parallel::MicroBatch).
  double forward(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets, int batch, int seq,
                 std::int64_t step = 1, std::int64_t first_sequence = 0) {
    const double loss = dec_->forward(0, {tokens, targets, batch, seq, {}, {}, first_sequence, step});
    dec_->drop(0);
    return loss;
  }
  double forward_backward(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets, int batch,
                          int seq, double grad_scale = 1.0, std::int64_t step = 1, std::int64_t first_sequence = 0) {
    return dec_->forward_backward(0, {tokens, targets, batch, seq, {}, {}, first_sequence, step}, grad_scale);
  }
  // A micro-batch with packed rows and / or loss weights (parallel::MicroBatch): the loss is sum_r w_r CE_r with
  // weights, else the mean.
  double forward(const parallel::MicroBatch& b) {
    const double loss = dec_->forward(0, b);
    dec_->drop(0);
    return loss;
  }
  double forward_backward(const parallel::MicroBatch& b, double grad_scale = 1.0) {
    return dec_->forward_backward(0, b, grad_scale);
  }

 private:
  const Slot& slot(std::string_view name) const { return dense_layout().at(name); }

  std::unique_ptr<comm::Communicator> self_;  // the tp and cp group of one rank
  std::unique_ptr<parallel::ShardedCpuDecoder<T>> dec_;
};

}  // namespace tb::model
