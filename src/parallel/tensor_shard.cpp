// parallel/tensor_shard.cpp: the tensor-parallel shard of each slot (parallel/tensor_shard.h).
#include "parallel/tensor_shard.h"

#include "core/error.h"

namespace tb::parallel {

model::ModelConfig tp_shard_config(const model::ModelConfig& full, int tp) {
  TB_REQUIRE(tp >= 1 && full.heads % tp == 0 && full.kv_heads % tp == 0 && full.ffn % tp == 0,
             "tensor parallel: heads, kv_heads and ffn must divide by tp");
  model::ModelConfig c = full;
  c.heads /= tp, c.kv_heads /= tp, c.ffn /= tp;
  return c;
}

bool tp_replicated(const model::Slot& s) { return s.tags.tp == model::TpRole::replicated; }

std::vector<SlotPart> tp_slot_parts(const model::Slot& s, int tp, int rank) {
  const std::int64_t rows = s.shape[0], cols = s.shape.size() == 2 ? s.shape[1] : 1;
  if (tp_replicated(s) || tp == 1) return {{0, rows, 0, cols}};
  const std::int64_t r = rank;
  auto split = [&](std::int64_t n) {
    TB_REQUIRE(n % tp == 0, "tensor parallel: " + s.name + " has a block of " + std::to_string(n) +
                                " rows or columns, which tp " + std::to_string(tp) + " does not divide");
    return n / tp;
  };
  if (s.tags.tp == model::TpRole::row) return {{0, rows, r * split(cols), split(cols)}};
  std::vector<SlotPart> parts;  // column parallel: this rank's part of each row block
  std::int64_t row0 = 0;
  for (std::int64_t block : s.tags.tp_blocks.empty() ? std::vector<std::int64_t>{rows} : s.tags.tp_blocks) {
    parts.push_back({row0 + r * split(block), split(block), 0, cols});
    row0 += block;
  }
  return parts;
}

}  // namespace tb::parallel
