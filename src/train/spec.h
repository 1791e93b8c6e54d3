// train/spec.h: what a training run is asked to do, typed once. The command line (cli/cmd_train.cpp) and the recipe
// runner turn names into these enums through the choice tables below (parse_choice); everything after them reads
// enums, never strings. TrainSpec comes in sections: model, lora, batch, run, optimizer, parallel, memory, precision
// and debug (the diagnostic switches: an injected straggler and the FP8 experiments of docs/TRAINING.md).
//   tokens per step = batch.global x seq;  micro-batches per rank and step = batch.global / (batch.micro x dp)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "model/config.h"
#include "model/flops.h"
#include "model/recompute.h"
#include "parallel/mesh.h"
#include "train/data.h"

namespace tb::train {

enum class Device { cuda, cpu };
enum class Precision { bf16, fp8 };  // of the linear layers' GEMMs
// The weights AdamW updates: fp32 master weights as the bf16 weight + a 16-bit residual (exact) or an fp32 copy, or
// the bf16 weights themselves with no master (none: as PyTorch's bf16 parameters, each update rounded to bf16).
enum class Master { split, f32, none };
enum class GradBuffer { shared, separate };
enum class Switch { automatic, on, off };
enum class WeightCast { automatic, fused, separate };
enum class Fp8Recipe { current, delayed };
enum class Fp8Format { hybrid, e4m3 };  // hybrid: E4M3 forward, E5M2 gradients
enum class AmaxRule { max, most_recent };
enum class Rounding { nearest, stochastic };

template <class E>
struct Choice {
  std::string_view name;
  E value;
};

inline constexpr Choice<Device> kDevices[] = {{"cuda", Device::cuda}, {"cpu", Device::cpu}};
inline constexpr Choice<Precision> kPrecisions[] = {{"bf16", Precision::bf16}, {"fp8", Precision::fp8}};
inline constexpr Choice<model::Recompute> kRecomputeModes[] = {
    {"none", model::Recompute::none}, {"selective", model::Recompute::selective}, {"full", model::Recompute::full}};
inline constexpr Choice<DType> kStateTypes[] = {{"f32", DType::f32}, {"bf16", DType::bf16}};  // moments, gradients
inline constexpr Choice<Master> kMasters[] = {{"split", Master::split}, {"f32", Master::f32}, {"none", Master::none}};
inline constexpr Choice<GradBuffer> kGradBuffers[] = {{"shared", GradBuffer::shared},
                                                      {"separate", GradBuffer::separate}};
inline constexpr Choice<Switch> kSwitches[] = {{"auto", Switch::automatic}, {"on", Switch::on}, {"off", Switch::off}};
inline constexpr Choice<WeightCast> kWeightCasts[] = {
    {"auto", WeightCast::automatic}, {"fused", WeightCast::fused}, {"separate", WeightCast::separate}};
inline constexpr Choice<Fp8Recipe> kFp8Recipes[] = {{"current", Fp8Recipe::current}, {"delayed", Fp8Recipe::delayed}};
inline constexpr Choice<Fp8Format> kFp8Formats[] = {{"hybrid", Fp8Format::hybrid}, {"e4m3", Fp8Format::e4m3}};
inline constexpr Choice<AmaxRule> kAmaxRules[] = {{"max", AmaxRule::max}, {"most_recent", AmaxRule::most_recent}};
inline constexpr Choice<Rounding> kRoundings[] = {{"nearest", Rounding::nearest}, {"stochastic", Rounding::stochastic}};
inline constexpr Choice<DType> kFp8Types[] = {{"e4m3", DType::e4m3}, {"e5m2", DType::e5m2}};
inline constexpr Choice<TokenType> kTokenTypes[] = {{"uint16", TokenType::uint16}, {"uint32", TokenType::uint32}};

// The name of `value` in `table` ("?" when absent).
template <class E, std::size_t N>
constexpr std::string_view choice_name(const Choice<E> (&table)[N], E value) {
  for (const auto& c : table)
    if (c.value == value) return c.name;
  return "?";
}
// "a, b or c": the names of a table, for messages.
template <class E, std::size_t N>
std::string choice_list(const Choice<E> (&table)[N]) {
  std::string out;
  for (std::size_t i = 0; i < N; ++i) {
    if (i > 0) out += i + 1 == N ? " or " : ", ";
    out += table[i].name;
  }
  return out;
}
// The value named `text`; Error{config} "<what> 'text': expected a, b or c" otherwise.
[[noreturn]] void raise_bad_choice(std::string_view what, std::string_view text, const std::string& expected);
template <class E, std::size_t N>
E parse_choice(const Choice<E> (&table)[N], std::string_view text, std::string_view what) {
  for (const auto& c : table)
    if (c.name == text) return c.value;
  raise_bad_choice(what, text, choice_list(table));
}
// Each option's value by its name in its table (records, logs, the rank agreement).
constexpr std::string_view name(Device v) { return choice_name(kDevices, v); }
constexpr std::string_view name(Precision v) { return choice_name(kPrecisions, v); }
constexpr std::string_view name(model::Recompute v) { return choice_name(kRecomputeModes, v); }
constexpr std::string_view name(Master v) { return choice_name(kMasters, v); }
constexpr std::string_view name(GradBuffer v) { return choice_name(kGradBuffers, v); }
constexpr std::string_view name(Switch v) { return choice_name(kSwitches, v); }
constexpr std::string_view name(WeightCast v) { return choice_name(kWeightCasts, v); }
constexpr std::string_view name(Fp8Recipe v) { return choice_name(kFp8Recipes, v); }
constexpr std::string_view name(Fp8Format v) { return choice_name(kFp8Formats, v); }
constexpr std::string_view name(AmaxRule v) { return choice_name(kAmaxRules, v); }
constexpr std::string_view name(Rounding v) { return choice_name(kRoundings, v); }
inline std::string_view name(DType v) { return dtype_name(v); }  // moments, gradients, FP8 formats
inline std::string_view name(TokenType v) { return token_type_name(v); }

// Which of the FP8 LM head's GEMMs run in FP8 (the others in BF16).
struct HeadGemms {
  bool forward = true, dgrad = true, wgrad = true;
  bool all() const { return forward && dgrad && wgrad; }
  bool any() const { return forward || dgrad || wgrad; }
  bool operator==(const HeadGemms&) const = default;
};
// "forward,wgrad" -> {forward, wgrad}: comma-separated, each once; Error{config} otherwise.
HeadGemms parse_head_gemms(std::string_view text);
std::string head_gemm_names(const HeadGemms& g);  // "forward,dgrad,wgrad"

// BF16 attention with its inputs and/or output rounded to E4M3 and back as FP8 attention stores them.
struct AttentionEmulation {
  bool qkv = false, o = false;
  bool on() const { return qkv || o; }
};
AttentionEmulation parse_attention_emulation(std::string_view text);  // qkv | o | qkv,o
std::string attention_emulation_name(const AttentionEmulation& e);    // "qkv", "o", "qkv,o" or ""

struct ModelSpec {
  std::string preset = "tiny";               // a preset of model/config.h
  std::optional<model::ModelConfig> config;  // instead of the preset (a recipe's shard); layers/seq still apply
  int layers = 0, seq = 0;                   // 0: the preset's
};

// Fine-tuning with LoRA adapters (model/lora.h), every other parameter frozen. Unset rank: full training.
struct LoraSpec {
  std::optional<int> rank;              // --lora-rank (a rank <= 0 is refused, never read as "off")
  std::optional<double> alpha;          // the scale is alpha / rank; unset: 2 · rank
  std::optional<double> dropout;        // on each adapter's input; unset: 0
  std::optional<unsigned> targets;      // model::LoraTarget bits (model::parse_lora_targets); unset: fused
  bool freeze_base = false;             // --freeze-base: what LoRA implies (alone it would leave nothing to train)
  bool on() const { return rank.has_value(); }
};

struct BatchSpec {
  int micro = 1;   // sequences per micro-batch
  int global = 0;  // sequences per optimizer step; 0: micro x dp (one micro-batch per rank, no accumulation)
};

struct RunSpec {
  int steps = 30;        // optimizer steps
  int warmup_steps = 3;  // not measured
  Device device = Device::cuda;
  int gpu = 0;                               // CUDA device index (one process); with several ranks: the node-local rank
  std::string data = "markov";               // markov | copy | random (synthetic) or the path of a token file
  TokenType token_type = TokenType::uint16;  // a token file's elements
  std::uint64_t seed = 1234;                 // of the initial weights and the data
  // Checkpoints (train/checkpoint.h; one rank: one GPU or the CPU backend): `save` written after step save_step (0: the
  // last), `resume` read before the first step: the run continues from its step.
  std::string save, resume;
  int save_step = 0;
  model::FlopConvention convention = model::FlopConvention::full;
  // CUDA backend:
  Switch graph = Switch::automatic;  // capture the step as a CUDA graph (auto: on, except with tensor parallel:
                                     // measured on 2 H200s, 70B L4 tp 2, the captured step was 232 ms and eager
                                     // launches 227 ms)
  bool autotune = false;       // time the cuBLASLt candidates of every GEMM shape after step 1 (measured on an H200:
                               // isolated timings on random operands chose algorithms 3% slower in the model)
  bool op_profile = true;      // one extra eager step with events between ops (the breakdown by op)
  bool deterministic = false;  // deterministic attention backward: bitwise repeatable losses (slower)
};

struct OptimizerSpec {         // AdamW with linear warmup and cosine decay (train/schedule.h)
  double lr = 0, min_lr = -1;  // peak and final learning rate; 0 and -1: the defaults, lr_schedule() in trainer.h
  int lr_warmup = 10;
  double weight_decay = 0.1, clip = 1.0, beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  DType moments = DType::f32;     // f32 | bf16
  Master master = Master::split;  // CUDA: ops/cuda/master_split.h
};

struct ParallelSpec {                  // CUDA backend, and the CPU backend's layouts under mpirun
  int dp = 1;                          // data-parallel ranks (ZeRO-1): world / (tp·pp·cp) (comm/mpi_comm.h world())
  int tp = 1, pp = 1, vp = 1, cp = 1;  // tensor (with sequence parallel), pipeline, virtual stages, context parallel
  int ep = 1;                          // expert parallel (MoE, CPU backend): a stage's tp·cp·dp ranks as ep x edp
  bool job_ranks = false;              // train across the job's MPI ranks (train --gpus / mpirun); false: this process
                                       // alone, whatever the launcher (the recipe runner's per-rank proxies)
  bool share_gpus = false;             // more ranks than GPUs (testing a layout on a smaller node; times meaningless):
                                       // GPU = (dp + cp + pp + tp) mod the node's GPUs, each group on distinct GPUs
  double comm_timeout_s = 600;         // a step whose collectives have not finished by then aborts the job
};

struct MemorySpec {
  model::Recompute recompute = model::Recompute::none;  // model/recompute.h
  DType grads = DType::f32;  // weight gradients f32 | bf16 (the GEMMs write bf16 and the optimizer reads it, as a
                             // bf16-state PyTorch run; one GPU only)
  GradBuffer grad_buffer = GradBuffer::shared;  // shared: the weight gradients take the bytes of activations already
                                                // used (model/grad_sharing.h) where the step allows it (one
                                                // micro-batch per rank, no pipeline or context parallel); the same
                                                // numbers either way
};

struct Fp8Spec {  // precision.linear == fp8 (model/decoder_cuda.h Fp8Options)
  Fp8Recipe recipe = Fp8Recipe::current;
  Fp8Format format = Fp8Format::hybrid;
  int history = 16;               // delayed: amax history length
  AmaxRule amax = AmaxRule::max;  // delayed
  int margin = 0;                 // scale = fp8_max / amax / 2^margin
  bool reduce_amax = true;        // delayed, several ranks: amaxes maxed over the ranks holding the same layers
  bool lm_head = false;           // the LM head's GEMMs in FP8 too (current scaling; off: BF16, as TE and NeMo)
  bool attention = false;         // cuDNN's FP8 SDPA: head_dim 128, no context parallel, not deterministic
  WeightCast weight_cast =
      WeightCast::automatic;  // fused: AdamW writes the FP8 weight copies in its update where
                              // it can (delayed scaling without data / context parallel: ops/cuda/adamw.h);
                              // separate: a cast at each step's start; auto: fused with fp32 moments (where
                              // it was faster on an H200). The same numbers either way.
};

struct PrecisionSpec {
  Precision linear = Precision::bf16;  // the linear layers' GEMMs
  Fp8Spec fp8;
};

struct DebugSpec {      // diagnostics: not for measurements
  int delay_rank = -1;  // this launcher rank sleeps delay_ms in every step (an injected straggler)
  double delay_ms = 0;
  AttentionEmulation fp8_attention_emulate;        // where FP8 attention costs accuracy
  Rounding fp8_grad_rounding = Rounding::nearest;  // the linear layers' output gradients' rounding to FP8
  std::optional<DType> fp8_head_grad;              // the FP8 LM head's logit gradients: e4m3 | e5m2 (empty: as format)
  std::optional<Rounding> fp8_head_rounding;       // their rounding (empty: stochastic)
  HeadGemms fp8_head_gemms;                        // which of its GEMMs run in FP8
};

struct TrainSpec {
  ModelSpec model;
  LoraSpec lora;
  BatchSpec batch;
  RunSpec run;
  OptimizerSpec optimizer;
  ParallelSpec parallel;
  MemorySpec memory;
  PrecisionSpec precision;
  DebugSpec debug;

