// model/param_layout.h: where every parameter of the dense decoder lives in the one flat buffer, and how
// it starts. Backend-neutral: the CPU reference and the CUDA backend share the layout and the initial values.
//   embed.weight                  [vocab, d_model]
//   pos_embed.weight              [seq, d_model]                       (pos == learned)
//   layers.<i>.norm1.weight       [d_model]   (+ .bias for layernorm, layernorm1p)
//   layers.<i>.attn.qkv.weight    [(heads + 2 kv_heads) * head_dim, d_model]  rows: Q (head-major), K, V
//   layers.<i>.attn.out.weight    [d_model, heads * head_dim]
//   a MLA layer (attention == mla, model/config.h MlaConfig) has instead of qkv, A = heads, Dqk = Dn + Dr:
//   layers.<i>.attn.q_down.weight  [Rq, d_model]                       W_dq   (Rq > 0)
//   layers.<i>.attn.q_norm.weight  [Rq]                                RMSNorm gain of c_q (Rq > 0)
//   layers.<i>.attn.q_up.weight    [A Dqk, Rq]  rows per head [nope | rope]   W_uq  (Rq = 0: attn.q.weight
//                                  [A Dqk, d_model], W_q)
//   layers.<i>.attn.kv_down.weight [Rkv + Dr, d_model]  rows [c_kv | k_rope]  W_dkv
//   layers.<i>.attn.kv_norm.weight [Rkv]                               RMSNorm gain of c_kv
//   layers.<i>.attn.kv_up.weight   [A (Dn + Dv), Rkv]  rows per head [k_nope | v]  W_ukv
//   layers.<i>.attn.out.weight     [d_model, A Dv]                     W_o
//   layers.<i>.norm2.weight       [d_model]   (+ .bias)
//   layers.<i>.mlp.fc1.weight     [2 ffn, d_model] for swiglu (rows [0, ffn) gate, [ffn, 2 ffn) up),
//                                 [ffn, d_model] for gelu and sqrelu
//   layers.<i>.mlp.fc2.weight     [d_model, ffn]
//   a MoE layer (ModelConfig::is_moe_layer) has instead, F = expert_ffn (fc1: 2F rows for swiglu), S = shared_ffn:
//   layers.<i>.mlp.router.weight            [experts, d_model]
//   layers.<i>.mlp.experts.<e>.fc1.weight   [F or 2F, d_model]       e = 0 .. experts-1 (one slot each, in order)
//   layers.<i>.mlp.experts.<e>.fc2.weight   [d_model, F]
//   layers.<i>.mlp.shared.fc1.weight        [S or 2S, d_model]       (shared_ffn > 0)
//   layers.<i>.mlp.shared.fc2.weight        [d_model, S]
//   final_norm.weight             [d_model]   (+ .bias)
//   lm_head.weight                [vocab, d_model]                     (absent when tied_embeddings: embed.weight)
//   embed.weight (copy)           [vocab, d_model]                     (tied, a last stage without the embedding)
//   LoRA (model/lora.h), after every other slot of the layout, per layer in order, per targeted linear (qkv, out,
//   fc1, fc2) and block in row order, A then B:
//   layers.<i>.<linear>.lora_a[.<block>]  [r, in]        <linear>: attn.qkv, attn.out, mlp.fc1, mlp.fc2
//   layers.<i>.<linear>.lora_b[.<block>]  [rows, r]      <block>: q, k, v (of qkv), gate, up (of fc1); none: the whole
//   so the trainable parameters are one run at the end of the flat buffer, in the gradient buffer's order.
// Linear layers have no bias (Llama, Nemotron, Mistral have none; GPT-3's linear biases are left out).
// Init (model/params.h): matrices and embeddings std 0.02, the output projections (attn.out, mlp.fc2)
// 0.02 / sqrt(2 layers); norm weights 1 (0 for layernorm1p, which stores w - 1); biases 0. Tags: norms replicated and
// not decayed; qkv and fc1 column parallel (blocks Q, K, V and gate, up), out and fc2 row parallel; the embedding,
// positions and LM head replicated (both backends' tensor parallel: whole on every rank, run on its token rows). The
// MLA: q_up (q) and kv_up column parallel over heads (one row block each), out row parallel, q_down, kv_down and the
// latent norms replicated (the latents are computed on a rank's token rows and gathered; Megatron-Core's MLA). The
// router, experts and shared experts are replicated over tp (expert tensor parallel 1, run on the rank's token rows);
// the routed experts are tagged ParamGroup::expert (their gradients reduce over the expert data-parallel group).
// With LoRA every slot but the adapters' is frozen (trainable = false); A is U(-1/sqrt(in), 1/sqrt(in)), B zero, both
// decayed, tagged ParamRole::adapter with their linear's tensor-parallel split: column parallel (qkv, fc1) A
// replicated and B column parallel by the block's rows (a whole fused linear: its row blocks); row parallel (out, fc2)
// A row parallel, B replicated.
// Pipeline stages: dense_layout(c, LayerRange{first, last}) is the part of the layout one stage holds, layers
// [first, last) of the model c: the same slot names (global layer indices, so a stage draws the full model's
// values), packed from offset 0 in the same order; embed.weight (and pos_embed) only when first == 0,
// final_norm and lm_head only when last == c.layers. Tied embeddings split over stages: the last stage holds a copy
// of the embedding as its LM head, a slot named embed.weight (the same initial values) after final_norm, with
// lm_head its index and embed -1 (the trainer sums the two copies' gradients, so they stay equal).
// Expert parallel: dense_layout(c, range, ExpertRange{first, count}) holds the routed experts [first, first + count)
// of every MoE layer only (an ep rank's, parallel/mesh.h): the same slot names (global expert indices), Layer's
// expert_fc1 / expert_fc2 index i is expert first + i; router and shared experts whole.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"
#include "model/params.h"

