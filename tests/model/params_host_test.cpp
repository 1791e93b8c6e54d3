// Tests model/params (host only): the registry packs parameters in order and refuses bad ones; every dense-decoder
// parameter carries the tags that the reductions read (tensor-parallel role, decay, tied); the initial values are the
// counter-based draws of core/counter_rng.h, element by element (what the CUDA trainer's fill_normal computes), and
// they look like N(init_value, init_std).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/counter_rng.h"
#include "core/error.h"
#include "model/config.h"
#include "model/param_layout.h"
#include "model/params.h"

namespace tb::model {
namespace {

TEST(ParamRegistry, PacksInOrderAndRefusesBadParameters) {
  ParamRegistry r;
  EXPECT_EQ(r.add("a", {3, 4}, {0.02, 0}, {}), 0);
  ParamTags col;
  col.tp = TpRole::column, col.tp_blocks = {2, 3};
  EXPECT_EQ(r.add("b", {5, 2}, {0, 1}, col), 1);
  EXPECT_EQ(r.slots[1].offset, 12u);
  EXPECT_EQ(r.total, 22u);
  EXPECT_EQ(r.at("b").size, 10u);
  EXPECT_THROW(r.at("c"), Error);
  EXPECT_THROW(r.add("z", {0, 4}, {}, {}), Error);
  col.tp_blocks = {2, 2};
  EXPECT_THROW(r.add("c", {5, 2}, {}, col), Error);  // the blocks must cover the rows
  EXPECT_EQ(r.count_if([](const ParamTags& t) { return t.tp == TpRole::column; }), 10u);
}

TEST(ParamRegistry, DenseLayoutTags) {
  for (const char* name : {"tiny", "small-gpt", "llama3.1-8b"}) {
    ModelConfig c = preset(name);
    c.layers = 2;
    const DenseLayout L = dense_layout(c);
    for (const DenseLayout::Layer& l : L.layers) {
      EXPECT_EQ(L.slots[std::size_t(l.qkv)].tags.tp, TpRole::column);
      EXPECT_EQ(L.slots[std::size_t(l.fc1)].tags.tp, TpRole::column);
      EXPECT_EQ(L.slots[std::size_t(l.out)].tags.tp, TpRole::row);
      EXPECT_EQ(L.slots[std::size_t(l.fc2)].tags.tp, TpRole::row);
      for (int i : {l.norm1_w, l.norm1_b, l.norm2_w, l.norm2_b})
        if (i >= 0) {
          EXPECT_FALSE(L.slots[std::size_t(i)].tags.decay) << L.slots[std::size_t(i)].name;
        }
    }
    for (const Slot& s : L.slots) {
      EXPECT_TRUE(s.tags.trainable) << s.name;
      EXPECT_EQ(s.tags.group, ParamGroup::dense) << s.name;
      EXPECT_EQ(s.tags.decay, s.tags.role != ParamRole::norm) << s.name;
      EXPECT_EQ(s.tags.tied, c.tied_embeddings && s.tags.role == ParamRole::embedding) << s.name;
      if (s.tags.role != ParamRole::linear) {
        EXPECT_EQ(s.tags.tp, TpRole::replicated) << s.name;
      }
    }
    EXPECT_EQ(L.slots[std::size_t(L.lm_head)].tags.role, c.tied_embeddings ? ParamRole::embedding : ParamRole::head);
  }
}

TEST(ParamRegistry, TiedCopyOnTheLastStageIsTagged) {
  ModelConfig c = preset("small-gpt");
  c.layers = 2;
  ASSERT_TRUE(c.tied_embeddings);
  const DenseLayout last = dense_layout(c, {1, 2});
  ASSERT_GE(last.lm_head, 0);
  EXPECT_TRUE(last.slots[std::size_t(last.lm_head)].tags.tied);
}

TEST(ParamInit, CounterBasedDrawsPerElement) {
  ModelConfig c = preset("tiny");
  const DenseLayout L = dense_layout(c);
  std::vector<float> p(L.total);
  init_params<float>(p, L, 42);
  for (const Slot& s : L.slots) {
    const std::uint64_t stream = slot_seed(42, s.name);
    for (std::size_t i = 0; i < s.size; i += 37)
      ASSERT_EQ(p[s.offset + i], std::fma(float(s.init_std), normal_value(stream, i), float(s.init_value)))
          << s.name << " element " << i;
    if (s.init_std == 0) continue;
    double sum = 0, sq = 0;
    for (std::size_t i = 0; i < s.size; ++i) sum += p[s.offset + i], sq += double(p[s.offset + i]) * p[s.offset + i];
    const double mean = sum / double(s.size), sd = std::sqrt(sq / double(s.size) - mean * mean);
    EXPECT_NEAR(mean, s.init_value, 4 * s.init_std / std::sqrt(double(s.size))) << s.name;
    EXPECT_NEAR(sd, s.init_std, 0.05 * s.init_std) << s.name;
  }
  std::vector<float> q(L.total);
  init_params<float>(q, L, 43);
  EXPECT_NE(p, q);  // another seed, other values
}

TEST(ParamInit, SlotSeedsDifferByNameAndSeed) {
  EXPECT_NE(slot_seed(1, "layers.0.attn.qkv.weight"), slot_seed(1, "layers.1.attn.qkv.weight"));
  EXPECT_NE(slot_seed(1, "embed.weight"), slot_seed(2, "embed.weight"));
  EXPECT_EQ(slot_seed(7, "x"), splitmix64(splitmix64(7) ^ std::uint64_t('x')));
}

}  // namespace
}  // namespace tb::model
