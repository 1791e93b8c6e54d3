// train/trainer.h: the training loop. One optimizer step = global_batch / micro_batch micro-batches whose
// gradients accumulate (each scaled by micro_batch / global_batch, so the step sees the mean over the global
// batch), then clip the global gradient norm, then AdamW on fp32 master weights with the LR schedule.
//   tokens per step = global_batch x seq;  model FLOPs per step = tokens x flops_per_token (model/flops.h)
// Steps after the first `warmup_steps` are the measured ones (step time median/p10/p90).
// CPU backend (--device cpu): the reference ops in fp32, timed with the host clock around each step.
// CUDA backend (--device cuda, train/trainer_cuda.cpp): bf16 model weights and activations, fp32 gradients, fp32
// master weights, AdamW moments fp32 (or bf16); the whole step (H2D of the step's tokens, zeroing, micro-batches,
// grad norm, clipping, AdamW) is one CUDA graph after the first eager step. step_s is the host wall time from
// launch to completion of each step (the GPU runs one step at a time; data for the next step is prepared
// outside the timed window).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bench/telemetry.h"
#include "core/stats.h"
#include "model/config.h"
#include "model/flops.h"
#include "model/moe_stats.h"
#include "model/param_layout.h"
#include "parallel/mesh.h"
#include "parallel/trainer_cpu.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/schedule.h"
#include "train/spec.h"

