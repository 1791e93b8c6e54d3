// parallel/tensor_shard.h: what a tensor-parallel rank holds of the dense decoder (Megatron's split), as used by the
// CUDA decoder (model/decoder_cuda.h TensorParallelOps) and the CPU one (parallel/decoder_cpu_parallel.h's
// local_layout()): the local config has heads, kv_heads and ffn divided by tp (d_model, vocab, layers whole) and
// model::dense_layout of it; each local slot is stacked from parts of the full slot of the same name ([rows, cols]
// row-major):
//   attn.qkv   rows  [r·H/tp·hd, +H/tp·hd) of Q, the same of K and of V (local heads)      column parallel
//   attn.out   cols  [r·H/tp·hd, +H/tp·hd)                                                  row parallel
//   mlp.fc1    rows  [r·ffn/tp, +ffn/tp) (swiglu: of the gate half and of the up half)      column parallel
//   mlp.fc2    cols  [r·ffn/tp, +ffn/tp)                                                    row parallel
//   everything else (embedding, norms, LM head) whole: replicated on every tp rank
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "model/config.h"
#include "model/param_layout.h"

namespace tb::parallel {

model::ModelConfig tp_shard_config(const model::ModelConfig& full, int tp);

struct SlotPart {
  std::int64_t row0 = 0, rows = 0, col0 = 0, cols = 0;  // a block of the full slot, [rows, cols]
  bool operator==(const SlotPart&) const = default;
};
// The parts of `slot` (a slot of model::dense_layout(full)) that tp rank `rank` holds, in local order (one whole part
// when replicated).
// The split follows the slot's tags (model/params.h): replicated, row parallel, or column parallel by its row blocks.
std::vector<SlotPart> tp_slot_parts(const model::Slot& slot, int tp, int rank);
bool tp_replicated(const model::Slot& slot);  // embedding, positions, norms, LM head

}  // namespace tb::parallel
