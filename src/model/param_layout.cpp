// model/param_layout.cpp: the dense decoder's flat parameter layout, its tags and the CUDA alignment check (see the .h).
#include "model/param_layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace tb::model {
namespace {

// The MLP of a MoE layer: router, routed experts (ParamGroup::expert), shared experts; all replicated over tp.
void moe_mlp(const ModelConfig& c, DenseLayout& L, DenseLayout::Layer& l, const std::string& p, int e0, int e1) {
  const std::int64_t d = c.d_model, gemm_rows = c.act == Act::swiglu ? 2 : 1;
  const double std_in = 0.02, std_out = 0.02 / std::sqrt(2.0 * c.layers);
  ParamTags dense, expert;
  dense.trainable = expert.trainable = !c.lora.enabled();
  expert.group = ParamGroup::expert;
  l.router = L.add(p + ".router.weight", {c.moe.experts, d}, {std_in, 0.0}, dense);
  const std::int64_t f = c.expert_ffn();
  for (int e = e0; e < e1; ++e) {
    const std::string q = p + ".experts." + std::to_string(e);
    l.expert_fc1.push_back(L.add(q + ".fc1.weight", {gemm_rows * f, d}, {std_in, 0.0}, expert));
    l.expert_fc2.push_back(L.add(q + ".fc2.weight", {d, f}, {std_out, 0.0}, expert));
  }
  if (c.moe.shared_ffn == 0) return;
  const std::int64_t s = c.moe.shared_ffn;
  l.shared_fc1 = L.add(p + ".shared.fc1.weight", {gemm_rows * s, d}, {std_in, 0.0}, dense);
  l.shared_fc2 = L.add(p + ".shared.fc2.weight", {d, s}, {std_out, 0.0}, dense);
}

// The adapters of one linear (`name`: its slot's prefix, e.g. layers.3.attn.qkv) on its row blocks, each block
// {name, rows} of the linear's `in` columns; `column`: the linear is column parallel (else row parallel). One adapter
// per block, or with `whole` one on all of them (B column parallel by the blocks).
std::vector<Adapter> add_adapters(const ModelConfig& c, DenseLayout& L, const std::string& name, std::int64_t in,
                                  const std::vector<std::pair<std::string, std::int64_t>>& blocks, bool whole,
                                  bool column) {
  const std::int64_t r = c.lora.rank;
  auto tags = [](TpRole tp, std::vector<std::int64_t> tp_blocks) {
    ParamTags t;
    t.role = ParamRole::adapter, t.tp = tp, t.tp_blocks = std::move(tp_blocks);
    return t;
  };
  std::vector<Adapter> out;
  auto add = [&](const std::string& suffix, std::int64_t row0, const std::vector<std::int64_t>& rows) {
    Adapter a;
    a.row0 = row0;
    for (std::int64_t n : rows) a.rows += n;
    a.a = L.add(name + ".lora_a" + suffix, {r, in}, {0.0, 0.0, 1.0 / std::sqrt(double(in))},
                tags(column ? TpRole::replicated : TpRole::row, {}));
    a.b = L.add(name + ".lora_b" + suffix, {a.rows, r}, {0.0, 0.0}, tags(column ? TpRole::column : TpRole::replicated,
                                                                          column ? rows : std::vector<std::int64_t>{}));
    out.push_back(a);
  };
  std::vector<std::int64_t> all;
  for (const auto& [block, rows] : blocks) all.push_back(rows);
  if (whole) {
    add("", 0, all);
    return out;
  }
  std::int64_t row0 = 0;
  for (const auto& [block, rows] : blocks) {
    if (!block.empty()) add("." + block, row0, {rows});
    row0 += rows;
  }
  return out;
}

// LoRA's adapters of layout L's layers (after every other slot).
void add_lora(const ModelConfig& c, DenseLayout& L) {
  const unsigned t = c.lora.targets;
  const std::int64_t d = c.d_model, qd = c.q_dim(), kvd = c.kv_dim(), ffn = c.ffn;
  const bool swiglu = c.act == Act::swiglu;
  auto named = [t](unsigned bit, const char* name) { return std::string(t & bit ? name : ""); };
  for (std::size_t i = 0; i < L.layers.size(); ++i) {
    DenseLayout::Layer& l = L.layers[i];
    const std::string p = "layers." + std::to_string(L.first_layer + int(i));
    if (t & (kLoraQ | kLoraK | kLoraV | kLoraQkv))
      l.qkv_lora = add_adapters(c, L, p + ".attn.qkv", d,
                                {{named(kLoraQ, "q"), qd}, {named(kLoraK, "k"), kvd}, {named(kLoraV, "v"), kvd}},
                                t & kLoraQkv, true);
    if (t & kLoraO) l.out_lora = add_adapters(c, L, p + ".attn.out", qd, {{"", d}}, true, false);
    if (t & (kLoraGate | kLoraUp | kLoraFc1)) {
      const auto blocks = swiglu ? std::vector<std::pair<std::string, std::int64_t>>{{named(kLoraGate, "gate"), ffn},
                                                                                     {named(kLoraUp, "up"), ffn}}
                                 : std::vector<std::pair<std::string, std::int64_t>>{{named(kLoraUp, "up"), ffn}};
      l.fc1_lora = add_adapters(c, L, p + ".mlp.fc1", d, blocks, (t & kLoraFc1) || !swiglu, true);
    }
    if (t & kLoraDown) l.fc2_lora = add_adapters(c, L, p + ".mlp.fc2", ffn, {{"", d}}, true, false);
  }
}

// The attention of a MLA layer (model/config.h MlaConfig): its projections and latent norms, tagged as the header says.
void mla_attention(const ModelConfig& c, DenseLayout& L, DenseLayout::Layer& l, const std::string& p,
                   const ParamTags& norm, const ParamTags& column, const ParamTags& row) {
  const MlaConfig& m = c.mla;
  const std::int64_t d = c.d_model, A = c.heads, rq = m.q_lora_rank, rkv = m.kv_lora_rank;
  const double std_in = 0.02, std_out = 0.02 / std::sqrt(2.0 * c.layers);
  const ParamTags replicated;  // role linear, tp replicated
  if (rq > 0) {
    l.q_down = L.add(p + ".q_down.weight", {rq, d}, {std_in, 0.0}, replicated);
    l.q_norm = L.add(p + ".q_norm.weight", {rq}, {0.0, 1.0}, norm);
    l.q_up = L.add(p + ".q_up.weight", {A * m.qk_head_dim(), rq}, {std_in, 0.0}, column);
  } else {
    l.q_up = L.add(p + ".q.weight", {A * m.qk_head_dim(), d}, {std_in, 0.0}, column);
  }
  l.kv_down = L.add(p + ".kv_down.weight", {rkv + m.qk_rope_head_dim, d}, {std_in, 0.0}, replicated);
  l.kv_norm = L.add(p + ".kv_norm.weight", {rkv}, {0.0, 1.0}, norm);
  l.kv_up = L.add(p + ".kv_up.weight", {A * (m.qk_nope_head_dim + m.v_head_dim), rkv}, {std_in, 0.0}, column);
  l.out = L.add(p + ".out.weight", {d, A * m.v_head_dim}, {std_out, 0.0}, row);
}

}  // namespace

