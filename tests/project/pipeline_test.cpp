// Tests project/pipeline and project/overlap: the 1F1B / interleaved bubble, layers per pipeline rank (with the
// embedding and loss counted as layers), and the overlap rule.
#include "project/pipeline.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "project/overlap.h"

using namespace tb::project;

TEST(Pipeline, BubbleIsPpMinusOneOverVpTimesMicroBatches) {
  EXPECT_DOUBLE_EQ(bubble_fraction(1, 1, 32), 0);               // no pipeline, no bubble
  EXPECT_DOUBLE_EQ(bubble_fraction(4, 1, 8), 3.0 / 8);          // plain 1F1B: (pp-1)/m
  EXPECT_DOUBLE_EQ(bubble_fraction(4, 5, 64), 3.0 / (5 * 64));  // Llama 3.1 70B: 0.94%
  EXPECT_DOUBLE_EQ(bubble_fraction(8, 6, 64), 7.0 / (6 * 64));  // GPT-3 175B 25.04: 1.82%
  EXPECT_NEAR(bubble_fraction(8, 12, 16), 7.0 / 192, 1e-15);    // Nemotron-4 340B
  EXPECT_DOUBLE_EQ(bubble_time_s(4, 5, 0.2), 3.0 / 5 * 0.2);    // (pp-1)/vp micro-batch times
  EXPECT_DOUBLE_EQ(bubble_time_s(4, 5, 0.2) / (64 * 0.2), bubble_fraction(4, 5, 64));
  EXPECT_THROW(bubble_fraction(0, 1, 1), tb::Error);
}

TEST(Pipeline, WarmupAndCooldownChunks) {
  EXPECT_DOUBLE_EQ(pipeline_ramp_chunks(1, 1), 0);                // no pipeline
  EXPECT_DOUBLE_EQ(pipeline_ramp_chunks(4, 1), 3);                // 1F1B: pp - 1 micro-batches on the first rank
  EXPECT_DOUBLE_EQ(pipeline_ramp_chunks(8, 12), 7 * 2 + 11 * 8);  // interleaved (Megatron's warmup count)
}

TEST(Pipeline, LayersPerRank) {
  auto s = stage_layers(80, 4, false);  // 70B: 20 per rank
  EXPECT_DOUBLE_EQ(s.first, 20);
  EXPECT_DOUBLE_EQ(s.middle, 20);
  EXPECT_DOUBLE_EQ(s.last, 20);
  s = stage_layers(126, 8, true);  // 405B 25.04: 128 slots over 8 ranks; the ends hold 15 layers + embedding / loss
  EXPECT_DOUBLE_EQ(s.first, 15);
  EXPECT_DOUBLE_EQ(s.middle, 16);
  EXPECT_DOUBLE_EQ(s.last, 15);
  EXPECT_DOUBLE_EQ(s.most(), 16);
  s = stage_layers(30, 4, true);  // 405B 64-GPU proxy: 32 slots, 8 per rank
  EXPECT_DOUBLE_EQ(s.first, 7);
  EXPECT_DOUBLE_EQ(s.middle, 8);
  s = stage_layers(32, 1, true);  // no pipeline: one rank holds everything
  EXPECT_DOUBLE_EQ(s.first, 32);
  EXPECT_DOUBLE_EQ(s.last, 32);
}

TEST(Overlap, HiddenPartCostsTheOverlapCostAndTheRestIsExposed) {
  EXPECT_DOUBLE_EQ(exposed_s(1.0, 3.0, 0.0), 0.0);  // fully hidden, perfect overlap
  EXPECT_DOUBLE_EQ(exposed_s(1.0, 3.0, 0.2), 0.2);  // fully hidden, 20% of it still slows the step
  EXPECT_DOUBLE_EQ(exposed_s(3.0, 1.0, 0.0), 2.0);  // longer than its window: the excess is exposed
  EXPECT_DOUBLE_EQ(exposed_s(3.0, 1.0, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(exposed_s(3.0, 0.0, 0.5), 3.0);   // no window: all exposed
  EXPECT_DOUBLE_EQ(exposed_s(2.0, 5.0, 1.0), 2.0);   // overlap cost 1: as if not overlapped
  EXPECT_DOUBLE_EQ(exposed_s(2.0, -1.0, 0.3), 2.0);  // a negative window is none
}
