// tensor_shard_test: the tp ranks' parts of every slot tile the full slot exactly once (sharded slots) or repeat it
// whole (replicated), and each local slot of tp_shard_config's layout has the parts' total size; the parts that the
// slots' tags give are Megatron's split, written out by hand (Q, K and V heads; the swiglu gate and up halves).
#include "parallel/tensor_shard.h"

#include <gtest/gtest.h>

#include "core/error.h"
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
          for (const SlotPart& p : tp_slot_parts(f, tp, r)) {
            for (std::int64_t a = 0; a < p.rows; ++a)
              for (std::int64_t b = 0; b < p.cols; ++b) ++covered[std::size_t((p.row0 + a) * cols + p.col0 + b)];
            local += p.rows * p.cols;
          }
          EXPECT_EQ(std::size_t(local), ll.slots[i].size) << f.name << " tp " << tp;
          EXPECT_EQ(ll.slots[i].name, f.name);
        }
        const int expect = tp_replicated(f) ? tp : 1;
        for (std::size_t e = 0; e < covered.size(); e += 97) ASSERT_EQ(covered[e], expect) << f.name << " tp " << tp;
      }
    }
  }
}

TEST(TensorShard, TagsGiveMegatronsSplit) {
  for (model::Act act : {model::Act::swiglu, model::Act::gelu}) {
    model::ModelConfig full = model::preset("llama3.1-8b");
    full.layers = 1, full.act = act;
    const model::DenseLayout fl = model::dense_layout(full);
    const model::DenseLayout::Layer& L = fl.layers[0];
    const std::int64_t d = full.d_model, hd = full.head_dim, qd = full.q_dim(), kvd = full.kv_dim(), f = full.ffn;
    const int tp = 4;
    const std::int64_t ql = full.heads / tp * hd, kvl = full.kv_heads / tp * hd, fl_ = f / tp;
    for (std::int64_t r = 0; r < tp; ++r) {
      const std::vector<SlotPart> qkv{{r * ql, ql, 0, d}, {qd + r * kvl, kvl, 0, d}, {qd + kvd + r * kvl, kvl, 0, d}};
      EXPECT_EQ(tp_slot_parts(fl.slots[std::size_t(L.qkv)], tp, int(r)), qkv);
      EXPECT_EQ(tp_slot_parts(fl.slots[std::size_t(L.out)], tp, int(r)), (std::vector<SlotPart>{{0, d, r * ql, ql}}));
      const std::vector<SlotPart> fc1 = act == model::Act::swiglu
                                            ? std::vector<SlotPart>{{r * fl_, fl_, 0, d}, {f + r * fl_, fl_, 0, d}}
                                            : std::vector<SlotPart>{{r * fl_, fl_, 0, d}};
      EXPECT_EQ(tp_slot_parts(fl.slots[std::size_t(L.fc1)], tp, int(r)), fc1);
      EXPECT_EQ(tp_slot_parts(fl.slots[std::size_t(L.fc2)], tp, int(r)), (std::vector<SlotPart>{{0, d, r * fl_, fl_}}));
      for (int i : {fl.embed, fl.lm_head, L.norm1_w, fl.final_norm_w}) {
        const model::Slot& s = fl.slots[std::size_t(i)];
        EXPECT_TRUE(tp_replicated(s)) << s.name;
        EXPECT_EQ(tp_slot_parts(s, tp, int(r)).size(), 1u) << s.name;
      }
    }
  }
}

TEST(TensorShard, ABlockTpDoesNotDivideIsRefused) {
  model::ModelConfig full = model::preset("tiny");
  full.layers = 1;
  const model::DenseLayout fl = model::dense_layout(full);
  const model::Slot& out = fl.slots[std::size_t(fl.layers[0].out)];
  EXPECT_THROW(tp_slot_parts(out, int(out.shape[1]) + 1, 0), Error);
}

}  // namespace
}  // namespace tb::parallel