const std::vector<Adapter>& DenseLayout::Layer::lora(int slot) const {
  static const std::vector<Adapter> none;
  if (slot < 0) return none;
  if (slot == qkv) return qkv_lora;
  if (slot == out) return out_lora;
  if (slot == fc1) return fc1_lora;
  if (slot == fc2) return fc2_lora;
  return none;
}

std::vector<int> DenseLayout::Layer::all_slots() const {
  std::vector<int> all = {norm1_w, norm1_b, qkv,     out,    norm2_w, norm2_b, fc1,   fc2,
                          router,  shared_fc1, shared_fc2, q_down, q_norm, q_up, kv_down, kv_norm, kv_up};
  all.insert(all.end(), expert_fc1.begin(), expert_fc1.end());
  all.insert(all.end(), expert_fc2.begin(), expert_fc2.end());
  for (const auto* adapters : {&qkv_lora, &out_lora, &fc1_lora, &fc2_lora})
    for (const Adapter& a : *adapters) all.push_back(a.a), all.push_back(a.b);
  return all;
}

std::size_t DenseLayout::Layer::grad_begin(const DenseLayout& L) const {
  std::size_t b = L.grad_total;
  for (int i : all_slots())
    if (i >= 0 && L.slots[std::size_t(i)].has_grad()) b = std::min(b, L.slots[std::size_t(i)].grad_offset);
  return b;
}

