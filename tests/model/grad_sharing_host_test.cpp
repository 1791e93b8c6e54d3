// Tests model/grad_sharing (host only): every placement keeps block k inside [free_begin, free_end[k]) or below
// the buffer, the blocks pairwise disjoint and `below` the lowest offset's depth (checked independently on random
// instances); a crafted instance's offsets by hand; Llama 3.1 8B L8's numbers (blocks of 1.21 GB beside 0.87 GB of
// gradients per layer) save what the greedy bound says; bad arguments raise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "core/error.h"
#include "model/grad_sharing.h"

namespace {

using tb::model::GradSharing;
using tb::model::place_blocks_over_grads;

void expect_valid(const GradSharing& g, std::int64_t block, std::int64_t free_begin,
                  const std::vector<std::int64_t>& free_end) {
  ASSERT_EQ(g.block_at.size(), free_end.size());
  std::int64_t lowest = 0;
  for (std::size_t k = 0; k < free_end.size(); ++k) {
    const std::int64_t a = g.block_at[k], e = a + block;
    EXPECT_EQ(a % 256, 0) << k;
    EXPECT_LE(e, free_end[k]) << "block " << k << " overlaps gradients alive while it is";
    EXPECT_TRUE(free_begin == 0 || e <= 0 || a >= free_begin) << "block " << k << " overlaps the live prefix";
    for (std::size_t j = 0; j < k; ++j)
      EXPECT_TRUE(e <= g.block_at[j] || g.block_at[j] + block <= a) << "blocks " << j << " and " << k << " overlap";
    lowest = std::min(lowest, a);
  }
  EXPECT_EQ(g.below, -lowest);
}

TEST(GradSharing, CraftedInstance) {
  // 3 blocks of 4 units (units of 256 bytes); gradients of layer k start at 2 + 3k units; untied.
  const std::int64_t u = 256;
  const std::vector<std::int64_t> free_end{2 * u, 5 * u, 8 * u};
  const GradSharing g = place_blocks_over_grads(4 * u, 0, free_end);
  // block 2 ends at 8 -> [4, 8); block 1 ends at min(4, 5) = 4 -> [0, 4); block 0 ends at min(0, 2) = 0 -> [-4, 0)
  EXPECT_EQ(g.block_at, (std::vector<std::int64_t>{-4 * u, 0, 4 * u}));
  EXPECT_EQ(g.below, 4 * u);
  expect_valid(g, 4 * u, 0, free_end);
  // tied: [0, 2) (the embedding's gradient) stays live; block 1 would take [0, 4) and goes below the buffer
  const GradSharing t = place_blocks_over_grads(4 * u, 2 * u, free_end);
  EXPECT_EQ(t.block_at, (std::vector<std::int64_t>{-8 * u, -4 * u, 4 * u}));
  EXPECT_EQ(t.below, 8 * u);
  expect_valid(t, 4 * u, 2 * u, free_end);
}

TEST(GradSharing, RandomInstancesAreValid) {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 2000; ++trial) {
    const int layers = int(rng() % 12);
    const std::int64_t block = 256 * std::int64_t(1 + rng() % 40), free_begin = 256 * std::int64_t(rng() % 30);
    std::vector<std::int64_t> free_end;
    std::int64_t at = free_begin + 256 * std::int64_t(rng() % 30);
    for (int k = 0; k < layers; ++k, at += 256 * std::int64_t(rng() % 30)) free_end.push_back(at);
    expect_valid(place_blocks_over_grads(block, free_begin, free_end), block, free_begin, free_end);
    if (HasFailure()) return;
  }
}

TEST(GradSharing, Llama8BEightLayersSavesMostOfTheActivations) {
  // Per layer: saved activations 1.21e9 bytes (recompute none, seq 8192), gradients 218e6 fp32; the embedding's
  // gradient (128256 x 4096 fp32) first.
  const std::int64_t block = 1'207'959'552, emb = 2'101'346'304, layer = 872'448'000;
  std::vector<std::int64_t> free_end;
  for (int k = 0; k < 8; ++k) free_end.push_back(emb + k * layer);
  const GradSharing g = place_blocks_over_grads(block, 0, free_end);
  expect_valid(g, block, 0, free_end);
  // The top block ends where layer 7's gradients start; the blocks then sit back to back: 8 blocks below that line,
  // so below = 8 block - free_end[7] (every block's own bound holds since block > layer).
  EXPECT_EQ(g.below, 8 * block - free_end[7]);
  EXPECT_LT(double(g.below) / double(8 * block), 0.16);  // saves > 84% of the activation blocks' bytes
}

TEST(GradSharing, BadArgumentsRaise) {
  const std::vector<std::int64_t> descending{1024, 512};
  EXPECT_THROW(place_blocks_over_grads(512, 0, descending), tb::Error);
  const std::vector<std::int64_t> ok{512};
  EXPECT_THROW(place_blocks_over_grads(100, 0, ok), tb::Error);
  EXPECT_THROW(place_blocks_over_grads(512, 1024, ok), tb::Error);  // an end below free_begin
}

}  // namespace
