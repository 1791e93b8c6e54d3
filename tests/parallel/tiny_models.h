// tests/parallel/tiny_models.h: the two tiny model families the parallel CPU tests share, and random token batches.
//   llama: rmsnorm, swiglu, rope with Llama 3.1 scaling (inv_freq {1, 0.01}: one band unchanged, one smoothed), GQA 8/4
//   gpt:   layernorm, gelu, learned positions, tied embeddings, MHA 4/4
//   moe:   llama with a Mixture-of-Experts MLP after one dense layer: 4 experts of width 8, top 2, a shared expert
//          of width 8, aux, sequence aux and z losses on (dropless: capacity would depend on the rank's rows)
//   mla:   llama with multi-head latent attention: 8 heads, q_lora_rank 8, kv_lora_rank 8, qk 2 + rope 4, v 4
//   mla_moe: moe with that attention without query compression (q_lora_rank 0) and sigmoid scores (DeepSeek-V3's)
//   lora:     llama fine-tuned with LoRA: canonical adapters (q, k, v, o, gate, up, down) of rank 2, dropout 0.25
//   lora-gpt: gpt with fused ones (the whole qkv and fc1), rank 2, dropout 0.25 (the tied embedding frozen)
// d_model 16, head_dim 4, ffn 24, vocab 36, seq 16: every size divides by 4 (tp, cp up to 4 ranks).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "model/config.h"

namespace tb::parallel::testing {

inline model::ModelConfig tiny(const std::string& family, int layers) {
  if (family == "lora" || family == "lora-gpt") {
    model::ModelConfig c = tiny(family == "lora" ? "llama" : "gpt", layers);
    c.name = "test-" + family;
    c.lora = {.rank = 2, .alpha = 3, .dropout = 0.25,
              .targets = family == "lora" ? model::kLoraCanonical : model::kLoraFused, .seed = 9};
    return c;
  }
  model::ModelConfig c = model::preset("tiny");
  c.name = "test-" + family;
  c.layers = layers, c.d_model = 16, c.head_dim = 4, c.ffn = 24, c.vocab = 36, c.seq = 16;
  if (family == "llama" || family == "moe" || family == "mla" || family == "mla_moe") {
    c.heads = 8, c.kv_heads = 4;
    c.rope_scaling.enabled = true;
    c.rope_scaling.original_max_position = 1024;
    c.family = "llama";
    if (family == "moe" || family == "mla_moe") {
      c.moe.experts = 4, c.moe.top_k = 2, c.moe.expert_ffn = 8, c.moe.shared_ffn = 8, c.moe.dense_first = 1;
      c.moe.aux_loss = 0.1, c.moe.seq_aux_loss = 0.05, c.moe.z_loss = 0.01;
    }
    if (family == "mla" || family == "mla_moe") {
      c.attention = model::AttentionKind::mla;
      c.mla = {.q_lora_rank = family == "mla" ? 8 : 0, .kv_lora_rank = 8, .qk_nope_head_dim = 2,
               .qk_rope_head_dim = 4, .v_head_dim = 4};
      c.kv_heads = c.heads, c.head_dim = c.mla.qk_head_dim();
    }
    if (family == "mla_moe") c.moe.score = model::RouterScore::sigmoid, c.moe.scale = 2.5;
  } else {
    c.family = "gpt";
    c.heads = 4, c.kv_heads = 4;
    c.norm = model::Norm::layernorm, c.act = model::Act::gelu, c.pos = model::Pos::learned;
    c.tied_embeddings = true;
  }
  return c;
}

struct Tokens {
  std::vector<std::int32_t> tokens, targets;  // [batch, seq] row-major, uniform in [0, vocab)
};

inline Tokens random_tokens(int batch, int seq, int vocab, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_int_distribution<int> u(0, vocab - 1);
  Tokens b;
  for (int i = 0; i < batch * seq; ++i) b.tokens.push_back(u(g)), b.targets.push_back(u(g));
  return b;
}

}  // namespace tb::parallel::testing