LayerRange pipeline_stage_layers(int layers, int stages, int stage) {
  TB_REQUIRE(stages >= 1 && stage >= 0 && stage < stages && layers >= stages,
             "pipeline stage " + std::to_string(stage) + " of " + std::to_string(stages) + ": needs 0 <= stage < " +
                 "stages <= layers (" + std::to_string(layers) + ")");
  return {int(std::int64_t(stage) * layers / stages), int(std::int64_t(stage + 1) * layers / stages)};
}

DenseLayout dense_layout(const ModelConfig& c, LayerRange range, ExpertRange experts) {
  c.validate();
  const int first = range.first, last = range.last < 0 ? c.layers : range.last;
  TB_REQUIRE(0 <= first && first < last && last <= c.layers,
             "dense layout: layer range [" + std::to_string(first) + ", " + std::to_string(last) +
                 ") is not a non-empty part of the model's " + std::to_string(c.layers) + " layers");
  TB_REQUIRE(experts.count < 0 || c.moe.ep_proxy == 1,
             "dense layout: a proxy of expert parallel (ep_proxy " + std::to_string(c.moe.ep_proxy) +
                 ") runs on one rank; it holds the experts of one ep rank itself, without an expert range");
  const int e0 = experts.first, e1 = experts.count < 0 ? c.moe.local_experts() : experts.first + experts.count;
  TB_REQUIRE(0 <= e0 && e0 <= e1 && e1 <= c.moe.experts && (e0 < e1 || c.moe.experts == 0),
             "dense layout: expert range [" + std::to_string(e0) + ", " + std::to_string(e1) +
                 ") is not a non-empty part of the model's " + std::to_string(c.moe.experts) + " experts");
  const bool embedding = first == 0, head = last == c.layers;
  DenseLayout L;
  L.first_layer = first;
  L.first_expert = e0;
  const std::int64_t d = c.d_model;
  const double std_in = 0.02, std_out = 0.02 / std::sqrt(2.0 * c.layers);
  const bool norm_bias = c.norm != Norm::rmsnorm;
  const double norm_w0 = c.norm == Norm::layernorm1p ? 0.0 : 1.0;
  const bool frozen = c.lora.enabled();  // fine-tuning: only the adapters train
  auto tags = [frozen](ParamRole role, TpRole tp = TpRole::replicated, std::vector<std::int64_t> blocks = {}) {
    ParamTags t;
    t.role = role, t.tp = tp, t.tp_blocks = std::move(blocks), t.decay = role != ParamRole::norm;
    t.trainable = !frozen;
    return t;
  };
  auto norm = [&](const std::string& prefix, int& w, int& b) {
    w = L.add(prefix + ".weight", {d}, {0.0, norm_w0}, tags(ParamRole::norm));
    if (norm_bias) b = L.add(prefix + ".bias", {d}, {0.0, 0.0}, tags(ParamRole::norm));
  };
  auto embedding_tags = [&] {
    ParamTags t = tags(ParamRole::embedding);
    t.tied = c.tied_embeddings;
    return t;
  };
  if (embedding) L.embed = L.add("embed.weight", {c.vocab, d}, {std_in, 0.0}, embedding_tags());
  if (embedding && c.pos == Pos::learned)
    L.pos_embed = L.add("pos_embed.weight", {c.seq, d}, {std_in, 0.0}, tags(ParamRole::position));
  const std::int64_t ffn = c.ffn, fc1_rows = c.act == Act::swiglu ? 2 * ffn : ffn;
  const std::vector<std::int64_t> fc1_blocks = c.act == Act::swiglu ? std::vector{ffn, ffn} : std::vector{ffn};
  const std::int64_t qd = c.q_dim(), kvd = c.kv_dim();
  for (int i = first; i < last; ++i) {
    const std::string p = "layers." + std::to_string(i);
    DenseLayout::Layer l;
    norm(p + ".norm1", l.norm1_w, l.norm1_b);
    if (c.layer(i).attention == AttentionKind::mla) {
      mla_attention(c, L, l, p + ".attn", tags(ParamRole::norm), tags(ParamRole::linear, TpRole::column),
                    tags(ParamRole::linear, TpRole::row));
    } else {
      l.qkv = L.add(p + ".attn.qkv.weight", {qd + 2 * kvd, d}, {std_in, 0.0},
                    tags(ParamRole::linear, TpRole::column, {qd, kvd, kvd}));
      l.out = L.add(p + ".attn.out.weight", {d, qd}, {std_out, 0.0}, tags(ParamRole::linear, TpRole::row));
    }
    norm(p + ".norm2", l.norm2_w, l.norm2_b);
    if (c.is_moe_layer(i)) {
      moe_mlp(c, L, l, p + ".mlp", e0, e1);
    } else {
      l.fc1 = L.add(p + ".mlp.fc1.weight", {fc1_rows, d}, {std_in, 0.0},
                    tags(ParamRole::linear, TpRole::column, fc1_blocks));
      l.fc2 = L.add(p + ".mlp.fc2.weight", {d, ffn}, {std_out, 0.0}, tags(ParamRole::linear, TpRole::row));
    }
    L.layers.push_back(l);
  }
  if (head) {
    norm("final_norm", L.final_norm_w, L.final_norm_b);
    if (c.tied_embeddings)  // the embedding itself, or on a last stage without it a copy of the same name and values
      L.lm_head = embedding ? L.embed : L.add("embed.weight", {c.vocab, d}, {std_in, 0.0}, embedding_tags());
    else
      L.lm_head = L.add("lm_head.weight", {c.vocab, d}, {std_in, 0.0}, tags(ParamRole::head));
  }
  if (c.lora.enabled()) add_lora(c, L);
  return L;
}

