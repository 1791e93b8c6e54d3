// model/flops.h: model FLOPs of one training step (forward + backward = 3 x forward, no recompute), the
// numerator of TFLOP/s per GPU and MFU. Per token, for a dense decoder of L layers, d_model h, query
// heads A and KV heads G of width d, MLP width ffn, vocabulary V, sequence s:
//   attention linear  6 · L · (h·(A + 2G)·d + A·d·h)        QKV and output projections
//   attention core    6 · L · 2·A·d·s · c                    QKᵀ and AV; c = 1/2 (causal) or 1 (full)
//   mlp               6 · L · h · ffn · (3 swiglu | 2 gelu, sqrelu)
//                     a MoE layer: ffn → top_k · expert_ffn + shared_ffn (the active experts; the router's 2·h·E
//                     and the dispatch are not counted, as the DGXC MoE formula 18·L·F·h·topK does not)
//   logits            6 · V · h                              LM head (embedding lookups are free)
// Multi-head latent attention (model/config.h MlaConfig; NeMo's deepseekv3 formula, which is the causal convention):
//   attention linear  6 · L · (h·Rq + Rq·A·(Dn+Dr) + h·(Rkv+Dr) + Rkv·A·(Dn+Dv) + A·Dv·h)  (Rq = 0: h·A·(Dn+Dr))
//   attention core    6 · L · A·(Dn+Dr + Dv)·s · c                        QKᵀ over Dn+Dr, AV over Dv
//   e.g. DeepSeek-V3 at s = 4096 (causal): 2.498e11 per token (NeMo adds its multi-token-prediction module, 1.018e10
//   more: the 2.600e11 that DGXC's 174.02 TFLOP/s per GPU at 669.4 tokens/s per GPU implies).
// With A·d = h this is the DGXC / NeMo form 12·L·h²·(1 + G/A + s/h·c) + 18·L·h·ffn + 6·V·h, e.g.
// Llama 3.1 8B at s = 8192: 5.79e10 per token, 4.74e14 per sample (full); 5.15e10 per token (causal).
// Packed rows (core/packing.h), as Megatron-LM counts packed sequences (num_floating_point_operations with the real
// tokens and the sum of squared sequence lengths): the per-token terms over the documents' tokens T = sum_i L_i and the
// attention core over each document at its own length, sum_i L_i^2 (the padding counts nothing):
//   packed_flops = T · (attention linear + mlp + logits) + core(s = 1) · sum_i L_i^2
// which is flops_per_sample(s) per row of one document filling it (T = s, sum L^2 = s^2).
// Conventions: `full` (DGXC 24.11–25.05, NeMo ≤ 25.07 for Llama/Nemotron/GPT-3) and `causal`
// (Megatron-LM ≥ 2025-03, NeMo ≥ 2025-08, Megatron-Bridge). Every record names the one it used.
// Fine-tuning with a frozen base (LoRA, model/lora.h), the DGXC fine-tuning convention: every term above × 2/3 (the
// frozen weights' gradient GEMMs do not run: the forward and the input gradients are 2 of the 3 passes). The
// adapters' own FLOPs (6·r·(in + rows) per token and adapter) are not counted, as DGXC does not count them. Records
// name it (flop_task "lora").
#pragma once

#include <string_view>

#include "model/config.h"

namespace tb::model {

enum class FlopConvention { causal, full };
std::string_view convention_name(FlopConvention c);
FlopConvention parse_convention(std::string_view name);  // "causal" | "full"; else Error{config}

struct Flops {  // per token, training step (fwd + bwd)
  double attention_linear = 0, attention_core = 0, mlp = 0, logits = 0;
  double total() const { return attention_linear + attention_core + mlp + logits; }
};

// The fine-tuning factor and its name: 2/3 and "lora" with a frozen base (c.lora enabled), else 1 and "pretrain".
inline constexpr double kLoraFlopFactor = 2.0 / 3.0;
std::string_view flop_task(const ModelConfig& c);

// At sequence length `seq` (0: the config's); LoRA's factor applied to every term.
Flops flops_per_token(const ModelConfig& c, FlopConvention conv, int seq = 0);
double flops_per_sample(const ModelConfig& c, FlopConvention conv, int seq = 0);  // tokens per sample = seq
// Packed rows: the documents' tokens and the sum of their squared lengths (formula above).
double packed_flops(const ModelConfig& c, FlopConvention conv, double doc_tokens, double doc_squares);
// The same step counted in the other convention (to compare with a reference that used it).
double convert_flops(const ModelConfig& c, double flops, FlopConvention from, FlopConvention to, int seq = 0);

}  // namespace tb::model
