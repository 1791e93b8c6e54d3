// model/config.h: the dense decoder family (Llama 3.x, GPT-3, Nemotron-4, Mistral) as one config, and
// the named presets of the reference recipes (shapes from the DGXC recipe files) plus `tiny` for CPUs and `small`,
// `small-hd128` (its head_dim 128 for FP8 attention), `small-gpt` (GPT-3's form) for quick GPU runs.
//   attention: heads query heads, kv_heads key/value heads (GQA when kv_heads < heads), head_dim each;
//   mlp: swiglu (3 GEMMs: gate, up, down), gelu or sqrelu (2 GEMMs: up, down), ffn wide;
//   norm: rmsnorm, layernorm, or layernorm1p (LayerNorm with weight stored as w - 1, Nemotron);
//   positions: rope (theta, optional Llama 3.1 frequency scaling) or learned absolute embeddings.
//   moe (model/config.h MoeConfig): a Mixture-of-Experts MLP in some layers: a router picks top_k of `experts` MLPs
//   of width expert_ffn per token (plus shared experts every token passes through); the other layers are dense.
//   attention (AttentionKind): grouped-query attention over a fused qkv projection, or DeepSeek's multi-head latent
//   attention (MlaConfig) with its own projections; layer(i) is the per-layer spec (attention kind, dense or MoE MLP).
//   lora (model/lora.h): adapters on chosen linear layers, the base frozen (fine-tuning).
// Presets `deepseek-v3-671b` (MLA + MoE, the public shapes), `tiny-mla` (CPU tests) and `small-mla` (GPU runs).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "model/lora.h"

namespace tb::model {

enum class Norm { rmsnorm, layernorm, layernorm1p };
enum class Act { swiglu, gelu, sqrelu };
enum class Pos { rope, learned };

std::string_view norm_name(Norm n);
std::string_view act_name(Act a);
std::string_view pos_name(Pos p);

// Llama 3.1 RoPE frequency scaling (factor 8, low 1, high 4, original context 8192 for Llama 3.1).
struct RopeScaling {
  bool enabled = false;
  double factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
  int original_max_position = 8192;
};

// Mixture of Experts (Mixtral, Grok-1, Llama 4, DeepSeek-V3). Per MoE layer and token x (the norm2 output):
//   logits = x Wr^T (E experts);  s = softmax(logits) | sigmoid(logits)
//   chosen = top_k(s) (balanced routing: experts (g·k + j) mod E of the token's global index g, for comparisons with
//   NeMo's forced-balance figures);  w_j = scale · s_j / (normalize ? sum of the chosen s : 1)
//   y = sum_j w_j · expert_j(x) + shared(x)     expert, shared: the model's MLP (act) of width expert_ffn, shared_ffn
// Losses added to the objective (not to the reported LM loss), over the T tokens of a micro-batch, with p the router's
// probabilities (s for softmax; s / sum s for sigmoid) and c_i the tokens routed to expert i:
//   aux      aux_loss · E · sum_i f_i · P_i        f_i = c_i / (T k), P_i = mean_t p_ti
//   seq aux  seq_aux_loss · mean over sequences of sum_i f_i · P_i with f_i = c_i E / (k S), P_i over the sequence
//   z        z_loss · mean_t logsumexp(logits_t)^2
// Aux-loss-free balancing (bias_update_rate > 0, DeepSeek-V3): a bias b_i per expert is added to s for the choice of
// the top k only (the weights use s itself); after each optimizer step b_i += bias_update_rate · sign(mean_j c_j - c_i),
// c_i the pairs routed to expert i over the step's micro-batches on every data-parallel rank. The bias is state, not
// a parameter: no gradient, no optimizer; it starts at 0.
// Capacity (capacity_factor > 0): each expert takes at most C = ceil(cf · T · k / E) of its rank's tokens, those with
// the largest weights; the rest are dropped (their weight is lost). pad_to_capacity: each expert computes C rows.
enum class RouterScore { softmax, sigmoid };
enum class Routing { learned, balanced };
std::string_view router_score_name(RouterScore s);
std::string_view routing_name(Routing r);

struct MoeConfig {
  int experts = 0;      // 0: a dense model
  int top_k = 0;        // experts per token
  int expert_ffn = 0;   // each routed expert's MLP width (0: the model's ffn)
  int shared_ffn = 0;   // the shared experts' MLP width (0: none)
  int dense_first = 0;  // the first layers are dense (DeepSeek-V3: 3)
  int every = 1;        // after them, layer i is MoE when (i - dense_first + 1) % every == 0 (Llama 4: 2)
  RouterScore score = RouterScore::softmax;
  bool normalize = true;  // the chosen weights sum to scale
  double scale = 1.0;     // DeepSeek-V3: 2.5
  double aux_loss = 0, seq_aux_loss = 0, z_loss = 0;
  double bias_update_rate = 0;  // 0: no expert bias (DeepSeek-V3: 0.001)
  double capacity_factor = 0;  // 0: dropless
  bool pad_to_capacity = false;
  Routing routing = Routing::learned;
  // A one-device proxy of one rank of an expert-parallel layout (recipe/plan.h); 1 and 1: a real layer.
  //   ep_proxy     the layer holds experts / ep_proxy routed experts (an ep rank's share) and computes each pair
  //                (t, e) on local expert e mod (experts / ep_proxy): the rows an ep rank receives from the whole
  //                ep group under balanced routing, without the all-to-all (the projection adds it)
  //   token_share  the MoE MLP (router, routed and shared experts) runs on the first rows / token_share rows of the
  //                micro-batch only (a tp x cp rank's sequence-parallel share of the tokens); the other rows leave it
  //                as zero; its losses count those rows as the micro-batch, in sequences of gcd(rows, seq) tokens
  int ep_proxy = 1;
  int token_share = 1;

