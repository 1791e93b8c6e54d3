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

bool tp_replicated(std::string_view name) {
  return !(name.ends_with("attn.qkv.weight") || name.ends_with("attn.out.weight") ||
           name.ends_with("mlp.fc1.weight") || name.ends_with("mlp.fc2.weight"));
}

std::vector<SlotPart> tp_slot_parts(const model::ModelConfig& full, const model::Slot& s, int tp, int rank) {
  const std::string_view name = s.name;
  const std::int64_t rows = s.shape[0], cols = s.shape.size() == 2 ? s.shape[1] : 1;
  if (tp_replicated(name) || tp == 1) return {{0, rows, 0, cols}};
  const std::int64_t r = rank, d = full.d_model, hd = full.head_dim;
  const std::int64_t ql = full.heads / tp * hd, kvl = full.kv_heads / tp * hd, ffl = full.ffn / tp;
  const std::int64_t qd = full.q_dim(), kvd = full.kv_dim();
  if (name.ends_with("attn.qkv.weight")) return {{r * ql, ql, 0, d}, {qd + r * kvl, kvl, 0, d}, {qd + kvd + r * kvl, kvl, 0, d}};
  if (name.ends_with("attn.out.weight")) return {{0, d, r * ql, ql}};
  if (name.ends_with("mlp.fc1.weight")) {
    if (full.act == model::Act::swiglu) return {{r * ffl, ffl, 0, d}, {full.ffn + r * ffl, ffl, 0, d}};
    return {{r * ffl, ffl, 0, d}};
  }
  return {{0, d, r * ffl, ffl}};  // mlp.fc2
}

}  // namespace tb::parallel
