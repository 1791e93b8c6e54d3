// recipe/convention.h: model FLOPs of a recipe's run counted the way a publisher counted them, and the
// conversions between tokens/s, TFLOP/s per GPU and MFU. Per token (formulas in model/flops.h):
//   full      attention QKᵀ and AV not halved (model::FlopConvention::full): DGXC 24.11–25.05 Llama,
//             Nemotron-4 (from v25.04.01), GPT-3; MaxText and PaXML of that time
//   causal    QKᵀ and AV halved (model::FlopConvention::causal): DGXC Grok-1 and Llama 4 READMEs;
//             Megatron-LM ≥ 2025-03, NeMo ≥ 2025-08, Megatron-Bridge
//   full-mha  full, with the K and V projections counted as multi-head (kv_heads = heads): the DGXC
//             Nemotron-4 READMEs before v25.04.01 ("Fixed MFU formula for Nemotron4")
//   linear    only the token-linear terms (projections, MLP, LM head; no QKᵀ, AV): what the DGXC 25.02
//             fine-tuning READMEs' counts match (packed short examples: attention per example, ≈ 0)
// For every convention, a mixture of experts counts the experts a token passes through, layer by layer (model/flops.h:
// top_k · expert_ffn + shared_ffn in a MoE layer, ffn in a dense one; the router not counted). The publishers'
// MoE formulas are that count for their models: DGXC Grok-1 18·L·h·F·topK (every layer MoE, F the expert width) and
// Llama 4 Maverick 18·L·h·F·topK with F = 16384 on every layer (the README leaves out the shared expert and the dense
// layers; their widths make up the same count: 8192 routed + 8192 shared in a MoE layer, 16384 in a dense one), NeMo's
// mixtral (18·topk·ffn/h) and deepseekv3 (dense layers, shared and top-k experts) formulas. Task "lora" counts 2/3
// (frozen weights: no weight gradients, the DGXC LoRA convention).
//   TFLOP/s per GPU = tokens/s per GPU × FLOPs per token / 1e12;   MFU = TFLOP/s per GPU / dense peak.
#pragma once

#include <string_view>

#include "recipe/recipe.h"

namespace tb::recipe {

enum class Convention { full, causal, full_mha, linear };
std::string_view convention_name(Convention c);
Convention parse_convention(std::string_view name);  // Error{config} with the nearest name

// False where model/flops.h cannot count the model (it needs "mamba").
bool can_count_flops(const Recipe& r);
// FLOPs per token of one training step (fwd + bwd) of a run of the recipe: the layout's layers and
// sequence (a proxy's are smaller); Error{config} when !can_count_flops(r).
double flops_per_token(const Recipe& r, const Layout& l, Convention c);
double flops_per_token(const Recipe& r, Convention c);  // the recipe's full model and sequence

inline double tflops_per_gpu(double tokens_per_s_per_gpu, double flops_per_token) {
  return tokens_per_s_per_gpu * flops_per_token / 1e12;
}
inline double mfu(double tflops_per_gpu, double peak_tflops) { return tflops_per_gpu / peak_tflops; }
// The same run's TFLOP/s per GPU counted in another convention.
double convert_tflops(const Recipe& r, const Layout& l, double tflops, Convention from, Convention to);

}  // namespace tb::recipe