namespace tb::train {

// Device memory a CUDA run needs, before anything is allocated (bytes).
struct MemoryEstimate {
  double weights = 0, grads = 0, master = 0, moments = 0;  // bf16 2P, 4P (bf16: 2P), 2P split (4P f32), 8P (bf16: 4P)
  double activations = 0;  // the decoder's arena for one micro-batch (shared gradients: what lies beyond them)
  double fp8_weights = 0;  // FP8: the W and W^T copies (1 + 1 bytes per weight)
  double workspaces = 0;   // cuBLASLt, cuDNN attention's allowance, the gathered embedding rows
  double total() const { return weights + grads + master + moments + activations + fp8_weights + workspaces; }
  // "weights 5.21 + gradients 10.41 + ... GiB": the parts (FP8 copies only when there are some)
  std::string parts_gib() const;
};

struct StepStats {
  int step = 0;  // 1-based
  double loss = 0, lr = 0, grad_norm = 0, step_s = 0, tokens_per_s = 0, tflops = 0;
  double mem_gib = 0;  // peak memory so far (CPU: process RSS; CUDA: trainbench's device allocations)
};

struct OpShare {  // GPU time of one op kind in the profiled step (bench/op_profile.h)
  std::string op;
  double seconds = 0;
  int calls = 0;
};

struct TrainResult {
  model::ModelConfig model;
  std::vector<StepStats> steps;
  Summary step_s;  // over the measured steps
  // Tokens per step (global batch x seq, padding included); the targets the loss counts (every one, unless the data
  // has a loss mask: packed data counts the answers; the mean over the steps); model FLOPs per step (packed data: from
  // its documents, model/flops.h packed_flops, the mean over the measured steps).
  double tokens_per_step = 0, loss_tokens_per_step = 0, flops_per_step = 0;
  std::string flop_tokens = "rows";     // what flops_per_step counts: "rows" (every token of the rows, s^2 attention
                                        // per row) or "documents" (packed: each document at its own length)
  double tokens_per_s = 0, tflops = 0;  // from the median step time
  double loss_floor = 0;                // the synthetic task's (0: unknown, e.g. a token file)
  std::int64_t params = 0;
  double optimizer_s = 0;               // per step: grad norm + clipping + AdamW (CPU: host clock median; CUDA: the
                                        // profiled step's, 0 without op_profile)
  bool interrupted = false;             // stopped by Ctrl-C / SIGTERM (core/interrupt.h): steps holds what finished
  // CUDA backend:
  std::string device_name;
  std::string graph = "off";             // "captured", "off", or why capture failed
  int gemm_plans = 0, gemm_retuned = 0;  // GEMM shapes planned; how many autotuning moved off the heuristic's pick
  Summary gpu_step_s;                    // CUDA-event time of the measured steps
  MemoryEstimate estimate;
  double peak_alloc_bytes = 0;           // trainbench's own device allocations, high-water mark
  bool grads_shared = false;             // the gradients shared the activations' memory (MemorySpec::grad_buffer)
  std::string fp8_weight_cast;           // FP8: who made the linear layers' FP8 weight copies: "adamw" or "separate"
  double device_used_bytes = 0;          // cudaMemGetInfo used after the first step (context and libraries included)
  std::optional<bench::TelemetrySummary> telemetry;  // NVML over the measured steps: power, energy, clocks, limits
  double energy_j_per_token = 0;                     // from it, per GPU (0: no telemetry)
  std::vector<OpShare> ops;              // breakdown of one eager step; empty without op_profile
  int gpu = 0;                           // the CUDA device this rank ran on
  int gpus = 1;                          // ranks of the job (data parallel); tokens_per_s is the job's, tflops per GPU
  int buckets = 0;                       // data parallel: gradient buckets reduce-scattered per step
  // Mixture of Experts: what this rank's MoE layers routed over the measured steps' `moe_forwards` micro-batches
  model::MoeStats moe;
  int moe_forwards = 0;
};

// A step's model FLOPs: tokens x flops_per_token for unpacked rows, packed_flops of the documents for packed ones.
double step_flops(const model::ModelConfig& m, model::FlopConvention conv, const StepTokens& t);

// The LR schedule of a run: optimizer.lr, or 3e-3 for models under 100M parameters (tiny, small: they learn their task
// in a few hundred steps) and 3e-4 above (stable for the large presets' short benchmark runs); min_lr:
// optimizer.min_lr, or lr / 10; warmup min(lr_warmup, steps) steps, cosine to the last step.
LrSchedule lr_schedule(const TrainSpec& spec, const model::ModelConfig& m);

// Checkpoints of a one-rank run (train/checkpoint.h): what the run is (its model, data, seed, global batch and
// adapters), its first step (1, or after the --resume file's step; the file's state is then in `state`, the data
// stream to skip (first - 1) x global rows) and the step after which --save writes (0: none).
struct CheckpointPlan {
  CheckpointInfo info;
  int first = 1, save_step = 0;
  bool save_after(int step) const { return save_step > 0 && step == save_step; }
};
CheckpointPlan plan_checkpoints(const TrainSpec& spec, const model::ModelConfig& m, int global,
                                const TrainState& state);

// A mix with tensor or pipeline parallel: the CUDA backend builds one NCCL communicator per mesh group and none
// over the world (data and context parallel, alone or together, use the world's).
bool is_group_mix(const parallel::MeshShape& s);
// --share-gpus with more ranks than `gpus`: "" when the layout can share them (a group mix whose one-coordinate groups
// each fit on distinct GPUs, parallel::shared_gpu_problems), else the whole message of why not.
std::string share_gpus_problem(const parallel::MeshShape& s, int gpus);

// Trains on the CPU backend; on_step is called after every step (log lines, records). Under an MPI launcher with
// several ranks, or with a parallel layout (tp, pp, vp, cp), it runs train_cpu_parallel (train/trainer_cpu_parallel.cpp).
TrainResult train_cpu(const TrainSpec& spec, const std::function<void(const StepStats&)>& on_step);
TrainResult train_cpu_parallel(const TrainSpec& spec, const std::function<void(const StepStats&)>& on_step);

// The CUDA backend's memory needs for this spec; fit_advice() is "" when it fits in `free_bytes`, else a message
// with the estimate and the knobs that would make it fit (recompute, micro-batch, layers, moments).
MemoryEstimate estimate_memory(const TrainSpec& spec, const model::ModelConfig& m);
std::string fit_advice(const TrainSpec& spec, const model::ModelConfig& m, double free_bytes);

// Trains on one GPU (run.gpu). Raises Error{config} before allocating when the model does not fit.
TrainResult train_cuda(const TrainSpec& spec, const std::function<void(const StepStats&)>& on_step);

using parallel::decays;  // whether AdamW decays a parameter (not norm gains and biases)

}  // namespace tb::train
