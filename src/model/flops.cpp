// model/flops.cpp: the per-token terms of flops.h.
#include "model/flops.h"

#include <fmt/format.h>

#include "core/error.h"

namespace tb::model {

std::string_view convention_name(FlopConvention c) { return c == FlopConvention::causal ? "causal" : "full"; }

FlopConvention parse_convention(std::string_view name) {
  if (name == "causal") return FlopConvention::causal;
  if (name == "full") return FlopConvention::full;
  raise_config(fmt::format("unknown FLOP convention '{}': use causal (attention halved) or full", name));
}

std::string_view flop_task(const ModelConfig& c) { return c.lora.enabled() ? "lora" : "pretrain"; }

Flops flops_per_token(const ModelConfig& c, FlopConvention conv, int seq) {
  const double s = seq > 0 ? seq : c.seq;
  const double h = c.d_model, L = c.layers, A = c.heads;
  const double half = conv == FlopConvention::causal ? 0.5 : 1.0;
  // the widths QK^T and AV multiply over: head_dim each, or MLA's qk (nope + rope) and v head dims
  const double qk = c.is_mla() ? c.mla.qk_head_dim() : c.head_dim, v = c.is_mla() ? c.mla.v_head_dim : c.head_dim;
  Flops f;
  f.attention_linear = 6 * L * double(attention_matmul_params(c));
  f.attention_core = 6 * L * A * (qk + v) * s * half;
  const double gemms = c.act == Act::swiglu ? 3 : 2;
  const double moe = c.moe_layers(), active_ffn = double(c.moe.top_k) * c.expert_ffn() + c.moe.shared_ffn;
  f.mlp = 6 * h * gemms * ((L - moe) * c.ffn + moe * active_ffn / c.moe.token_share);
  f.logits = 6.0 * c.vocab * h;
  if (c.lora.enabled())
    for (double* term : {&f.attention_linear, &f.attention_core, &f.mlp, &f.logits}) *term *= kLoraFlopFactor;
  return f;
}

double flops_per_sample(const ModelConfig& c, FlopConvention conv, int seq) {
  const double s = seq > 0 ? seq : c.seq;
  return flops_per_token(c, conv, seq).total() * s;
}

double packed_flops(const ModelConfig& c, FlopConvention conv, double doc_tokens, double doc_squares) {
  const Flops f = flops_per_token(c, conv, 1);  // the core's term is linear in s: core(L) L = core(1) L^2
  return doc_tokens * (f.total() - f.attention_core) + f.attention_core * doc_squares;
}

double convert_flops(const ModelConfig& c, double flops, FlopConvention from, FlopConvention to, int seq) {
  return flops * flops_per_sample(c, to, seq) / flops_per_sample(c, from, seq);
}

}  // namespace tb::model
