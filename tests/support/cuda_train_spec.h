// tests/support/cuda_train_spec.h: the small CUDA training run the fine-tuning GPU tests share: the `small` preset at
// 2 layers and seq 128, micro-batch 4, `steps` steps after one warmup step, no op profile.
#pragma once

#include "train/spec.h"

namespace tb::testing_support {

inline train::TrainSpec small_cuda_spec(int steps) {
  train::TrainSpec s;
  s.model.preset = "small";
  s.model.layers = 2;
  s.model.seq = 128;
  s.run.device = train::Device::cuda;
  s.batch.micro = 4;
  s.run.steps = steps;
  s.run.warmup_steps = 1;
  s.run.op_profile = false;
  return s;
}

}  // namespace tb::testing_support
