// model/config_override.h: `trainbench train --set key=value`: a preset's shape changed field by field, e.g.
// `--model llama3.1-8b --set d_model=2048 --set heads=16 --set act=gelu`. Keys and what they take:
//   layers d_model ffn heads kv_heads head_dim vocab seq   positive integers
//   norm rmsnorm|layernorm|layernorm1p    act swiglu|gelu|sqrelu    pos rope|learned    tied true|false
//   rope_theta norm_eps                   positive numbers          rope_scaling on|off (Llama 3.1's frequency scaling)
//   MoE (MoeConfig): experts top_k expert_ffn shared_ffn dense_first moe_every routing router_score aux_loss
//   seq_aux_loss z_loss capacity_factor
//   MLA (MlaConfig): attention gqa|mla, q_lora_rank (>= 0), kv_lora_rank qk_nope_head_dim qk_rope_head_dim
//   v_head_dim (positive integers; a MLA model also sets kv_heads = heads and head_dim = qk_nope + qk_rope)
// An unknown key or a bad value raises Error{config} naming it and what it takes. The result is named after the
// preset and its overrides in order ("llama3.1-8b[d_model=2048,heads=16]"), so records of different shapes never
// share a name; the caller validates it (ModelConfig::validate).
#pragma once

#include <span>
#include <string>

#include "model/config.h"

namespace tb::model {

ModelConfig with_overrides(const ModelConfig& base, std::span<const std::string> key_values);

}  // namespace tb::model
