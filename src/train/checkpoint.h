// train/checkpoint.h: a training run's state as one safetensors file (train/safetensors.h), what a resumed run needs
// to continue with the same losses:
//   "<parameter>"             F32, every parameter by its registry name and shape (model/params.h), the fp32 weights
//   "exp_avg.<parameter>"     F32, AdamW's first moment
//   "exp_avg_sq.<parameter>"  F32, its second moment
//   __metadata__              format "trainbench.checkpoint.v1"; step (optimizer steps done), model, data, seed and
//                             global_batch (the data stream is counter-based, train/data.h: the rows a resumed run
//                             draws next follow from the step, the seed and the global batch)
// load_checkpoint refuses a file whose model, data, seed or global batch differ from the run's (naming each), or whose
// tensors differ in name, dtype or shape (train/safetensors.h names each difference); every check comes before any
// copy, so a refused file changes nothing. save_checkpoint replaces the destination atomically.
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
};

// Views of a trainer's state: the parameters' slots over one flat buffer, and the moments in the same layout.
struct TrainState {
  std::span<const model::Slot> slots;
  std::span<float> params, exp_avg, exp_avg_sq;
};

void save_checkpoint(const std::filesystem::path& path, const TrainState& s, const CheckpointInfo& info);
// The file's info after the checks above against `run` (its step ignored); the state loaded.
CheckpointInfo load_checkpoint(const std::filesystem::path& path, const TrainState& s, const CheckpointInfo& run);

}  // namespace tb::train
