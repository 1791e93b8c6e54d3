// tensor_shard_test: the tp ranks' parts of every slot tile the full slot exactly once (sharded slots) or repeat it
// whole (replicated), and each local slot of tp_shard_config's layout has the parts' total size.
#include "parallel/tensor_shard.h"

#include <gtest/gtest.h>

#include "model/param_layout.h"

namespace tb::parallel {
namespace {

TEST(TensorShard, PartsTileEverySlot) {
  for (const char* preset : {"tiny", "llama3.1-8b"}) {
    model::ModelConfig full = model::preset(preset);
    full.layers = 2;
    const model::DenseLayout fl = model::dense_layout(full);
    for (int tp : {1, 2, 4}) {
      if (full.heads % tp || full.kv_heads % tp || full.ffn % tp) continue;
      const model::DenseLayout ll = model::dense_layout(tp_shard_config(full, tp));
      ASSERT_EQ(ll.slots.size(), fl.slots.size());
      for (std::size_t i = 0; i < fl.slots.size(); ++i) {
        const model::Slot& f = fl.slots[i];
        const std::int64_t cols = f.shape.size() == 2 ? f.shape[1] : 1;
        std::vector<int> covered(f.size, 0);
        for (int r = 0; r < tp; ++r) {
          std::int64_t local = 0;
          for (const SlotPart& p : tp_slot_parts(full, f, tp, r)) {
            for (std::int64_t a = 0; a < p.rows; ++a)
              for (std::int64_t b = 0; b < p.cols; ++b) ++covered[std::size_t((p.row0 + a) * cols + p.col0 + b)];
            local += p.rows * p.cols;
          }
          EXPECT_EQ(std::size_t(local), ll.slots[i].size) << f.name << " tp " << tp;
          EXPECT_EQ(ll.slots[i].name, f.name);
        }
        const int expect = tp_replicated(f.name) ? tp : 1;
        for (std::size_t e = 0; e < covered.size(); e += 97) ASSERT_EQ(covered[e], expect) << f.name << " tp " << tp;
      }
    }
  }
}

}  // namespace
}  // namespace tb::parallel
