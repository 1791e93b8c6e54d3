// zero_test: the ZeRO-1 partition covers every parameter exactly once over the dp ranks, buckets are dp-divisible
// and never start inside a later-finished layer (a boundary rounds up), and each rank's segments stay in its pieces.
#include "parallel/zero.h"

#include <gtest/gtest.h>

#include "model/config.h"

namespace tb::parallel {
namespace {

TEST(ZeroLayout, EveryParameterOwnedOnceAndBucketsDivide) {
  model::ModelConfig m = model::preset("tiny");
  for (bool tied : {false, true}) {
    m.tied_embeddings = tied;
    const model::DenseLayout L = model::dense_layout(m);
    for (int dp : {1, 2, 3, 4, 8}) {
      for (std::size_t bucket : {std::size_t(1), std::size_t(5000), std::size_t(1) << 40}) {
        std::vector<int> owner(L.total, 0);
        for (int r = 0; r < dp; ++r) {
          const ZeroLayout z = zero_layout(L, dp, r, bucket);
          ASSERT_EQ(z.padded_total % std::size_t(dp), 0u);
          ASSERT_GE(z.padded_total, L.total);
          ASSERT_EQ(z.buckets.front().begin, 0u);
          ASSERT_EQ(z.buckets.back().end, z.padded_total);
          std::size_t shard = 0;
          for (std::size_t b = 0; b < z.buckets.size(); ++b) {
            EXPECT_EQ(z.buckets[b].piece() % std::size_t(dp), 0u);
            if (b > 0) {
              EXPECT_EQ(z.buckets[b].begin, z.buckets[b - 1].end);
            }
            EXPECT_EQ(z.buckets[b].shard_offset, shard);
            shard += z.piece_size(z.buckets[b]);
          }
          EXPECT_EQ(z.shard_size, shard);
          for (const ZeroSegment& s : z.segments) {
            EXPECT_LT(s.shard + s.count - 1, z.shard_size);
            const model::Slot& slot = L.slots[std::size_t(s.slot)];
            EXPECT_GE(s.flat, slot.offset);
            EXPECT_LE(s.flat + s.count, slot.offset + slot.size);
            for (std::size_t i = s.flat; i < s.flat + s.count; ++i) ++owner[i];
          }
        }
        for (const model::Slot& s : L.slots) {
          for (std::size_t i = s.offset; i < s.offset + s.size; ++i)
            ASSERT_EQ(owner[i], 1) << "dp " << dp << " bucket " << bucket << " element " << i << " of " << s.name;
        }
      }
    }
  }
}

TEST(ZeroLayout, OneBucketPerLayerWhenSmallAndBoundariesRoundUp) {
  const model::DenseLayout L = model::dense_layout(model::preset("tiny"));
  const ZeroLayout z = zero_layout(L, 3, 0, 1);
  // final norm + LM head, every layer, the embedding: layers + 2 buckets.
  EXPECT_EQ(z.buckets.size(), L.layers.size() + 2);
  const ZeroLayout big = zero_layout(L, 2, 0, std::size_t(1) << 40);  // one bucket for all layers, the embedding apart
  ASSERT_EQ(big.buckets.size(), 2u);
  EXPECT_EQ(big.buckets[0].end, L.slots[std::size_t(L.layers[0].norm1_w)].offset);
  for (std::size_t l = 0; l < L.layers.size(); ++l) {
    const std::size_t start = L.slots[std::size_t(L.layers[l].norm1_w)].offset;
    EXPECT_EQ(z.buckets[l + 1].begin, (start + 2) / 3 * 3);
  }
}

}  // namespace
}  // namespace tb::parallel