  bool cuda() const { return run.device == Device::cuda; }
  bool fp8() const { return precision.linear == Precision::fp8; }
};

// The layout of a run on `world` ranks: tp, pp, vp, cp, sequence parallel when tp > 1, and data parallel the rest,
// dp = world / (tp·pp·cp) (at least 1; parallel::validate_layout says when it does not divide).
parallel::MeshShape mesh_shape(const TrainSpec& spec, int world);
// Sequences per optimizer step: batch.global, or one micro-batch per data-parallel rank.
int global_batch(const TrainSpec& spec, int dp);
// Micro-batches each rank runs per optimizer step (their gradients accumulate): global_batch / (micro·dp).
int micro_batches_per_rank(const TrainSpec& spec, int dp);

// The preset with the spec's overrides and its LoRA (seeded by run.seed), validated; batch sizes checked. Raises
// Error{config}.
model::ModelConfig resolve_model(const TrainSpec& spec);
// What the options cannot do together, before any work. Raises Error{config} with the flags to change.
void validate(const TrainSpec& spec);
// validate(spec), the model resolved, and the layout checked against it on `world` ranks (parallel::validate_layout):
// every problem before any rank starts.
void validate_on(const TrainSpec& spec, int world);

// The FP8 LM head's logit-gradient format: debug.fp8_head_grad, else the format's gradients (E5M2 in hybrid).
DType fp8_head_grad_format(const TrainSpec& spec);
// Its rounding: debug.fp8_head_rounding, else stochastic (at the Llama vocabulary it lowered the loss against nearest
// rounding on every seed, bench/RESULTS.md).
Rounding fp8_head_rounding(const TrainSpec& spec);

}  // namespace tb::train
