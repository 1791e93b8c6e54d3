// train/spec.cpp: a TrainSpec's derived sizes, its model, and the checks of what its options cannot do together
// (train/spec.h).
#include "train/spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "core/error.h"
#include "model/param_layout.h"

namespace tb::train {

void raise_bad_choice(std::string_view what, std::string_view text, const std::string& expected) {
  raise_config(fmt::format("{} '{}': expected {}", what, text, expected));
}

namespace {

// Splits "a,b,c" and checks each item is one of `names`, once; returns a mask over names.
template <std::size_t N>
std::array<bool, N> parse_set(std::string_view text, const std::array<std::string_view, N>& names,
                              std::string_view what) {
  std::array<bool, N> given{};
  std::string expected;
  for (std::size_t i = 0; i < N; ++i) {
    if (i > 0) expected += ", ";
    expected += names[i];
  }
  TB_REQUIRE(!text.empty() && text.back() != ',',
             fmt::format("{} takes {}, comma-separated; it has an empty item", what, expected));
  for (std::size_t at = 0; at <= text.size();) {
    const std::size_t end = std::min(text.find(',', at), text.size());
    const std::string_view item = text.substr(at, end - at);
    const auto it = std::find(names.begin(), names.end(), item);
    TB_REQUIRE(it != names.end(),
               fmt::format("{} takes {}, comma-separated; '{}' is none of them", what, expected, item));
    TB_REQUIRE(!given[std::size_t(it - names.begin())], fmt::format("{} names '{}' twice", what, item));
    given[std::size_t(it - names.begin())] = true;
    at = end + 1;
  }
  return given;
}

constexpr std::array<std::string_view, 3> kHeadGemmNames = {"forward", "dgrad", "wgrad"};
constexpr std::array<std::string_view, 2> kEmulationNames = {"qkv", "o"};

}  // namespace

HeadGemms parse_head_gemms(std::string_view text) {
  const auto g = parse_set(text, kHeadGemmNames, "--debug-fp8-lm-head-gemms");
  return {g[0], g[1], g[2]};
}

std::string head_gemm_names(const HeadGemms& g) {
  std::string out;
  for (const auto& [on, name] : {std::pair{g.forward, kHeadGemmNames[0]}, std::pair{g.dgrad, kHeadGemmNames[1]},
                                 std::pair{g.wgrad, kHeadGemmNames[2]}})
    if (on) {
      if (!out.empty()) out += ',';
      out += name;
    }
  return out;
}

AttentionEmulation parse_attention_emulation(std::string_view text) {
  const auto e = parse_set(text, kEmulationNames, "--debug-fp8-attention-emulate");
  return {e[0], e[1]};
}

std::string attention_emulation_name(const AttentionEmulation& e) {
  return e.qkv && e.o ? "qkv,o" : e.qkv ? "qkv" : e.o ? "o" : "";
}

parallel::MeshShape mesh_shape(const TrainSpec& spec, int world) {
  const ParallelSpec& p = spec.parallel;
  const int model_ranks = std::max(1, p.tp * p.pp * p.cp);
  return {.dp = std::max(1, world / model_ranks),
          .cp = p.cp,
          .pp = p.pp,
          .tp = p.tp,
          .vp = p.vp,
          .sequence_parallel = p.tp > 1,
          .ep = p.ep};
}

int global_batch(const TrainSpec& spec, int dp) {
  return spec.batch.global > 0 ? spec.batch.global : spec.batch.micro * dp;
}

int micro_batches_per_rank(const TrainSpec& spec, int dp) { return global_batch(spec, dp) / (spec.batch.micro * dp); }

model::ModelConfig resolve_model(const TrainSpec& spec) {
  model::ModelConfig m = spec.model.config ? *spec.model.config : model::preset(spec.model.preset);
  if (spec.model.layers > 0) m.layers = spec.model.layers;
  if (spec.model.seq > 0) m.seq = spec.model.seq;
  const LoraSpec& l = spec.lora;
  if (l.on())
    m.lora = {*l.rank, l.alpha.value_or(0.0), l.dropout.value_or(0.0), l.targets.value_or(model::kLoraFused),
              spec.run.seed};
  m.validate();
  return m;
}

DType fp8_head_grad_format(const TrainSpec& spec) {
  if (spec.debug.fp8_head_grad) return *spec.debug.fp8_head_grad;
  return spec.precision.fp8.format == Fp8Format::e4m3 ? DType::e4m3 : DType::e5m2;
}

Rounding fp8_head_rounding(const TrainSpec& spec) {
  return spec.debug.fp8_head_rounding.value_or(Rounding::stochastic);
}

namespace {

void validate_fp8(const TrainSpec& spec) {
  const Fp8Spec& f = spec.precision.fp8;
  const DebugSpec& d = spec.debug;
  TB_REQUIRE(!spec.fp8() || spec.cuda(), "--precision fp8 needs --device cuda");
  TB_REQUIRE(f.history >= 1 && f.history <= 1024, "--fp8-history must be in [1, 1024]");
  TB_REQUIRE(f.margin >= 0 && f.margin < 32, "--fp8-margin must be in [0, 32)");
  TB_REQUIRE(!f.lm_head || spec.fp8(), "--fp8-lm-head needs --precision fp8");
  TB_REQUIRE(!d.fp8_head_grad || f.lm_head,
             "--debug-fp8-lm-head-grad sets the FP8 LM head's logit gradients: add --fp8-lm-head (or drop it)");
  TB_REQUIRE(!d.fp8_head_grad || *d.fp8_head_grad == DType::e4m3 || *d.fp8_head_grad == DType::e5m2,
             "--debug-fp8-lm-head-grad must be e4m3 or e5m2");
  TB_REQUIRE(!d.fp8_head_rounding || f.lm_head,
             "--debug-fp8-lm-head-rounding rounds the FP8 LM head's logit gradients: add --fp8-lm-head (or drop it)");
  TB_REQUIRE(d.fp8_head_gemms.all() || f.lm_head,
             "--debug-fp8-lm-head-gemms chooses the FP8 LM head's GEMMs: add --fp8-lm-head (or drop it)");
  TB_REQUIRE(d.fp8_head_gemms.any(), "--debug-fp8-lm-head-gemms names no GEMM: name forward, dgrad or wgrad");
  TB_REQUIRE(d.fp8_grad_rounding == Rounding::nearest || spec.fp8(),
             "--debug-fp8-grad-rounding rounds the FP8 linear layers' gradients: add --precision fp8 (or drop it)");
  TB_REQUIRE(!d.fp8_attention_emulate.on() || (spec.fp8() && !f.attention && spec.parallel.cp == 1 &&
                                               spec.memory.recompute == model::Recompute::none),
             "--debug-fp8-attention-emulate (a diagnostic of BF16 attention) needs --precision fp8 without "
             "--fp8-attention, --cp 1 and --recompute none");
  if (!f.attention) return;  // what cuDNN's FP8 attention (ops/cuda/attention_fp8.h) cannot do, before any GPU work
  TB_REQUIRE(spec.fp8(), "--fp8-attention needs --precision fp8");
  TB_REQUIRE(spec.parallel.cp == 1,
             fmt::format("--fp8-attention does not combine with context parallel (--cp {}): cuDNN's FP8 attention has "
                         "no bottom-right causal mask on Hopper; use --cp 1 or leave --fp8-attention off",
                         spec.parallel.cp));
  TB_REQUIRE(!spec.run.deterministic,
             "--fp8-attention has no deterministic backward (cuDNN's FP8 attention): drop "
             "--deterministic or --fp8-attention");
  const model::ModelConfig m = resolve_model(spec);
  TB_REQUIRE(m.head_dim == 128, fmt::format("--fp8-attention needs head_dim 128 (cuDNN's FP8 attention backward on "
                                            "Hopper takes no other); {} has head_dim {}: leave --fp8-attention off",
                                            m.name, m.head_dim));
}

}  // namespace

namespace {

// LoRA's flags together, and what the CUDA backend does not run with it.
void validate_lora(const TrainSpec& spec) {
  const LoraSpec& l = spec.lora;
  TB_REQUIRE(!l.rank || *l.rank >= 1,
             fmt::format("--lora-rank {}: a LoRA rank must be at least 1 (leave --lora-rank out to train every "
                         "parameter)",
                         l.rank.value_or(0)));
  TB_REQUIRE(l.on() || (!l.alpha && !l.dropout && !l.targets),
             "--lora-alpha, --lora-dropout and --lora-targets set LoRA's adapters: add --lora-rank R");
  TB_REQUIRE(l.on() || !l.freeze_base,
             "--freeze-base freezes the base for LoRA fine-tuning, which it implies; alone it would leave nothing to "
             "train: add --lora-rank R (or drop --freeze-base)");
  TB_REQUIRE(!l.alpha || *l.alpha > 0, fmt::format("--lora-alpha {} must be > 0", l.alpha.value_or(0)));
  if (!l.on() || !spec.cuda()) return;
  TB_REQUIRE(!spec.precision.fp8.attention,
             "--fp8-attention with LoRA: the adapter on attn.out reads the attention output in BF16, which FP8 "
             "attention does not keep; drop --fp8-attention");
}

}  // namespace

void validate(const TrainSpec& spec) {
  const BatchSpec& b = spec.batch;
  const RunSpec& r = spec.run;
  const OptimizerSpec& o = spec.optimizer;
  const ParallelSpec& p = spec.parallel;
  TB_REQUIRE(b.micro > 0, "--micro-batch must be at least 1");
  TB_REQUIRE(p.comm_timeout_s > 0, fmt::format("--comm-timeout must be > 0 seconds, got {}", p.comm_timeout_s));
  const int gb = global_batch(spec, 1);
  TB_REQUIRE(gb % b.micro == 0, fmt::format("--global-batch {} must be a multiple of --micro-batch {} (gradient "
                                            "accumulation is global / micro)",
                                            gb, b.micro));
  TB_REQUIRE(r.steps > 0, "--steps must be at least 1");
  TB_REQUIRE(
      r.warmup_steps >= 0 && r.warmup_steps < r.steps,
      fmt::format("--warmup-steps {} must be below --steps {} (some steps must be measured)", r.warmup_steps, r.steps));
  TB_REQUIRE(o.lr >= 0 && (o.min_lr == -1 || o.min_lr >= 0) && (o.lr == 0 || o.min_lr <= o.lr),
             "--lr must be > 0 and --min-lr in [0, lr]");
  TB_REQUIRE(o.clip >= 0, "--clip must be >= 0 (0 turns clipping off)");
  TB_REQUIRE(o.moments == DType::f32 || o.moments == DType::bf16, "--moments must be f32 or bf16");
  TB_REQUIRE(spec.memory.grads == DType::f32 || spec.memory.grads == DType::bf16, "--grads must be f32 or bf16");
  TB_REQUIRE(spec.memory.grads == DType::f32 || (spec.cuda() && p.dp == 1 && p.tp == 1 && p.pp == 1 && p.cp == 1),
             "--grads bf16 runs on one GPU (--device cuda, dp, tp, pp and cp 1): the CPU backend and the parallel "
             "layouts' gradient reductions are fp32; drop --grads bf16 for them");
  TB_REQUIRE(!r.autotune || spec.cuda(), "--autotune tunes cuBLASLt's GEMMs: it needs --device cuda");
  TB_REQUIRE(r.save_step >= 0 && r.save_step <= r.steps && (r.save_step == 0 || !r.save.empty()),
             fmt::format("--save-step {} must be a step of the run (1 to --steps {}) and comes with --save FILE",
                         r.save_step, r.steps));
  TB_REQUIRE((r.save.empty() && r.resume.empty()) || (p.tp * p.pp * p.vp * p.cp * p.ep == 1 && p.dp == 1),
             "--save and --resume: checkpoints are written and read by one-rank runs so far (one GPU or the CPU "
             "backend, no parallel layout)");
  TB_REQUIRE(r.resume.empty() || !spec.cuda() || !spec.fp8(),
             "--resume with --precision fp8: the FP8 scaling history is not in a checkpoint yet, so the resumed run "
             "would not continue the same losses; resume a bf16 run (--save works with fp8)");
  TB_REQUIRE(p.ep >= 1 && (p.ep == 1 || !spec.cuda()),
             fmt::format("--ep {}: expert parallel runs on the CPU backend only so far (--device cpu)", p.ep));
  validate_fp8(spec);
  validate_lora(spec);
  TB_REQUIRE(r.gpu >= 0, "--gpu must be a device index >= 0");
  if (!spec.cuda()) return;
  const model::ModelConfig m = resolve_model(spec);
  if (m.moe.enabled()) {  // what the CUDA MoE layer (model/moe_mlp_cuda.h) does not run yet
    const std::string who = fmt::format("model '{}' (Mixture of Experts) on --device cuda", m.name);
    TB_REQUIRE(p.tp == 1 && p.cp == 1,
               who +
                   ": runs with --tp 1 and --cp 1 so far (data and pipeline parallel work; expert and tensor "
                   "parallelism for MoE layers on CUDA are not built yet; --device cpu runs every layout)");
    TB_REQUIRE(r.graph != Switch::on || !spec.fp8(),
               who + ": FP8 experts read their token counts on the host (one stream sync per layer), which a CUDA "
                     "graph cannot capture: drop --graph on");
  }
  if (m.is_mla()) {  // what the CUDA MLA layer (model/attention_mla_cuda.h) does not run yet
    const std::string who = fmt::format("model '{}' (multi-head latent attention) on --device cuda", m.name);
    TB_REQUIRE(p.tp == 1 && p.cp == 1,
               who + ": runs with --tp 1 and --cp 1 so far (data and pipeline parallel work; tensor and context "
                     "parallelism for MLA layers on CUDA are not built yet; --device cpu runs every layout)");
    TB_REQUIRE(!spec.fp8(), who + ": runs in BF16 only so far (FP8 MLA is not built): drop --precision fp8");
  }
  if (p.tp == 1) {  // (tensor-parallel shards: each rank's decoder checks its own)
    const std::string problem = model::cuda_layout_problem(m, model::dense_layout(m));
    TB_REQUIRE(problem.empty(), fmt::format("model '{}' on --device cuda: {}", m.name, problem));
  }
}

void validate_on(const TrainSpec& spec, int world) {
  validate(spec);
  const model::ModelConfig m = resolve_model(spec);
  const parallel::MeshShape planned = mesh_shape(spec, world);
  parallel::validate_layout(planned, m, world, spec.batch.micro, global_batch(spec, planned.dp));
}

}  // namespace tb::train
