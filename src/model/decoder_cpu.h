// model/decoder_cpu.h: the dense decoder family (Llama 3.x, GPT-3, Nemotron-4, Mistral) on the CPU reference
// ops, in float (small --device cpu runs) or double (gradient checks). Pre-norm, residual adds fused into the
// norms (ops/cpu/norm.h):
//   x = E[tokens] (+ P[position])                                         resid = none
//   per layer:  r1 = x + resid;  y1 = norm1(r1)
//               q, k, v = y1 Wqkv^T;  q, k = rope(q, k) (pos == rope);  o = causal_gqa_attention(q, k, v)
//               r2 = o Wout^T + r1;  y2 = norm2(r2)
//               x = act(y2 W1^T) W2^T;  resid = r2                        (act: swiglu | gelu | sqrelu)
//   rf = x + resid;  yf = normf(rf);  loss = mean_t CE(yf Wlm^T, targets)  (LM head chunked over tokens)
// Parameters: one flat buffer in the layout of model/param_layout.h (grads: a buffer of the same shape).
// forward_backward ACCUMULATES grad_scale * dloss/dparams into grads() (micro-batches add up; the caller
// zeroes). Activations of the last call are kept in the object (so the methods are not const).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/config.h"
#include "model/param_layout.h"

namespace tb::model {

template <class T>
class CpuDecoder {
 public:
  explicit CpuDecoder(const ModelConfig& cfg, std::uint64_t seed);

  const ModelConfig& config() const { return cfg_; }
  std::span<T> params() { return params_; }
  std::span<T> grads() { return grads_; }
  std::span<const Slot> layout() const { return layout_.slots; }
  const DenseLayout& dense_layout() const { return layout_; }
  std::span<T> param(std::string_view name);  // one slot's parameters; Error{config} if unknown
  std::span<T> grad(std::string_view name);
  void zero_grads();

  // Tokens per LM-head chunk: at most [chunk, vocab] logits exist at once (default 256).
  void set_lm_head_chunk(int tokens);

  // tokens, targets: [batch, seq] row-major, values in [0, vocab); 1 <= seq <= config().seq.
  // Returns the mean cross-entropy over batch * seq tokens.
  double forward(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets, int batch, int seq);
  double forward_backward(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets, int batch,
                          int seq, double grad_scale = 1.0);

 private:
  struct LayerActs {  // saved for the backward, [tokens, width] row-major
    std::vector<T> r1, mean1, rstd1, y1, qkv, o, lse, r2, mean2, rstd2, y2, h, g;
  };
  double run(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets, int batch, int seq,
             bool backward, double grad_scale);

  ModelConfig cfg_;
  DenseLayout layout_;
  std::vector<T> params_, grads_;
  std::vector<double> inv_freq_;  // rope frequencies (pos == rope)
  int lm_head_chunk_ = 256;
  std::vector<LayerActs> acts_;
  std::vector<T> x0_, m_, rf_, meanf_, rstdf_, yf_;
};

extern template class CpuDecoder<float>;
extern template class CpuDecoder<double>;

}  // namespace tb::model
