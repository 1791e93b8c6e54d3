// Tests model/lora (targets, checks), LoRA's slots in model/param_layout and its FLOPs (host only):
//   - target names: the three sets and explicit lists parse to their bits and print back; an unknown name says the
//     nearest one; empty items, names given twice and a block named with its whole linear are refused;
//   - the checks: a negative rank, a rank above min(in, out) of a targeted block (naming it), dropout outside [0, 1),
//     gate on a model without a gate, LoRA on a Mixture-of-Experts model: one Error{config} each;
//   - the layout: the adapters' slots after every other one, in layer and target order, with their shapes, tags
//     (tensor-parallel role after their linear's, ParamRole::adapter, decayed) and row blocks; every other slot frozen;
//     the gradient layout the adapters' run, in the same order; A's init uniform within ±1/sqrt(in), B zero; the
//     trainable and frozen counts; a pipeline stage holds its layers' adapters after its own slots;
//   - FLOPs: LoRA counts 2/3 of full training in both conventions and names it (flop_task).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/config.h"
#include "model/flops.h"
#include "model/lora.h"
#include "model/param_layout.h"

namespace {

using namespace tb::model;

ModelConfig tiny_lora(unsigned targets, int rank = 4) {
  ModelConfig c = preset("tiny");  // d 64, heads 4 x 16, kv 2 x 16, ffn 192, swiglu
  c.lora.rank = rank;
  c.lora.targets = targets;
  return c;
}

std::string error_of(const auto& f) {
  try {
    f();
  } catch (const tb::Error& e) {
    return e.what();
  }
  return "";
}

TEST(LoraTargets, SetsAndListsParseAndPrint) {
  EXPECT_EQ(parse_lora_targets("fused"), kLoraQkv | kLoraFc1);
  EXPECT_EQ(parse_lora_targets("canonical"), kLoraQ | kLoraK | kLoraV | kLoraO | kLoraGate | kLoraUp | kLoraDown);
  EXPECT_EQ(parse_lora_targets("mlperf"), kLoraQkv | kLoraO);
  EXPECT_EQ(parse_lora_targets("q,v,down"), kLoraQ | kLoraV | kLoraDown);
  EXPECT_EQ(parse_lora_targets("o,qkv"), kLoraMlperf);
  EXPECT_EQ(lora_targets_name(kLoraMlperf), "mlperf");
  EXPECT_EQ(lora_targets_name(kLoraQ | kLoraV | kLoraDown), "q,v,down");
  EXPECT_EQ(lora_targets_name(kLoraQ | kLoraK | kLoraV | kLoraO | kLoraGate | kLoraUp | kLoraDown), "canonical");
}

TEST(LoraTargets, BadNamesRaiseWithTheNearest) {
  EXPECT_NE(error_of([] { parse_lora_targets("q,gat"); }).find("did you mean 'gate'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_lora_targets("canonicl"); }).find("did you mean 'canonical'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_lora_targets("q,,v"); }).find("unknown target ''"), std::string::npos);
  EXPECT_NE(error_of([] { parse_lora_targets("q,"); }).find("empty item"), std::string::npos);
  EXPECT_NE(error_of([] { parse_lora_targets("o,o"); }).find("twice"), std::string::npos);
  EXPECT_NE(error_of([] { parse_lora_targets("qkv,k"); }).find("name either"), std::string::npos);
  EXPECT_NE(error_of([] { parse_lora_targets("fc1,up"); }).find("name either"), std::string::npos);
}

