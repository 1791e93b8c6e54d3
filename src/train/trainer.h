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
#include "model/param_layout.h"
#include "parallel/mesh.h"
#include "parallel/trainer_cpu.h"
#include "train/schedule.h"

namespace tb::train {

struct TrainSpec {
  std::string model = "tiny";         // a preset of model/config.h
  std::optional<model::ModelConfig> model_config;  // instead of the preset (a recipe's shard); layers/seq still apply
  int layers = 0, seq = 0;            // 0: the preset's
  int micro_batch = 1;                // sequences per micro-batch
  int global_batch = 0;               // sequences per optimizer step; 0: micro_batch (no accumulation)
  int steps = 30;                     // optimizer steps
  int warmup_steps = 3;               // not measured
  std::string device = "cuda";        // cuda | cpu
  std::string data = "markov";        // markov | copy | random (synthetic) or the path of a token file
  std::string token_type = "uint16";  // token file element: uint16 | uint32
  double lr = 0, min_lr = -1;         // peak and final learning rate (linear warmup, cosine decay); 0 and -1: the
                                      // defaults, lr_schedule() below
  int lr_warmup = 10;
  double weight_decay = 0.1, clip = 1.0, beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  std::uint64_t seed = 1234;
  model::FlopConvention convention = model::FlopConvention::full;
  // CUDA backend only:
  int gpu = 0;                        // device index (one process); with several ranks: the node-local rank
  int dp = 1;                         // data-parallel ranks (ZeRO-1): world / (tp·pp·cp) (comm/mpi_comm.h world())
  int tp = 1, pp = 1, vp = 1, cp = 1; // tensor (with sequence parallel), pipeline, virtual stages, context parallel
  bool job_ranks = false;             // train across the job's MPI ranks (train --gpus / mpirun); false: this
                                      // process alone, whatever the launcher (the recipe runner's per-rank proxies)
  bool share_gpus = false;            // more ranks than GPUs (testing a layout on a smaller node; times meaningless):
                                      // GPU = (dp + cp + pp + tp) mod the node's GPUs, each group on distinct GPUs
  std::string recompute = "none";     // none | selective | full (model/decoder_cuda.h)
  std::string moments = "f32";        // AdamW moments: f32 | bf16
  std::string grads = "f32";          // weight gradients: f32 | bf16 (the GEMMs write them in bf16 and the optimizer
                                      // reads bf16, as a bf16-state PyTorch run; one GPU only)
  std::string master = "split";       // fp32 master weights as split (bf16 model weight + 16-bit residual: exact,
                                      // ops/cuda/master_split.h) or f32 (a separate fp32 copy)
  std::string grad_buffer = "shared"; // shared: the weight gradients take the bytes of activations already used
                                      // (model/grad_sharing.h) where the step allows it (one micro-batch per
                                      // rank, no pipeline or context parallel); separate: their own buffer. The
                                      // same numbers either way.
  std::string graph = "auto";         // capture the step as a CUDA graph: on | off | auto (on, except with tensor
                                      // parallel: measured on 2 H200s, 70B L4 tp 2, the captured step was 232 ms and
                                      // eager launches 227 ms, so auto runs tp eagerly)
  bool autotune = false;              // time the cuBLASLt candidates of every GEMM shape after step 1 (measured on
                                      // an H200: isolated timings on random operands chose algorithms 3% slower in
                                      // the model, so the heuristic's first choice is the default)
  bool op_profile = true;             // one extra eager step with events between ops (the breakdown by op)
  bool deterministic = false;         // deterministic attention backward: bitwise repeatable losses (slower)
  double comm_timeout_s = 600;        // several GPUs: a step whose NCCL work has not finished by then aborts the job
  int debug_delay_rank = -1;          // this launcher rank sleeps debug_delay_ms in every step (straggler tests)
  double debug_delay_ms = 0;
  std::string precision = "bf16";     // bf16 | fp8 (the linear layers' GEMMs, model/decoder_cuda.h Fp8Options)
  std::string fp8_recipe = "current"; // current | delayed
  std::string fp8_format = "hybrid";  // hybrid (E4M3 forward, E5M2 gradients) | e4m3 (all-E4M3)
  int fp8_history = 16;               // delayed: amax history length
  std::string fp8_amax = "max";       // delayed: max | most_recent
  int fp8_margin = 0;                 // scale = fp8_max / amax / 2^margin
  bool fp8_reduce_amax = true;        // delayed, several ranks: amaxes maxed over the ranks holding the same layers
  bool fp8_lm_head = false;           // the LM head's GEMMs in FP8 too (current scaling; off: BF16, as TE and NeMo)
  std::string fp8_lm_head_grad;       // its logit gradients: e4m3 | e5m2 | empty: as fp8_format's gradients
  std::string fp8_lm_head_rounding;   // its logit gradients' rounding: nearest | stochastic | empty: stochastic
  std::string fp8_lm_head_gemms;      // its GEMMs in FP8: comma-separated forward, dgrad, wgrad | empty: all three
                                      // (the others BF16; where FP8 costs the head accuracy, bench/RESULTS.md)
  std::string fp8_grad_rounding = "nearest";  // the linear layers' output gradients' rounding: nearest | stochastic
  std::string fp8_weight_cast = "auto";  // fused: AdamW writes the linear layers' FP8 weight copies in its update
                                      // where it can (delayed scaling without data / context parallel:
                                      // ops/cuda/adamw.h); separate: cast at each step's start (always so otherwise);
                                      // auto: fused with fp32 moments (where it was faster on an H200), else
                                      // separate. The same numbers either way.
  bool fp8_attention = false;         // attention through cuDNN's FP8 SDPA too (Fp8Options::attention): FP8 only;
                                      // head_dim 128, no context parallel, not deterministic (validate())
  std::string fp8_attention_emulate;  // a diagnostic: BF16 attention with its inputs (qkv) and/or output (o) rounded
                                      // to E4M3 and back as FP8 attention stores them: qkv | o | qkv,o | empty: off
};

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
  double tokens_per_step = 0, flops_per_step = 0;
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
  bool grads_shared = false;             // the gradients shared the activations' memory (TrainSpec::grad_buffer)
  std::string fp8_weight_cast;           // FP8: who made the linear layers' FP8 weight copies: "adamw" or "separate"
  double device_used_bytes = 0;          // cudaMemGetInfo used after the first step (context and libraries included)
  std::optional<bench::TelemetrySummary> telemetry;  // NVML over the measured steps: power, energy, clocks, limits
  double energy_j_per_token = 0;                     // from it, per GPU (0: no telemetry)
  std::vector<OpShare> ops;              // breakdown of one eager step; empty without op_profile
  int gpu = 0;                           // the CUDA device this rank ran on
  int gpus = 1;                          // ranks of the job (data parallel); tokens_per_s is the job's, tflops per GPU
  int buckets = 0;                       // data parallel: gradient buckets reduce-scattered per step
};

