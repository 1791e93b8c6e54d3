// model/config.cpp: validation, the presets (shapes as in the DGXC recipe files and the public model configs),
// parameter counts.
#include "model/config.h"

#include <fmt/format.h>

#include <cmath>
#include <string_view>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/suggest.h"

namespace tb::model {
namespace {

ModelConfig llama(std::string name, int layers, int d, int ffn, int heads, int kv, int vocab, int seq) {
  ModelConfig c;
  c.name = std::move(name);
  c.family = "llama";
  c.layers = layers, c.d_model = d, c.ffn = ffn, c.heads = heads, c.kv_heads = kv, c.head_dim = d / heads;
  c.vocab = vocab, c.seq = seq;
  c.norm = Norm::rmsnorm, c.act = Act::swiglu, c.pos = Pos::rope;
  c.rope_theta = 500000.0;
  c.rope_scaling.enabled = true;  // Llama 3.1
  return c;
}

ModelConfig nemotron(std::string name, int layers, int d, int ffn, int heads, int kv) {
  ModelConfig c;
  c.name = std::move(name);
  c.family = "nemotron";
  c.layers = layers, c.d_model = d, c.ffn = ffn, c.heads = heads, c.kv_heads = kv, c.head_dim = d / heads;
  c.vocab = 256000, c.seq = 4096;
  c.norm = Norm::layernorm1p, c.act = Act::sqrelu, c.pos = Pos::rope;
  c.rope_theta = 10000.0;
  return c;
}

// c with multi-head latent attention of sizes m (every head its own keys and values: kv_heads = heads, head_dim =
// qk_nope_head_dim + qk_rope_head_dim).
ModelConfig with_mla(ModelConfig c, std::string name, MlaConfig m) {
  c.name = std::move(name);
  c.attention = AttentionKind::mla;
  c.mla = m;
  c.kv_heads = c.heads, c.head_dim = m.qk_head_dim();
  return c;
}

std::vector<ModelConfig> make_presets() {
  std::vector<ModelConfig> p;
  p.push_back(llama("llama3.1-8b", 32, 4096, 14336, 32, 8, 128256, 8192));
  p.push_back(llama("llama3.1-70b", 80, 8192, 28672, 64, 8, 128256, 8192));
  p.push_back(llama("llama3.1-405b", 126, 16384, 53248, 128, 16, 128256, 8192));
  p.push_back(nemotron("nemotron4-15b", 32, 6144, 24576, 48, 8));
  p.push_back(nemotron("nemotron4-340b", 96, 18432, 73728, 96, 8));
  ModelConfig gpt;
  gpt.name = "gpt3-175b";
  gpt.family = "gpt";
  gpt.layers = 96, gpt.d_model = 12288, gpt.ffn = 49152, gpt.heads = 96, gpt.kv_heads = 96, gpt.head_dim = 128;
  gpt.vocab = 51200, gpt.seq = 2048;
  gpt.norm = Norm::layernorm, gpt.act = Act::gelu, gpt.pos = Pos::learned, gpt.tied_embeddings = true;
  p.push_back(gpt);
  ModelConfig mistral = llama("mistral-7b", 32, 4096, 14336, 32, 8, 32000, 4096);
  mistral.family = "mistral";
  mistral.rope_theta = 10000.0;
  mistral.rope_scaling.enabled = false;
  p.push_back(mistral);
  ModelConfig tiny = llama("tiny", 2, 64, 192, 4, 2, 256, 64);  // for CPUs: trains in seconds
  tiny.rope_theta = 10000.0;
  tiny.rope_scaling.enabled = false;
  p.push_back(tiny);
  ModelConfig tiny_moe = tiny;  // `tiny` with 4 experts, top-2, a shared expert, the first layer dense: CPU MoE runs
  tiny_moe.name = "tiny-moe";
  tiny_moe.layers = 3;
  tiny_moe.moe.experts = 4, tiny_moe.moe.top_k = 2, tiny_moe.moe.expert_ffn = 96, tiny_moe.moe.shared_ffn = 64;
  tiny_moe.moe.dense_first = 1, tiny_moe.moe.aux_loss = 0.01, tiny_moe.moe.z_loss = 0.001;
  p.push_back(tiny_moe);
  // Mixtral 8x7B and 8x22B (Mistral's published shapes): 8 experts, top-2 softmax, every layer MoE; aux loss 0.01 as
  // NeMo's Mixtral configs.
  for (auto [name, layers, d, ffn, heads, vocab] : {std::tuple{"mixtral-8x7b", 32, 4096, 14336, 32, 32000},
                                                    std::tuple{"mixtral-8x22b", 56, 6144, 16384, 48, 32768}}) {
    ModelConfig m = llama(name, layers, d, ffn, heads, 8, vocab, 4096);
    m.family = "mixtral";
    m.rope_theta = 1e6;
    m.rope_scaling.enabled = false;
    m.moe.experts = 8, m.moe.top_k = 2, m.moe.aux_loss = 0.01;
    p.push_back(m);
  }
  // DeepSeek-V3 671B, the shapes of deepseek-ai/DeepSeek-V3 inference/configs/config_671B.json (dim 7168, inter_dim
  // 18432, moe_inter_dim 2048, 61 layers of which n_dense_layers 3, 128 heads, 256 routed experts of which 8 active,
  // 1 shared, route_scale 2.5, sigmoid scores, q_lora_rank 1536, kv_lora_rank 512, qk_nope 128, qk_rope 64, v 128,
  // vocab 129280) and its model.py (RMSNorm eps 1e-6, rope_theta 10000, sigmoid weights normalised over the chosen,
  // untied head); seq 4096 as its pretraining and the DGXC recipe. The V3 report's balancing (sections 2.1.2, 4.2):
  // the aux-loss-free expert bias at update rate 0.001 and a sequence-wise balance loss 0.0001. Not modelled:
  // multi-token prediction (its one MTP module), group-limited routing (8 groups, top 4), YaRN (past 4K only; see
  // MlaConfig).
  ModelConfig ds = with_mla(llama("", 61, 7168, 18432, 128, 128, 129280, 4096), "deepseek-v3-671b",
                            {.q_lora_rank = 1536, .kv_lora_rank = 512, .qk_nope_head_dim = 128,
                             .qk_rope_head_dim = 64, .v_head_dim = 128});
  ds.family = "deepseek";
  ds.rope_theta = 10000.0, ds.rope_scaling.enabled = false, ds.norm_eps = 1e-6;
  ds.moe.experts = 256, ds.moe.top_k = 8, ds.moe.expert_ffn = 2048, ds.moe.shared_ffn = 2048, ds.moe.dense_first = 3;
  ds.moe.score = RouterScore::sigmoid, ds.moe.normalize = true, ds.moe.scale = 2.5, ds.moe.seq_aux_loss = 1e-4;
  ds.moe.bias_update_rate = 0.001;
  p.push_back(ds);
  // `tiny` with multi-head latent attention: CPU runs and tests
  p.push_back(with_mla(tiny, "tiny-mla", {.q_lora_rank = 32, .kv_lora_rank = 32, .qk_nope_head_dim = 16,
                                          .qk_rope_head_dim = 8, .v_head_dim = 16}));
  ModelConfig small = llama("small", 4, 256, 768, 4, 2, 512, 256);  // for quick GPU runs and tests (CUDA-aligned)
  small.rope_theta = 10000.0;
  small.rope_scaling.enabled = false;
  p.push_back(small);
  ModelConfig small_gpt = gpt;  // `small` in the GPT-3 form (LayerNorm, GELU, MHA, learned positions, tied)
  small_gpt.name = "small-gpt";
  small_gpt.layers = 4, small_gpt.d_model = 256, small_gpt.ffn = 1024, small_gpt.heads = small_gpt.kv_heads = 4;
  small_gpt.head_dim = 64, small_gpt.vocab = 512, small_gpt.seq = 256;
  p.push_back(small_gpt);
  ModelConfig small128 = small;  // `small` with head_dim 128 (2 heads, MHA): what cuDNN's FP8 attention takes
  small128.name = "small-hd128";
  small128.heads = small128.kv_heads = 2, small128.head_dim = 128;
  p.push_back(small128);
  // `small` with MLA in DeepSeek-V3's head dims (cuDNN's qk 192, v 128 on Hopper)
  p.push_back(with_mla(small, "small-mla", {.q_lora_rank = 256, .kv_lora_rank = 128, .qk_nope_head_dim = 128,
                                            .qk_rope_head_dim = 64, .v_head_dim = 128}));
  return p;
}

}  // namespace

std::string_view norm_name(Norm n) {
  switch (n) {
    case Norm::rmsnorm: return "rmsnorm";
    case Norm::layernorm: return "layernorm";
    case Norm::layernorm1p: return "layernorm1p";
  }
  return "?";
}

std::string_view act_name(Act a) {
  switch (a) {
    case Act::swiglu: return "swiglu";
    case Act::gelu: return "gelu";
    case Act::sqrelu: return "sqrelu";
  }
  return "?";
}

std::string_view pos_name(Pos p) { return p == Pos::rope ? "rope" : "learned"; }
std::string_view router_score_name(RouterScore s) { return s == RouterScore::softmax ? "softmax" : "sigmoid"; }
std::string_view routing_name(Routing r) { return r == Routing::learned ? "learned" : "balanced"; }
std::string_view attention_name(AttentionKind a) { return a == AttentionKind::gqa ? "gqa" : "mla"; }

namespace {

// The MLA fields of c (MlaConfig): all zero for grouped-query attention; for MLA sizes that fit together.
void validate_mla(const ModelConfig& c, const std::string& who) {
  const MlaConfig& m = c.mla;
  if (!c.is_mla()) {
    TB_REQUIRE(m.q_lora_rank == 0 && m.kv_lora_rank == 0 && m.qk_nope_head_dim == 0 && m.qk_rope_head_dim == 0 &&
                   m.v_head_dim == 0,
               fmt::format("{}: MLA sizes (q_lora_rank, kv_lora_rank, qk_*_head_dim, v_head_dim) are set but the "
                           "attention is {}: set attention=mla or leave them 0",
                           who, attention_name(c.attention)));
    return;
  }
  TB_REQUIRE(m.kv_lora_rank > 0 && m.qk_nope_head_dim > 0 && m.qk_rope_head_dim > 0 && m.v_head_dim > 0 &&
                 m.q_lora_rank >= 0,
             fmt::format("{}: multi-head latent attention needs kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim and "
                         "v_head_dim > 0 and q_lora_rank >= 0 (0: no query compression); got {}, {}, {}, {} and {}",
                         who, m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim, m.q_lora_rank));
  TB_REQUIRE(c.pos == Pos::rope && m.qk_rope_head_dim % 2 == 0,
             fmt::format("{}: multi-head latent attention rotates its qk_rope_head_dim={} part with RoPE: it needs "
                         "pos=rope and an even qk_rope_head_dim",
                         who, m.qk_rope_head_dim));
  TB_REQUIRE(c.kv_heads == c.heads && c.head_dim == m.qk_head_dim(),
             fmt::format("{}: with multi-head latent attention every head has its own keys and values and a query / "
                         "key width of qk_nope_head_dim + qk_rope_head_dim: set kv_heads={} (got {}) and head_dim={} "
                         "(got {})",
                         who, c.heads, c.kv_heads, m.qk_head_dim(), c.head_dim));
}

}  // namespace

bool ModelConfig::is_moe_layer(int layer) const {
  return moe.enabled() && layer >= moe.dense_first && (layer - moe.dense_first + 1) % moe.every == 0;
}

int ModelConfig::moe_layers() const {
  int n = 0;
  for (int i = 0; i < layers; ++i) n += is_moe_layer(i);
  return n;
}

void ModelConfig::validate() const {
  const std::string who = name.empty() ? std::string("model") : fmt::format("model '{}'", name);
  TB_REQUIRE(layers > 0 && d_model > 0 && ffn > 0 && heads > 0 && kv_heads > 0 && head_dim > 0 && vocab > 0 && seq > 0,
             fmt::format("{}: layers, d_model, ffn, heads, kv_heads, head_dim, vocab and seq must all be positive", who));
  TB_REQUIRE(heads % kv_heads == 0,
             fmt::format("{}: kv_heads={} must divide heads={} (each KV head serves a group of query heads)", who,
                         kv_heads, heads));
  TB_REQUIRE(pos != Pos::rope || is_mla() || head_dim % 2 == 0,
             fmt::format("{}: RoPE rotates pairs of dimensions, so head_dim={} must be even", who, head_dim));
  TB_REQUIRE(norm_eps > 0, fmt::format("{}: norm_eps must be positive", who));
  validate_mla(*this, who);
  validate_lora(*this);
  if (moe.experts == 0 && moe.top_k == 0) return;
  TB_REQUIRE(moe.experts > 0 && moe.top_k > 0,
             fmt::format("{}: a mixture of experts needs experts > 0 and top_k > 0 (got {} and {})", who, moe.experts,
                         moe.top_k));
  TB_REQUIRE(moe.top_k <= moe.experts,
             fmt::format("{}: top_k={} exceeds the {} experts (each token picks top_k different experts)", who,
                         moe.top_k, moe.experts));
  TB_REQUIRE(moe.expert_ffn >= 0 && moe.shared_ffn >= 0,
             fmt::format("{}: expert_ffn and shared_ffn must not be negative", who));
  TB_REQUIRE(moe.capacity_factor >= 0 && std::isfinite(moe.capacity_factor),
             fmt::format("{}: capacity_factor={} must be positive (or 0: dropless)", who, moe.capacity_factor));
  TB_REQUIRE(!moe.pad_to_capacity || moe.capacity_factor > 0,
             fmt::format("{}: pad_to_capacity needs a capacity_factor > 0", who));
  TB_REQUIRE(
      moe.aux_loss >= 0 && moe.seq_aux_loss >= 0 && moe.z_loss >= 0 && moe.scale > 0 && moe.bias_update_rate >= 0 &&
          std::isfinite(moe.bias_update_rate),
      fmt::format("{}: the MoE loss coefficients and bias_update_rate must not be negative and the routed scale must be "
                  "positive",
                  who));
  TB_REQUIRE(moe.every >= 1 && moe.dense_first >= 0,
             fmt::format("{}: the MoE layer pattern needs every >= 1 and dense_first >= 0 (got {} and {})", who,
                         moe.every, moe.dense_first));
  TB_REQUIRE(moe.ep_proxy >= 1 && moe.experts % moe.ep_proxy == 0 && moe.token_share >= 1,
             fmt::format("{}: a proxy of expert parallel {} needs it to divide the {} experts (and token_share={} >= 1)",
                         who, moe.ep_proxy, moe.experts, moe.token_share));
  TB_REQUIRE(moe_layers() > 0,
             fmt::format("{}: the MoE layer pattern (dense_first={}, every={}) leaves none of the {} layers MoE", who,
                         moe.dense_first, moe.every, layers));
}

std::span<const ModelConfig> presets() {
  static const std::vector<ModelConfig> all = make_presets();
  return all;
}

const ModelConfig& preset(std::string_view name) {
  std::vector<std::string> names;
  for (const auto& p : presets()) {
    if (p.name == name) return p;
    names.push_back(p.name);
  }
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  raise_config(fmt::format("unknown model '{}'{}; presets: {}", name, did_you_mean(name, names), list));
}

std::int64_t attention_matmul_params(const ModelConfig& c) {
  const std::int64_t d = c.d_model, A = c.heads;
  if (!c.is_mla()) return d * (c.q_dim() + 2 * std::int64_t(c.kv_dim())) + std::int64_t(c.q_dim()) * d;
  const MlaConfig& m = c.mla;
  const std::int64_t rq = m.q_lora_rank, rkv = m.kv_lora_rank, qk = m.qk_head_dim();
  const std::int64_t q = rq > 0 ? d * rq + rq * A * qk : d * A * qk;  // W_dq, W_uq, or W_q
  return q + d * (rkv + m.qk_rope_head_dim) + rkv * A * (m.qk_nope_head_dim + m.v_head_dim) +
         A * m.v_head_dim * d;  // W_dkv, W_ukv, W_o
}

namespace {

// Matmul weights of the layers: attention, and each layer's MLP with `experts_counted` of its routed experts
// (-1: all of them), the router when `router`.
std::int64_t layer_matmul_params(const ModelConfig& c, int experts_counted, bool router) {
  const std::int64_t d = c.d_model, gemms = c.act == Act::swiglu ? 3 : 2;
  const std::int64_t attn = attention_matmul_params(c);
  const int moe = c.moe_layers();
  const std::int64_t experts = experts_counted < 0 ? c.moe.local_experts() : experts_counted;
  const std::int64_t moe_mlp =
      gemms * d * (experts * c.expert_ffn() + c.moe.shared_ffn) + (router ? c.moe.experts * d : 0);
  return c.layers * attn + (c.layers - moe) * gemms * d * c.ffn + moe * moe_mlp;
}

}  // namespace

std::int64_t matmul_param_count(const ModelConfig& c) {
  return layer_matmul_params(c, -1, true) + std::int64_t(c.vocab) * c.d_model;  // + the LM head
}

std::int64_t active_param_count(const ModelConfig& c) {
  return param_count(c) - matmul_param_count(c) + layer_matmul_params(c, c.moe.top_k, false) +
         std::int64_t(c.vocab) * c.d_model;
}

std::int64_t param_count(const ModelConfig& c) {
  const std::int64_t d = c.d_model;
  const bool bias = c.norm != Norm::rmsnorm;                    // LayerNorm has a bias
  const std::int64_t norm = d * (bias ? 2 : 1);
  std::int64_t n = matmul_param_count(c) + c.layers * 2 * norm + norm;  // two norms per layer, the final one
  if (c.is_mla()) n += std::int64_t(c.layers) * (c.mla.q_lora_rank + c.mla.kv_lora_rank);  // the latent RMSNorms
  n += std::int64_t(c.vocab) * d;                                 // token embedding
  if (c.tied_embeddings) n -= std::int64_t(c.vocab) * d;          // the LM head is the embedding
  if (c.pos == Pos::learned) n += std::int64_t(c.seq) * d;
  return n;
}

}  // namespace tb::model