namespace tb::model {

// A LoRA adapter on output rows [row0, row0 + rows) of its linear's weight (this layout's rows: a tp shard's), its
// factors' slots.
struct Adapter {
  int a = -1, b = -1;
  std::int64_t row0 = 0, rows = 0;
};

struct DenseLayout : ParamRegistry {
  struct Layer {
    int norm1_w = -1, norm1_b = -1, qkv = -1, out = -1, norm2_w = -1, norm2_b = -1, fc1 = -1, fc2 = -1;
    int router = -1, shared_fc1 = -1, shared_fc2 = -1;  // a MoE layer (fc1, fc2 -1)
    std::vector<int> expert_fc1, expert_fc2;            // per routed expert held (expert first_expert + i)
    // a MLA layer (qkv -1; q_down and q_norm -1 without query compression, q_up then W_q)
    int q_down = -1, q_norm = -1, q_up = -1, kv_down = -1, kv_norm = -1, kv_up = -1;
    std::vector<Adapter> qkv_lora, out_lora, fc1_lora, fc2_lora;  // LoRA: the linear's adapters, in row order
    bool moe() const { return router >= 0; }
    bool mla() const { return kv_down >= 0; }
    const std::vector<Adapter>& lora(int linear_slot) const;  // the adapters of qkv, out, fc1 or fc2 (by its slot)
    std::vector<int> all_slots() const;  // every slot of the layer, LoRA's included (-1: absent)
    // Where the layer's trainable parameters' gradients start in L's gradient buffer (L.grad_total: none).
    std::size_t grad_begin(const DenseLayout& L) const;
  };
  // Indices into slots; -1 when absent (no bias, no learned positions). lm_head == embed when tied.
  int embed = -1, pos_embed = -1, final_norm_w = -1, final_norm_b = -1, lm_head = -1;
  std::vector<Layer> layers;  // this layout's layers: model layer first_layer + i at index i
  int first_layer = 0;
  int first_expert = 0;  // the routed experts held: [first_expert, first_expert + expert_fc1.size())

  bool has_embedding() const { return embed >= 0; }  // the first stage (or the whole model)
  bool has_head() const { return lm_head >= 0; }      // the last stage: final norm, LM head, loss
};

// Layers [first, last) of a model; last -1: to the end. The whole model by default.
struct LayerRange {
  int first = 0, last = -1;
  bool operator==(const LayerRange&) const = default;
};

// Pipeline stage `stage` of `stages` (parallel/trainer_cpu.h's split): layers [stage L / S, (stage + 1) L / S).
LayerRange pipeline_stage_layers(int layers, int stages, int stage);

// The routed experts of each MoE layer a layout holds: [first, first + count); count -1: all from first.
struct ExpertRange {
  int first = 0, count = -1;
};

DenseLayout dense_layout(const ModelConfig& c, LayerRange range = {}, ExpertRange experts = {});

// Parameters with a gradient (trainable) and without (frozen) in the whole model c.
std::int64_t trainable_param_count(const ModelConfig& c);
std::int64_t frozen_param_count(const ModelConfig& c);

// What the CUDA backend cannot run of model c laid out as l ("" when it can): every slot at a multiple of 128 elements
// (256 bytes of bf16, which the GEMM, norm and cross-entropy kernels assume), head_dim a multiple of 8 (cuDNN's SDPA)
// and, with RoPE, of 16 (MLA: qk_rope_head_dim a multiple of 16; v_head_dim and the latent ranks of 8); with LoRA a
// rank and ffn that are multiples of 8. The CUDA decoder checks its layout; train::validate the whole model's before
// any GPU work.
std::string cuda_layout_problem(const ModelConfig& c, const DenseLayout& l);

}  // namespace tb::model