  bool enabled() const { return experts > 0; }
  int local_experts() const { return experts / ep_proxy; }
};

// Multi-head latent attention (DeepSeek-V2 section 2.1, DeepSeek-V3 section 2.1). Per token x [d_model], A heads,
// Rq = q_lora_rank, Rkv = kv_lora_rank, Dn = qk_nope_head_dim, Dr = qk_rope_head_dim, Dv = v_head_dim:
//   c_q = RMSNorm(x W_dq^T)  [Rq];  [q_nope | q_rope]_h = c_q W_uq^T per head     (Rq = 0: q = x W_q^T, no c_q)
//   [c_kv | k_rope] = x W_dkv^T  [Rkv + Dr];  c_kv = RMSNorm(c_kv);  [k_nope | v]_h = c_kv W_ukv^T per head
//   q_h = [q_nope_h | RoPE(q_rope_h)],  k_h = [k_nope_h | RoPE(k_rope)]   (one k_rope shared by every head)
//   o_h = causal softmax(q_h k_h^T / sqrt(Dn + Dr)) v_h  [Dv];  y = [o_1 .. o_A] W_o^T
// RoPE rotates the Dr-wide parts (theta rope_theta, rotate-half pairs; DeepSeek's interleaved pairs are the same
// rotation up to a fixed permutation of the rope rows of W_uq and W_dkv, which a model trained from scratch absorbs).
// The softmax scale is 1 / sqrt(Dn + Dr) and RoPE is unscaled: YaRN (DeepSeek-V3's rope_factor 40 and its mscale)
// applies only past original_seq_len 4096 in DeepSeek's code, i.e. to the long-context extension, not to the 4K
// pretraining; it is not implemented. The latent norms are RMSNorm with the model's norm_eps whatever `norm` says.
// A MLA model has kv_heads = heads and head_dim = Dn + Dr (validate() says so), so q_dim() is the query width.
struct MlaConfig {
  int q_lora_rank = 0;  // Rq (0: no query compression)
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;

  int qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
};

// The attention of a layer: grouped-query (fused qkv linear, RoPE, SDPA, out linear) or multi-head latent.
enum class AttentionKind { gqa, mla };
std::string_view attention_name(AttentionKind a);

// What one layer is: its attention kind and whether its MLP is a mixture of experts (ModelConfig::layer).
struct LayerSpec {
  AttentionKind attention = AttentionKind::gqa;
  bool moe = false;
};

struct ModelConfig {
  std::string name;    // preset name, e.g. "llama3.1-8b"
  std::string family;  // "llama", "gpt", "nemotron", "mistral"
  int layers = 0, d_model = 0, ffn = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0, seq = 0;
  Norm norm = Norm::rmsnorm;
  Act act = Act::swiglu;
  Pos pos = Pos::rope;
  bool tied_embeddings = false;  // LM head shares the token embedding (GPT-3)
  double rope_theta = 500000.0;
  RopeScaling rope_scaling;
  double norm_eps = 1e-5;
  MoeConfig moe;
  LoraConfig lora;
  AttentionKind attention = AttentionKind::gqa;  // every layer's (layer(i).attention)
  MlaConfig mla;                                  // attention == mla

  int q_dim() const { return heads * head_dim; }         // width of Q (and of the attention output)
  int kv_dim() const { return kv_heads * head_dim; }     // width of K and of V
  bool is_moe_layer(int layer) const;
  LayerSpec layer(int i) const { return {attention, is_moe_layer(i)}; }
  bool is_mla() const { return attention == AttentionKind::mla; }
  int rope_dim() const { return is_mla() ? mla.qk_rope_head_dim : head_dim; }  // the width RoPE rotates per head
  int expert_ffn() const { return moe.expert_ffn > 0 ? moe.expert_ffn : ffn; }
  int moe_layers() const;  // how many of the layers are MoE
  void validate() const;   // TB_REQUIRE: positive sizes, kv_heads divides heads, top_k <= experts, MLA dims, LoRA, ...
};

std::span<const ModelConfig> presets();
// The preset with this name; unknown names raise Error{config} listing the presets (with a "did you mean").
const ModelConfig& preset(std::string_view name);

// Parameter counts: every weight (embeddings, norms, projections, routers, every expert), and those in matmuls (the
// FLOP convention's "params in matmuls": projections and MLP per layer, plus the LM head). Active: what one token
// passes through (top_k routed experts, the shared ones; the router's E x d is left out, as the DGXC count does).
// MLA's projections are W_dq, W_uq (or W_q), W_dkv, W_ukv, W_o; its latent norms count as norms.
std::int64_t param_count(const ModelConfig& c);
std::int64_t matmul_param_count(const ModelConfig& c);
std::int64_t active_param_count(const ModelConfig& c);
std::int64_t attention_matmul_params(const ModelConfig& c);  // one layer's attention projections

}  // namespace tb::model