TEST(LoraChecks, BadConfigsRaiseOneClearError) {
  ModelConfig c = tiny_lora(kLoraCanonical);
  c.validate();
  c.lora.rank = -1;
  EXPECT_NE(error_of([&] { c.validate(); }).find("at least 1"), std::string::npos);
  c.lora.rank = 33;  // k's block: kv 2 x 16 = 32 rows
  const std::string big = error_of([&] { c.validate(); });
  EXPECT_NE(big.find("min(in, out) = 32 of target k"), std::string::npos) << big;
  c.lora.targets = kLoraQ;  // q: 64 rows, in 64
  c.validate();
  c.lora.rank = 65;
  EXPECT_NE(error_of([&] { c.validate(); }).find("min(in, out) = 64 of target q"), std::string::npos);
  c = tiny_lora(kLoraCanonical);
  c.lora.dropout = 1;
  EXPECT_NE(error_of([&] { c.validate(); }).find("dropout"), std::string::npos);
  c = tiny_lora(kLoraGate);
  c.act = Act::gelu, c.ffn = 96;
  EXPECT_NE(error_of([&] { c.validate(); }).find("no gate"), std::string::npos);
  c = preset("tiny-moe");
  c.lora.rank = 4;
  EXPECT_NE(error_of([&] { c.validate(); }).find("Mixture-of-Experts"), std::string::npos);
}

TEST(LoraLayout, AdaptersFollowEverySlotWithTheirTagsAndTheBaseIsFrozen) {
  const ModelConfig c = tiny_lora(kLoraCanonical);
  const DenseLayout L = dense_layout(c);
  const std::int64_t d = 64, qd = 64, kvd = 32, ffn = 192, r = 4;
  struct Want {
    std::string name;
    std::vector<std::int64_t> shape;
    TpRole tp;
    std::vector<std::int64_t> blocks;
  };
  std::vector<Want> want;
  for (int i = 0; i < c.layers; ++i) {
    const std::string p = "layers." + std::to_string(i);
    for (auto [block, rows] : {std::pair{"q", qd}, {"k", kvd}, {"v", kvd}}) {
      want.push_back({p + ".attn.qkv.lora_a." + block, {r, d}, TpRole::replicated, {}});
      want.push_back({p + ".attn.qkv.lora_b." + block, {rows, r}, TpRole::column, {rows}});
    }
    want.push_back({p + ".attn.out.lora_a", {r, qd}, TpRole::row, {}});
    want.push_back({p + ".attn.out.lora_b", {d, r}, TpRole::replicated, {}});
    for (const char* block : {"gate", "up"}) {
      want.push_back({p + ".mlp.fc1.lora_a." + block, {r, d}, TpRole::replicated, {}});
      want.push_back({p + ".mlp.fc1.lora_b." + block, {ffn, r}, TpRole::column, {ffn}});
    }
    want.push_back({p + ".mlp.fc2.lora_a", {r, ffn}, TpRole::row, {}});
    want.push_back({p + ".mlp.fc2.lora_b", {d, r}, TpRole::replicated, {}});
  }
  const std::size_t first = L.slots.size() - want.size();
  EXPECT_EQ(L.slots[first - 1].name, "lm_head.weight");
  std::size_t grad = 0;
  for (std::size_t i = 0; i < L.slots.size(); ++i) {
    const Slot& s = L.slots[i];
    if (i < first) {
      EXPECT_FALSE(s.has_grad()) << s.name << " should be frozen";
      continue;
    }
    const Want& w = want[i - first];
    EXPECT_EQ(s.name, w.name);
    EXPECT_EQ(s.shape, w.shape) << s.name;
    EXPECT_EQ(s.tags.tp, w.tp) << s.name;
    EXPECT_EQ(s.tags.tp_blocks, w.blocks) << s.name;
    EXPECT_EQ(s.tags.role, ParamRole::adapter);
    EXPECT_TRUE(s.tags.decay && s.tags.trainable) << s.name;
    EXPECT_EQ(s.grad_offset, grad) << s.name;  // the adapters' run, in the parameters' order
    EXPECT_EQ(s.offset, L.slots[first].offset + grad) << s.name;
    grad += s.size;
  }
  EXPECT_EQ(L.grad_total, grad);
  EXPECT_EQ(L.total - L.slots[first].offset, grad);
  EXPECT_EQ(trainable_param_count(c), std::int64_t(grad));
  EXPECT_EQ(frozen_param_count(c), param_count(c));
  // the row blocks each adapter covers in its linear
  const DenseLayout::Layer& l0 = L.layers[0];
  ASSERT_EQ(l0.qkv_lora.size(), 3u);
  EXPECT_EQ(l0.qkv_lora[1].row0, qd);
  EXPECT_EQ(l0.qkv_lora[1].rows, kvd);
  EXPECT_EQ(l0.qkv_lora[2].row0, qd + kvd);
  ASSERT_EQ(l0.fc1_lora.size(), 2u);
  EXPECT_EQ(l0.fc1_lora[1].row0, ffn);
  EXPECT_EQ(&l0.lora(l0.out), &l0.out_lora);
  EXPECT_TRUE(l0.lora(l0.norm1_w).empty());
}

