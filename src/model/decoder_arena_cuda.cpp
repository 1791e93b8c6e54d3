// model/decoder_arena_cuda.cpp: the CUDA decoder's activation arena, planned by its modules (model/arena_plan.h):
//   [ (set, layer) blocks: what each layer keeps (its norms' and attention's fields (or its MLA attention's), then its
//     MLP's) ]
//   [ the shared copy: what a layer uses only while it runs (one union over the layers) ]
//   [ the head sets: the final norm's sum and statistics, the LM head's dyf ]  [ the step's scratch ]
// With gradient sharing (model/grad_sharing.h) the blocks sit over the gradients instead; the FP8 weight copies'
// bytes. The memory estimate sizes the same plan (size_arena).
#include <algorithm>
#include <cstddef>
#include <optional>
#include <vector>

#include "model/decoder_cuda.h"
#include "model/grad_sharing.h"
#include "ops/cuda/cross_entropy.h"
#include "ops/cuda/embedding.h"
#include "ops/cuda/norm.h"
#include "ops/cuda/segments.h"

namespace tb::model {

using bf16 = __nv_bfloat16;
using ops::lm_head_chunk;

CudaDecoder::ArenaParts CudaDecoder::arena_parts(const ModelConfig& c, LayerRange stage, int slots) {
  const int last = stage.last < 0 ? c.layers : stage.last;
  return {last - stage.first, slots, stage.first == 0, last == c.layers};
}

bool CudaDecoder::mlp_reads_bf16_input(const MlpCuda& mlp, bool fp8) {
  const int in = const_cast<MlpCuda&>(mlp).input_linear();
  return in < 0 ? !fp8 : const_cast<MlpCuda&>(mlp).linears()[std::size_t(in)]->reads_bf16_input(fp8);
}

void CudaDecoder::plan_layer(ArenaPlan& a, const PlanPass& pass, std::span<LayerActs> sets, const ModelConfig& c,
                             std::size_t n, std::size_t nl, const RecomputePolicy& p, bool fp8_attn,
                             const LayerLinears* lin, bool y2_bf16) {
  const std::size_t d = std::size_t(c.d_model);
  const bool state = p.keeps_state();
  plan_field(a, pass, sets, &LayerActs::r1, nl * d, true);  // the layer's input: kept in every mode
  plan_field(a, pass, sets, &LayerActs::mean1, nl, state);
  plan_field(a, pass, sets, &LayerActs::rstd1, nl, state);
  // (FP8: the weight gradients read X^T instead; a frozen weight reads nothing; LoRA's adapters the BF16 input; a MLA
  // layer's projections in BF16)
  plan_field(a, pass, sets, &LayerActs::y1, n * d, p.keeps_input(lin ? lin->qkv.reads_bf16_input(p.fp8) : !p.fp8));
  if (lin)  // (a MLA layer's attention plans its own: MlaAttentionCuda::plan)
    plan_attention_fields(a, pass, sets, [](LayerActs& s) -> AttentionActs& { return s.attn; }, c, n, p, fp8_attn);
  plan_field(a, pass, sets, &LayerActs::r2, nl * d, state);
  plan_field(a, pass, sets, &LayerActs::mean2, nl, state);
  plan_field(a, pass, sets, &LayerActs::rstd2, nl, state);
  plan_field(a, pass, sets, &LayerActs::y2, n * d, p.keeps_input(y2_bf16));
  if (!lin) return;
  const LinearCuda* linears[2] = {&lin->qkv, &lin->out};  // (LayerActs::lin's order)
  for (int k = 0; k < 2; ++k) {
    if (linears[k]->keeps_fp8_input(p.fp8))
      plan_field_at(a, pass, sets, [k](LayerActs& s) -> std::uint8_t*& { return s.lin[k].xt; },
                    n * std::size_t(linears[k]->in()), state);
    if (!linears[k]->lora().empty())
      plan_field_at(a, pass, sets, [k](LayerActs& s) -> bf16*& { return s.lin[k].lora_z; },
                    linears[k]->lora().saved_bytes(std::int64_t(n)), state);
  }
}

CudaDecoder::ArenaSize CudaDecoder::carve(const ModelConfig& c, const ArenaParts& parts, int batch, int seq,
                                          const RecomputePolicy& policy, const Fp8Options& fp8_options, int tp,
                                          std::span<const std::optional<LayerLinears>> linears,
                                          std::span<const std::unique_ptr<MlpCuda>> mlps,
                                          std::span<const std::unique_ptr<MlaAttentionCuda>> mlas, std::byte* base,
                                          std::vector<LayerActs>* acts, std::vector<HeadActs>* heads, Scratch* S,
                                          const std::vector<std::size_t>* block_at) {
  TB_REQUIRE(mlps.size() == std::size_t(parts.layers) && mlas.size() == mlps.size() && linears.size() == mlps.size(),
             "CUDA decoder: internal: an MLP and an attention slot per layer");
  const bool fp8 = fp8_options.enabled, fp8_head = fp8 && fp8_options.lm_head;
  const bool fp8_attn = fp8 && fp8_options.attention;
  const std::size_t n = std::size_t(batch) * std::size_t(seq);
  const std::size_t nl = n / std::size_t(tp);  // the residual stream's rows on this rank (sequence parallel)
  const std::size_t d = std::size_t(c.d_model), qd = std::size_t(c.q_dim());
  const std::size_t width = qd + 2 * std::size_t(c.kv_dim());
  const auto layers_n = std::size_t(parts.layers), sets = std::size_t(parts.slots);
  ArenaPlan a(base);

  // Layer-major: layer l's sets at l * sets + k (acts()).
  std::vector<LayerActs> layers(layers_n * sets);
  auto layer_sets = [&](std::size_t l) { return std::span<LayerActs>(layers).subspan(l * sets, sets); };
  auto plan_block = [&](std::size_t l, const PlanPass& pass) {
    plan_layer(a, pass, layer_sets(l), c, n, nl, policy, fp8_attn, linears[l] ? &*linears[l] : nullptr,
               mlp_reads_bf16_input(*mlps[l], fp8));
    if (mlas[l]) mlas[l]->plan(a, pass, parts.slots, std::int64_t(n), policy);
    mlps[l]->plan(a, pass, parts.slots, std::int64_t(n), seq, policy);
  };
  std::size_t block = 0, i = 0;
  for (std::size_t k = 0; k < sets; ++k)  // set-major, back to back, or where block_at says (a.end() resumes after)
    for (std::size_t l = 0; l < layers_n; ++l, ++i) {
      const std::size_t next = a.end(), at = block_at ? (*block_at)[i] : next;
      a.seek(at);
      plan_block(l, {true, int(k)});
      block = std::max(block, a.end() - at);
      if (block_at) a.seek(next);
    }
  const std::size_t blocks_end = a.end();
  std::size_t shared_end = blocks_end;  // the shared copy: every layer's from the same start
  for (std::size_t l = 0; l < layers_n; ++l) {
    a.seek(blocks_end);
    plan_block(l, {false, 0});
    shared_end = std::max(shared_end, a.end());
  }
  a.seek(shared_end);

  std::vector<HeadActs> head_sets(parts.head ? sets : 0);
  for (HeadActs& H : head_sets)
    H.rf = a.take<bf16>(nl * d), H.dyf = a.take<bf16>(nl * d), H.meanf = a.take<float>(nl),
    H.rstdf = a.take<float>(nl);

  Scratch s{};
  s.tokens = a.take<std::int32_t>(n);
  s.targets = a.take<std::int32_t>(n);
  if (parts.embedding) s.x0 = a.take<bf16>(nl * d);
  s.m = a.take<bf16>(nl * d);
  if (parts.head) s.yf = a.take<bf16>(nl * d);
  s.loss = a.take<float>(1);
  s.dnext = a.take<bf16>(n * d), s.dr2 = a.take<bf16>(n * d), s.dy = a.take<bf16>(n * d);
  if (!c.is_mla())  // (the MLPs' and the MLA attention's gradients live in their own fields)
    s.dout = a.take<bf16>(n * qd), s.dqkv = a.take<bf16>(n * width);
  if (tp > 1) s.part = a.take<bf16>(n * d), s.dyl = a.take<bf16>(nl * d);
  if (fp8_attn) s.dout8 = a.take<std::uint8_t>(n * qd), s.dqkv8 = a.take<std::uint8_t>(n * width);
  s.ce_bytes = parts.head ? ops::lm_head_ce_scratch(std::int64_t(nl), c.vocab, c.d_model, lm_head_chunk(fp8_head),
                                                   fp8_head)
                                .bytes
                          : 0;
  // The LM head's scratch and the FP8 linears' (xq, dyq, dyq^T) share bytes: the head runs between the layers'
  // forward and backward, on the same stream, while no linear holds its FP8 scratch.
  std::size_t in_bytes = n * std::max(d, qd), out_bytes = n * std::max(width, d);  // qkv and out
  for (const auto& mlp : mlps) {
    const auto rows = std::size_t(mlp->max_linear_rows(std::int64_t(n), seq));  // a MoE layer's expert: more than n
    for (const LinearCuda* lin : mlp->linears())
      in_bytes = std::max(in_bytes, rows * std::size_t(lin->in())),
      out_bytes = std::max(out_bytes, rows * std::size_t(lin->out()));
  }
  const std::size_t fp8_bytes = fp8 ? pad256(in_bytes) + 2 * pad256(out_bytes) : 0;
  s.ce = a.take_bytes(std::max(s.ce_bytes, fp8_bytes));
  if (fp8 && base) {
    auto* at = static_cast<std::uint8_t*>(s.ce);
    s.xq = at, s.dyq = at + pad256(in_bytes), s.dyqt = s.dyq + pad256(out_bytes);
  }
  // LoRA (model/lora_cuda.h): one linear's scratch at a time: its workspace, t [n, in], dz [adapters][n, r]
  std::size_t lora_ws = 0, lora_t = 0, lora_dz = 0;
  auto lora_scratch = [&](const LinearCuda& lin) {
    const LoraCuda& l = lin.lora();
    if (l.empty()) return;
    lora_ws = std::max(lora_ws, l.workspace_bytes(std::int64_t(n)));
    if (l.dropout() && !l.fused()) lora_t = std::max(lora_t, n * std::size_t(lin.in()));
    lora_dz = std::max(lora_dz, l.count() * l.z_stride(std::int64_t(n)));
  };
  for (std::size_t l = 0; l < layers_n; ++l) {
    if (linears[l]) lora_scratch(linears[l]->qkv), lora_scratch(linears[l]->out);
    for (const LinearCuda* lin : mlps[l]->linears()) lora_scratch(*lin);
  }
  s.lora_ws = a.take_bytes(lora_ws), s.lora_t = a.take<bf16>(lora_t), s.lora_dz = a.take<bf16>(lora_dz);
  s.norm_ws_bytes = ops::norm_backward_workspace_bytes(std::int64_t(nl), c.d_model);
  if (c.is_mla())  // its latent norms (at tp 1: on the nl = n rows)
    for (int dim : {c.mla.q_lora_rank, c.mla.kv_lora_rank})
      if (dim > 0)
        s.norm_ws_bytes = std::max(s.norm_ws_bytes, ops::norm_backward_workspace_bytes(std::int64_t(nl), dim));
  s.norm_ws = a.take_bytes(s.norm_ws_bytes);
  s.embed_ws_bytes =
      parts.embedding ? ops::embedding_backward_workspace_bytes(std::int64_t(nl), c.vocab, c.d_model) : 0;
  s.embed_ws = a.take_bytes(s.embed_ws_bytes);
  if (acts) *acts = std::move(layers);
  if (heads) *heads = std::move(head_sets);
  if (S) *S = s;
  return {a.end(), a.end() - blocks_end, block};
}

CudaDecoder::ArenaSize CudaDecoder::size_arena(const ModelConfig& cfg, LayerRange stage, int slots, int batch, int seq,
                                               Recompute recompute, const Fp8Options& fp8, int tp) {
  const DenseLayout layout = model::dense_layout(cfg, stage);
  std::vector<std::unique_ptr<MlpCuda>> mlps;
  std::vector<std::unique_ptr<MlaAttentionCuda>> mlas;
  for (const DenseLayout::Layer& L : layout.layers) {
    mlps.push_back(make_mlp(cfg, layout, L));
    mlas.push_back(L.mla() ? std::make_unique<MlaAttentionCuda>(cfg, layout, L) : nullptr);
  }
  return carve(cfg, arena_parts(cfg, stage, slots), batch, seq, {recompute, fp8.enabled}, fp8, tp,
               make_linears(layout, cfg), mlps, mlas, nullptr, nullptr, nullptr, nullptr);
}

std::size_t CudaDecoder::activation_bytes(const ModelConfig& cfg, int batch, int seq, Recompute recompute,
                                          const Fp8Options& fp8, int tp, LayerRange stage, int slots) {
  return size_arena(cfg, stage, slots, batch, seq, recompute, fp8, tp).total;
}

// model/grad_sharing.h for this layout: block k may overlap the gradients below layer k's (tied: above the
// embedding's, which the LM head accumulates first).
static GradSharing plan_grad_sharing(const DenseLayout& L, bool tied, std::size_t block, std::size_t grad_size) {
  auto begin = [&](std::size_t l) {
    return std::int64_t(L.slots[std::size_t(L.layers[l].norm1_w)].offset * grad_size);
  };
  std::vector<std::int64_t> free_end;
  for (std::size_t l = 0; l < L.layers.size(); ++l) free_end.push_back(begin(l));
  return place_blocks_over_grads(std::int64_t(block), tied && !L.layers.empty() ? begin(0) : 0, free_end);
}

std::size_t CudaDecoder::shared_arena_bytes(const ModelConfig& cfg, int batch, int seq, Recompute recompute,
                                            const Fp8Options& fp8, int tp, DType grads) {
  const ArenaSize size = size_arena(cfg, {}, 1, batch, seq, recompute, fp8, tp);
  const GradSharing g = plan_grad_sharing(model::dense_layout(cfg), cfg.tied_embeddings, size.block, dtype_size(grads));
  return size.rest + std::size_t(g.below);
}

void CudaDecoder::share_grads_with_activations() {
  TB_REQUIRE(batch_ == 0, "CUDA decoder: share_grads_with_activations() must come before prepare()");
  TB_REQUIRE(layout_.grad_total == layout_.total,
             "CUDA decoder: gradients that share the activations' memory need every parameter trainable (a frozen "
             "base, LoRA, has gradients too small to hold the activations)");
  share_grads_ = true;
  grads_ = ops::DeviceBuffer();  // the gradients hold nothing between steps: their bytes come back with the arena
  grads_ptr_ = nullptr;
}

void CudaDecoder::prepare(int batch, int seq, int slots, int segments) {
  const ModelConfig& c = cfg_;
  TB_REQUIRE(batch >= 1 && seq >= 1, "CUDA decoder: batch and seq must be >= 1, got batch " + std::to_string(batch) +
                                         " seq " + std::to_string(seq));
  TB_REQUIRE(seq <= c.seq, "CUDA decoder: seq " + std::to_string(seq) + " is longer than the model's " +
                               std::to_string(c.seq) + " positions");
  TB_REQUIRE(slots >= 1, "CUDA decoder: prepare() needs at least one activation set, got " + std::to_string(slots));
  TB_REQUIRE(segments >= 0, "CUDA decoder: the segment capacity must be >= 0, got " + std::to_string(segments));
  if (segments > 0) {
    TB_REQUIRE(cp_.size == 1, "CUDA decoder: packed sequences with context parallel (cp " + std::to_string(cp_.size) +
                                  ") are not built: run packed data with --cp 1");
    TB_REQUIRE(c.pos == Pos::rope, "CUDA decoder: packed sequences with learned positions are not built on CUDA "
                                   "(the CPU backend runs them): use a RoPE model");
    TB_REQUIRE(!c.is_mla(), "CUDA decoder: packed sequences with multi-head latent attention are not built on CUDA "
                            "(the CPU backend runs them)");
  }
  if (batch == batch_ && seq == seq_ && slots <= slots_ && segments == segments_) return;
  slots = std::max(slots, batch == batch_ && seq == seq_ ? slots_ : 1);
  dc_.activate();
  dc_.synchronize();  // the old arena may still be in use
  arena_ = ops::DeviceBuffer();
  TB_REQUIRE(std::int64_t(batch) * seq % tp_.size == 0,
             "CUDA decoder: batch x seq (" + std::to_string(std::int64_t(batch) * seq) +
                 " tokens) must divide by the tensor-parallel size " + std::to_string(tp_.size) + " (sequence parallel)");
  TB_REQUIRE(!fp8_head() || std::int64_t(batch) * seq / tp_.size % 16 == 0,
             "CUDA decoder: the FP8 LM head needs a multiple of 16 tokens per rank, got " +
                 std::to_string(std::int64_t(batch) * seq / tp_.size) + "; leave the LM head in BF16");
  TB_REQUIRE(!share_grads_ || cp_.size == 1,
             "CUDA decoder: gradients that share the activations' memory need cp = 1 (each rank the whole sequence)");
  TB_REQUIRE(!share_grads_ || slots == 1,
             "CUDA decoder: gradients that share the activations' memory allow one activation set, not " +
                 std::to_string(slots) + " (a pipeline schedule keeps several micro-batches in flight)");
  const ArenaParts parts{layers(), slots, first_stage(), last_stage()};
  const ArenaSize size =
      carve(c, parts, batch, seq, policy_, fp8_, tp_.size, linears_, mlps_, mlas_, nullptr, nullptr, nullptr, nullptr);
  if (!share_grads_) {
    arena_ = ops::DeviceBuffer(dc_.device(), size.total);
    carve(c, parts, batch, seq, policy_, fp8_, tp_.size, linears_, mlps_, mlas_, static_cast<std::byte*>(arena_.get()),
          &acts_, &heads_, &s_);
  } else {  // [rest | below | gradients], the layer blocks over the gradients and below them
    const GradSharing g = plan_grad_sharing(layout_, cfg_.tied_embeddings, size.block, grad_size());
    const std::size_t at = size.rest + std::size_t(g.below);
    arena_ = ops::DeviceBuffer(dc_.device(), at + buffer_elems_ * grad_size());
    auto* base = static_cast<std::byte*>(arena_.get());
    grads_ptr_ = base + at;
    std::vector<std::size_t> block_at;
    for (std::int64_t o : g.block_at) block_at.push_back(std::size_t(std::int64_t(at) + o));
    carve(c, parts, batch, seq, policy_, fp8_, tp_.size, linears_, mlps_, mlas_, base, &acts_, &heads_, &s_,
          &block_at);
  }
  if (fp8_.enabled) fp8_assign_input_scales(slots);
  segment_tables_ = ops::DeviceBuffer();
  if (segments > 0)
    segment_tables_ = ops::DeviceBuffer(dc_.device(), std::size_t(slots) * ops::segment_table_bytes(segments));
  segments_ = segments;
  if (attention_) {
    attention_->prepare(batch, seq, slots, segments);  // its plans and workspaces (FP8: qkv8's scaling slot per set)
    for (int set = 0; set < slots; ++set)
      for (int l = 0; l < layers(); ++l) acts_[act_index(set, l)].attn.qkv8_scale = attention_->qkv8_scale(l, set);
  }
  if (mla_shared_) mla_shared_->prepare(batch, seq);
  batch_ = batch;
  seq_ = seq;
  slots_ = slots;
  first_sequence_.assign(std::size_t(slots), 0);
}

std::size_t CudaDecoder::fp8_weight_bytes(const ModelConfig& cfg) { return fp8_weight_bytes(model::dense_layout(cfg)); }

std::size_t CudaDecoder::fp8_weight_bytes(const DenseLayout& L) {
  std::size_t bytes = 0;
  for (const Slot& s : L.slots)
    if (s.tags.role == ParamRole::linear) bytes += 2 * pad256(s.size);
  return bytes;
}

std::size_t CudaDecoder::fp8_lm_head_bytes(const ModelConfig& cfg) {
  return 2 * pad256(std::size_t(cfg.vocab) * std::size_t(cfg.d_model));
}

}  // namespace tb::model
