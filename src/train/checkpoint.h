// train/checkpoint.h: a training run's state as one safetensors file (train/safetensors.h), what a resumed run needs
// to continue with the same losses. It holds the trainable parameters (model/params.h: the slots with a gradient) and
// their optimizer state: every parameter in full training; with LoRA the adapters alone (an adapter checkpoint), the
// frozen base being the seed's initial weights, which the resumed run draws again:
//   "<parameter>"             F32, each trainable parameter by its registry name and shape, the fp32 weights
//   "exp_avg.<parameter>"     F32, AdamW's first moment
//   "exp_avg_sq.<parameter>"  F32, its second moment
//   __metadata__              format "trainbench.checkpoint.v1"; step (optimizer steps done), model, data, seed,
//                             global_batch (the data stream is counter-based, train/data.h: the rows a resumed run
//                             draws next follow from the step, the seed and the global batch) and lora (the adapters,
//                             model::lora_text; empty in full training)
// load_checkpoint refuses a file whose model, data, seed, global batch or adapters differ from the run's (naming each),
// or whose tensors differ in name, dtype or shape (train/safetensors.h names each difference); every check comes before
// any copy, so a refused file changes nothing. save_checkpoint replaces the destination atomically.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

#include "model/params.h"

namespace tb::train {

struct CheckpointInfo {
  int step = 0;             // optimizer steps done
  std::string model, data;  // the model's name, the data (train/data.h DataSource names)
  std::uint64_t seed = 0;
  int global_batch = 0;     // rows per optimizer step
  std::string lora;         // the adapters (model::lora_text), empty in full training
};

// Views of a trainer's state: the parameters' slots over one flat buffer (a slot at its offset), and the moments of the
// trainable ones in the gradient layout (at its grad_offset).
struct TrainState {
  std::span<const model::Slot> slots;
  std::span<float> params, exp_avg, exp_avg_sq;
};

void save_checkpoint(const std::filesystem::path& path, const TrainState& s, const CheckpointInfo& info);
// The file's info after the checks above against `run` (its step ignored); the state loaded.
CheckpointInfo load_checkpoint(const std::filesystem::path& path, const TrainState& s, const CheckpointInfo& run);

}  // namespace tb::train
