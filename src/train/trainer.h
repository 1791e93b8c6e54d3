// train/trainer.h: the training loop. One optimizer step = global_batch / micro_batch micro-batches whose
// gradients accumulate (each scaled by micro_batch / global_batch, so the step sees the mean over the global
// batch), then clip the global gradient norm, then AdamW on fp32 master weights with the LR schedule.
//   tokens per step = global_batch x seq;  model FLOPs per step = tokens x flops_per_token (model/flops.h)
// Steps after the first `warmup_steps` are the measured ones (step time median/p10/p90).
// CPU backend (--device cpu): the reference ops in fp32, timed with the host clock around each step.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/stats.h"
#include "model/config.h"
#include "model/flops.h"

namespace tb::train {

struct TrainSpec {
  std::string model = "tiny";         // a preset of model/config.h
  int layers = 0, seq = 0;            // 0: the preset's
  int micro_batch = 1;                // sequences per micro-batch
  int global_batch = 0;               // sequences per optimizer step; 0: micro_batch (no accumulation)
  int steps = 30;                     // optimizer steps
  int warmup_steps = 3;               // not measured
  std::string device = "cuda";        // cuda | cpu
  std::string data = "markov";        // markov | copy | random (synthetic) or the path of a token file
  std::string token_type = "uint16";  // token file element: uint16 | uint32
  double lr = 3e-3, min_lr = 3e-4;    // peak and final learning rate (linear warmup, cosine decay)
  int lr_warmup = 10;
  double weight_decay = 0.1, clip = 1.0, beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  std::uint64_t seed = 1234;
  model::FlopConvention convention = model::FlopConvention::full;
};

struct StepStats {
  int step = 0;  // 1-based
  double loss = 0, lr = 0, grad_norm = 0, step_s = 0, tokens_per_s = 0, tflops = 0;
};

struct TrainResult {
  model::ModelConfig model;
  std::vector<StepStats> steps;
  Summary step_s;  // over the measured steps
  double tokens_per_step = 0, flops_per_step = 0;
  double tokens_per_s = 0, tflops = 0;  // from the median step time
  double loss_floor = 0;                // the synthetic task's (0: unknown, e.g. a token file)
  std::int64_t params = 0;
};

// The preset with the spec's overrides, validated; batch sizes checked. Raises Error{config}.
model::ModelConfig resolve_model(const TrainSpec& spec);
void validate(const TrainSpec& spec);

// Trains on the CPU backend; on_step is called after every step (log lines, records).
TrainResult train_cpu(const TrainSpec& spec, const std::function<void(const StepStats&)>& on_step);

}  // namespace tb::train