TEST(LoraLayout, FusedTargetsTakeWholeLinearsAndAStageItsOwn) {
  const ModelConfig c = tiny_lora(kLoraFused);
  const DenseLayout L = dense_layout(c);
  const Slot& b = L.at("layers.1.attn.qkv.lora_b");
  EXPECT_EQ(b.shape, (std::vector<std::int64_t>{128, 4}));
  EXPECT_EQ(b.tags.tp_blocks, (std::vector<std::int64_t>{64, 32, 32}));
  EXPECT_EQ(L.at("layers.1.mlp.fc1.lora_b").tags.tp_blocks, (std::vector<std::int64_t>{192, 192}));
  EXPECT_THROW(L.at("layers.1.attn.out.lora_a"), tb::Error);
  EXPECT_EQ(L.layers[1].qkv_lora.size(), 1u);
  const DenseLayout s1 = dense_layout(c, LayerRange{1, 2});  // the last stage: layer 1's adapters after the head
  EXPECT_EQ(s1.slots.back().name, "layers.1.mlp.fc1.lora_b");
  EXPECT_EQ(s1.grad_total, s1.at("layers.1.attn.qkv.lora_a").size + b.size + 4 * 64 + 384 * 4);
  // gelu: up is all of fc1
  ModelConfig g = tiny_lora(kLoraUp);
  g.act = Act::gelu;
  EXPECT_EQ(dense_layout(g).at("layers.0.mlp.fc1.lora_b").shape, (std::vector<std::int64_t>{192, 4}));
}

TEST(LoraLayout, AStartsUniformWithinItsBoundAndBAtZero) {
  const ModelConfig c = tiny_lora(kLoraMlperf);
  const DenseLayout L = dense_layout(c);
  std::vector<float> p(L.total);
  init_params<float>(p, L, 5);
  for (const char* name : {"layers.0.attn.qkv.lora_a", "layers.1.attn.out.lora_a"}) {
    const Slot& a = L.at(name);
    const double bound = 1 / std::sqrt(double(a.shape[1]));
    double lo = 1, hi = -1;
    for (std::size_t i = a.offset; i < a.offset + a.size; ++i)
      lo = std::min(lo, double(p[i])), hi = std::max(hi, double(p[i]));
    EXPECT_GE(lo, -bound) << name;
    EXPECT_LE(hi, bound) << name;
    EXPECT_LT(lo, -0.8 * bound) << name;  // spread over the range (256 or 512 draws)
    EXPECT_GT(hi, 0.8 * bound) << name;
  }
  const Slot& b = L.at("layers.0.attn.out.lora_b");
  for (std::size_t i = b.offset; i < b.offset + b.size; ++i) ASSERT_EQ(p[i], 0.0f);
}

TEST(LoraFlops, TwoThirdsOfFullTrainingNamed) {
  ModelConfig c = preset("llama3.1-8b");
  const ModelConfig base = c;
  c.lora.rank = 16;
  c.lora.targets = kLoraCanonical;
  for (FlopConvention conv : {FlopConvention::full, FlopConvention::causal}) {
    const Flops a = flops_per_token(c, conv), b = flops_per_token(base, conv);
    EXPECT_NEAR(a.total(), b.total() * 2 / 3, 1e-6 * b.total());
    EXPECT_NEAR(a.mlp, b.mlp * 2 / 3, 1e-6 * b.mlp);
  }
  EXPECT_NEAR(flops_per_sample(c, FlopConvention::full) / 4.74e14, 2.0 / 3.0, 0.01);  // the full formula's 8B sample
  EXPECT_EQ(flop_task(c), "lora");
  EXPECT_EQ(flop_task(base), "pretrain");
}

}  // namespace