std::int64_t trainable_param_count(const ModelConfig& c) { return std::int64_t(dense_layout(c).grad_total); }

std::int64_t frozen_param_count(const ModelConfig& c) {
  const DenseLayout L = dense_layout(c);
  return std::int64_t(L.total - L.grad_total);
}

std::string cuda_layout_problem(const ModelConfig& c, const DenseLayout& l) {
  if (c.moe.enabled()) {  // the CUDA kernels' limits (ops/cuda/moe.h)
    if (c.moe.experts % 8 != 0 || c.moe.experts > 256 || c.moe.top_k > 32)
      return fmt::format(
          "the CUDA MoE layer takes 8 to 256 experts, a multiple of 8, and top_k <= 32 (got {} experts, "
          "top_k {}); --device cpu runs any",
          c.moe.experts, c.moe.top_k);
    if (c.d_model % 8 != 0 || c.expert_ffn() % 8 != 0 || c.moe.shared_ffn % 8 != 0)
      return "the CUDA MoE layer needs d_model, expert_ffn and shared_ffn to be multiples of 8";
  }
  if (c.lora.enabled() && c.lora.rank % 8 != 0)
    return fmt::format("LoRA rank {} on CUDA must be a multiple of 8 (the adapters' [tokens, r] products have 16-byte "
                       "rows)",
                       c.lora.rank);
  if (c.lora.enabled() && c.ffn % 8 != 0)
    return fmt::format("LoRA on CUDA needs ffn a multiple of 8 (an adapter's block of fc1 starts 16-byte aligned), "
                       "got {}",
                       c.ffn);
  constexpr std::size_t kAlign = 128;  // elements: 256 bytes of bf16
  for (const Slot& s : l.slots)
    if (s.offset % kAlign != 0)
      return fmt::format("parameter slot {} starts at element {}, not a multiple of {} (256 bytes of bf16, which the "
                         "CUDA GEMM, norm and cross-entropy kernels assume); choose d_model, ffn and head sizes that "
                         "are multiples of 128",
                         s.name, s.offset, kAlign);
  if (c.head_dim % 8 != 0) return fmt::format("head_dim {} is not a multiple of 8 (cuDNN's attention)", c.head_dim);
  if (c.pos == Pos::rope && c.rope_dim() % 16 != 0)
    return fmt::format("RoPE on CUDA needs {} a multiple of 16, got {}", c.is_mla() ? "qk_rope_head_dim" : "head_dim",
                       c.rope_dim());
  if (c.is_mla() && (c.mla.v_head_dim % 8 != 0 || c.mla.q_lora_rank % 8 != 0 || c.mla.kv_lora_rank % 8 != 0))
    return fmt::format("the CUDA MLA layer needs v_head_dim (cuDNN's attention), q_lora_rank and kv_lora_rank (the "
                       "norm kernels) to be multiples of 8, got {}, {} and {}",
                       c.mla.v_head_dim, c.mla.q_lora_rank, c.mla.kv_lora_rank);
  return "";
}

}  // namespace tb::model