// The LR schedule of a run: spec.lr, or 3e-3 for models under 100M parameters (tiny, small: they learn their task
// in a few hundred steps) and 3e-4 above (stable for the large presets' short benchmark runs); min_lr: spec.min_lr,
// or lr / 10; warmup min(lr_warmup, steps) steps, cosine to the last step.
LrSchedule lr_schedule(const TrainSpec& spec, const model::ModelConfig& m);

// The layout of a run on `world` ranks: spec's tp, pp, vp, cp, sequence parallel when tp > 1, and data parallel the
// rest, dp = world / (tp·pp·cp) (at least 1; parallel::validate_layout says when it does not divide).
parallel::MeshShape mesh_shape(const TrainSpec& spec, int world);
// Sequences per optimizer step: spec.global_batch, or one micro-batch per data-parallel rank.
int global_batch(const TrainSpec& spec, int dp);
// Micro-batches each rank runs per optimizer step (their gradients accumulate): global_batch / (micro_batch·dp).
int micro_batches_per_rank(const TrainSpec& spec, int dp);
// A mix with tensor or pipeline parallel: the CUDA backend builds one NCCL communicator per mesh group and none
// over the world (data and context parallel, alone or together, use the world's).
bool is_group_mix(const parallel::MeshShape& s);
// --share-gpus with more ranks than `gpus`: "" when the layout can share them (a group mix whose one-coordinate groups
// each fit on distinct GPUs, parallel::shared_gpu_problems), else the whole message of why not.
std::string share_gpus_problem(const parallel::MeshShape& s, int gpus);

// The preset with the spec's overrides, validated; batch sizes checked. Raises Error{config}.
model::ModelConfig resolve_model(const TrainSpec& spec);
void validate(const TrainSpec& spec);

// The FP8 LM head's logit-gradient format: "e4m3" or "e5m2" (fp8_lm_head_grad, else fp8_format's gradients).
std::string fp8_head_grad_format(const TrainSpec& spec);
// The FP8 LM head's logit-gradient rounding: "nearest" or "stochastic" (fp8_lm_head_rounding, else stochastic: at the
// Llama vocabulary it lowered the loss against nearest rounding on every seed, bench/RESULTS.md).
std::string fp8_head_rounding(const TrainSpec& spec);
// The FP8 LM head's GEMMs that run in FP8, in the order forward, dgrad, wgrad (fp8_lm_head_gemms; empty: all three).
// Raises Error{config} for an unknown or repeated name or an empty item.
std::vector<std::string> fp8_head_gemms(const TrainSpec& spec);

// Trains on the CPU backend; on_step is called after every step (log lines, records). Under an MPI launcher with
// several ranks, or with a parallel layout (tp, pp, vp, cp), it runs train_cpu_parallel (train/trainer_cpu_parallel.cpp).
TrainResult train_cpu(const TrainSpec& spec, const std::function<void(const StepStats&)>& on_step);
TrainResult train_cpu_parallel(const TrainSpec& spec, const std::function<void(const StepStats&)>& on_step);

// The CUDA backend's memory needs for this spec; fit_advice() is "" when it fits in `free_bytes`, else a message
// with the estimate and the knobs that would make it fit (recompute, micro-batch, layers, moments).
MemoryEstimate estimate_memory(const TrainSpec& spec, const model::ModelConfig& m);
std::string fit_advice(const TrainSpec& spec, const model::ModelConfig& m, double free_bytes);

// Trains on one GPU (spec.gpu). Raises Error{config} before allocating when the model does not fit.
TrainResult train_cuda(const TrainSpec& spec, const std::function<void(const StepStats&)>& on_step);

using parallel::decays;  // whether AdamW decays a parameter (not norm gains and biases)

}  // namespace tb::train
