// Tests model/param_layout's pipeline-stage layouts (host only): the stages of a split model hold exactly the whole
// model's slots, by name, once each, packed from offset 0 with the same shapes and initial values; the embedding
// only on the first stage and the final norm and LM head only on the last; the 256-byte slot alignment of the CUDA
// decoder kept; the default range is the whole model (every existing caller's layout); the stage split is
// parallel/trainer_cpu.h's; tied embeddings split over stages put a copy of the embedding (same name, shape and
// values) after the last stage's final norm as its LM head; bad ranges raise.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/config.h"
#include "model/param_layout.h"

namespace {

using tb::model::DenseLayout;
using tb::model::LayerRange;

tb::model::ModelConfig untied_small() {
  tb::model::ModelConfig c = tb::model::preset("small");
  c.tied_embeddings = false;
  c.layers = 5;
  return c;
}

TEST(ParamLayout, DefaultRangeIsTheWholeModel) {
  const tb::model::ModelConfig c = untied_small();
  const DenseLayout a = tb::model::dense_layout(c), b = tb::model::dense_layout(c, LayerRange{0, c.layers});
  ASSERT_EQ(a.slots.size(), b.slots.size());
  for (std::size_t i = 0; i < a.slots.size(); ++i) {
    EXPECT_EQ(a.slots[i].name, b.slots[i].name);
    EXPECT_EQ(a.slots[i].offset, b.slots[i].offset);
  }
  EXPECT_EQ(a.total, b.total);
  EXPECT_TRUE(a.has_embedding() && a.has_head());
  EXPECT_EQ(a.first_layer, 0);
}

TEST(ParamLayout, StageSplitIsTheCpuTrainers) {
  EXPECT_EQ(tb::model::pipeline_stage_layers(4, 2, 0), (LayerRange{0, 2}));
  EXPECT_EQ(tb::model::pipeline_stage_layers(4, 2, 1), (LayerRange{2, 4}));
  EXPECT_EQ(tb::model::pipeline_stage_layers(5, 2, 0), (LayerRange{0, 2}));
  EXPECT_EQ(tb::model::pipeline_stage_layers(5, 2, 1), (LayerRange{2, 5}));
  EXPECT_EQ(tb::model::pipeline_stage_layers(80, 4, 3), (LayerRange{60, 80}));
  EXPECT_THROW(tb::model::pipeline_stage_layers(1, 2, 0), tb::Error);
  EXPECT_THROW(tb::model::pipeline_stage_layers(4, 2, 2), tb::Error);
}

TEST(ParamLayout, StagesHoldEveryWholeSlotOnceWithItsValues) {
  const tb::model::ModelConfig c = untied_small();
  const DenseLayout full = tb::model::dense_layout(c);
  std::vector<float> full_values(full.total);
  tb::model::init_params<float>(full_values, full, 7);
  for (int pp : {2, 3, 5}) {
    std::map<std::string, int> seen;
    for (int r = 0; r < pp; ++r) {
      const LayerRange range = tb::model::pipeline_stage_layers(c.layers, pp, r);
      const DenseLayout st = tb::model::dense_layout(c, range);
      EXPECT_EQ(st.first_layer, range.first);
      EXPECT_EQ(int(st.layers.size()), range.last - range.first);
      EXPECT_EQ(st.has_embedding(), r == 0) << "pp " << pp << " rank " << r;
      EXPECT_EQ(st.has_head(), r == pp - 1) << "pp " << pp << " rank " << r;
      EXPECT_EQ(st.final_norm_w >= 0, r == pp - 1);
      std::vector<float> values(st.total);
      tb::model::init_params<float>(values, st, 7);
      std::size_t at = 0;
      for (const tb::model::Slot& s : st.slots) {
        ++seen[s.name];
        EXPECT_EQ(s.offset, at) << s.name << ": packed in order";
        EXPECT_EQ(s.offset % 128, 0u) << s.name << ": 256-byte aligned in bf16";
        at += s.size;
        const tb::model::Slot& f = full.at(s.name);
        ASSERT_EQ(f.shape, s.shape) << s.name;
        for (std::size_t i = 0; i < s.size; ++i)
          ASSERT_EQ(values[s.offset + i], full_values[f.offset + i]) << s.name << " element " << i;
      }
      EXPECT_EQ(at, st.total);
    }
    EXPECT_EQ(seen.size(), full.slots.size()) << "pp " << pp;
    for (const auto& [name, count] : seen) EXPECT_EQ(count, 1) << name << " in pp " << pp;
  }
}

TEST(ParamLayout, BadRangesRaise) {
  const tb::model::ModelConfig c = untied_small();
  EXPECT_THROW(tb::model::dense_layout(c, LayerRange{2, 2}), tb::Error);
  EXPECT_THROW(tb::model::dense_layout(c, LayerRange{0, 6}), tb::Error);
  EXPECT_THROW(tb::model::dense_layout(c, LayerRange{-1, 2}), tb::Error);
}

TEST(ParamLayout, TiedStagesCopyTheEmbeddingToTheLastStage) {
  tb::model::ModelConfig c = untied_small();
  c.tied_embeddings = true;
  const DenseLayout full = tb::model::dense_layout(c);
  ASSERT_EQ(full.lm_head, full.embed);  // one slot for both
  std::vector<float> full_values(full.total);
  tb::model::init_params<float>(full_values, full, 7);
  const tb::model::Slot& e = full.at("embed.weight");
  for (int pp : {2, 3}) {
    const DenseLayout first = tb::model::dense_layout(c, tb::model::pipeline_stage_layers(c.layers, pp, 0));
    const DenseLayout last = tb::model::dense_layout(c, tb::model::pipeline_stage_layers(c.layers, pp, pp - 1));
    EXPECT_TRUE(first.has_embedding() && !first.has_head()) << "pp " << pp;
    EXPECT_TRUE(!last.has_embedding() && last.has_head()) << "pp " << pp;
    const tb::model::Slot& copy = last.slots[std::size_t(last.lm_head)];
    EXPECT_EQ(copy.name, "embed.weight");
    EXPECT_EQ(last.lm_head, int(last.slots.size()) - 1) << "the copy comes last";
    EXPECT_EQ(copy.shape, e.shape);
    EXPECT_EQ(copy.offset + copy.size, last.total);
    std::vector<float> values(last.total);
    tb::model::init_params<float>(values, last, 7);
    for (std::size_t i = 0; i < e.size; ++i)
      ASSERT_EQ(values[copy.offset + i], full_values[e.offset + i]) << "element " << i;
    if (pp == 3) {
      const DenseLayout mid = tb::model::dense_layout(c, tb::model::pipeline_stage_layers(c.layers, pp, 1));
      EXPECT_FALSE(mid.has_embedding() || mid.has_head());
      EXPECT_THROW(mid.at("embed.weight"), tb::Error);
    }
  }
}

}  // namespace
