// train/trainer.cpp: resolve the model, then the loop of trainer.h on the CPU backend.
#include "train/trainer.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <memory>
#include <sstream>

#include "comm/mpi_comm.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/provenance.h"
#include "model/decoder_cpu.h"
#include "ops/cpu/adamw.h"
#include "train/data.h"
#include "train/schedule.h"

namespace tb::train {
namespace {

std::vector<std::uint8_t> decay_mask(std::span<const model::Slot> slots, std::size_t n) {
  std::vector<std::uint8_t> mask(n, 1);
  for (const auto& s : slots)
    if (!decays(s)) std::fill(mask.begin() + std::ptrdiff_t(s.offset), mask.begin() + std::ptrdiff_t(s.offset + s.size), 0);
  return mask;
}

}  // namespace

parallel::MeshShape mesh_shape(const TrainSpec& spec, int world) {
  const int model_ranks = std::max(1, spec.tp * spec.pp * spec.cp);
  return {.dp = std::max(1, world / model_ranks), .cp = spec.cp, .pp = spec.pp, .tp = spec.tp, .vp = spec.vp,
          .sequence_parallel = spec.tp > 1};
}

int global_batch(const TrainSpec& spec, int dp) {
  return spec.global_batch > 0 ? spec.global_batch : spec.micro_batch * dp;
}

int micro_batches_per_rank(const TrainSpec& spec, int dp) {
  return global_batch(spec, dp) / (spec.micro_batch * dp);
}

bool is_group_mix(const parallel::MeshShape& s) {
  return (s.dp > 1) + (s.cp > 1) + (s.tp > 1) + (s.pp > 1) >= 2 && (s.tp > 1 || s.pp > 1);
}

std::string share_gpus_problem(const parallel::MeshShape& s, int gpus) {
  const bool mix = is_group_mix(s);
  const std::string problems = mix ? parallel::shared_gpu_problems(s, gpus) : "not a mix with tp or pp";
  if (problems.empty()) return "";
  return fmt::format("--share-gpus: {} ranks of layout {} cannot share this node's {} GPU{}: {} (a mix with tp or pp "
                     "whose groups each fit on distinct GPUs, as NCCL needs; without --share-gpus: one rank per GPU)",
                     s.world(), s.str(), gpus, gpus == 1 ? "" : "s", problems);
}

void validate(const TrainSpec& spec) {
  TB_REQUIRE(spec.micro_batch > 0, "--micro-batch must be at least 1");
  TB_REQUIRE(spec.comm_timeout_s > 0, fmt::format("--comm-timeout must be > 0 seconds, got {}", spec.comm_timeout_s));
  const int gb = global_batch(spec, 1);
  TB_REQUIRE(gb % spec.micro_batch == 0,
             fmt::format("--global-batch {} must be a multiple of --micro-batch {} (gradient accumulation is "
                         "global / micro)",
                         gb, spec.micro_batch));
  TB_REQUIRE(spec.steps > 0, "--steps must be at least 1");
  TB_REQUIRE(spec.graph == "on" || spec.graph == "off" || spec.graph == "auto",
             fmt::format("--graph {}: expected on, off or auto", spec.graph));
  TB_REQUIRE(spec.warmup_steps >= 0 && spec.warmup_steps < spec.steps,
             fmt::format("--warmup-steps {} must be below --steps {} (some steps must be measured)", spec.warmup_steps,
                         spec.steps));
  TB_REQUIRE(spec.device == "cpu" || spec.device == "cuda",
             fmt::format("--device must be cpu or cuda, not '{}'", spec.device));
  TB_REQUIRE(spec.lr >= 0 && (spec.min_lr == -1 || spec.min_lr >= 0) && (spec.lr == 0 || spec.min_lr <= spec.lr),
             "--lr must be > 0 and --min-lr in [0, lr]");
  TB_REQUIRE(spec.clip >= 0, "--clip must be >= 0 (0 turns clipping off)");
  TB_REQUIRE(spec.recompute == "none" || spec.recompute == "selective" || spec.recompute == "full",
             fmt::format("--recompute must be none, selective or full, not '{}'", spec.recompute));
  TB_REQUIRE(spec.moments == "f32" || spec.moments == "bf16",
             fmt::format("--moments must be f32 or bf16, not '{}'", spec.moments));
  TB_REQUIRE(spec.grads == "f32" || spec.grads == "bf16",
             fmt::format("--grads must be f32 or bf16, not '{}'", spec.grads));
  TB_REQUIRE(spec.grads == "f32" || (spec.device == "cuda" && spec.dp == 1 && spec.tp == 1 && spec.pp == 1 &&
                                     spec.cp == 1),
             "--grads bf16 runs on one GPU (--device cuda, dp, tp, pp and cp 1): the CPU backend and the parallel "
             "layouts' gradient reductions are fp32; drop --grads bf16 for them");
  TB_REQUIRE(spec.master == "split" || spec.master == "f32",
             fmt::format("--master must be split or f32, not '{}'", spec.master));
  TB_REQUIRE(spec.grad_buffer == "shared" || spec.grad_buffer == "separate",
             fmt::format("--grad-buffer must be shared or separate, not '{}'", spec.grad_buffer));
  TB_REQUIRE(spec.fp8_weight_cast == "auto" || spec.fp8_weight_cast == "fused" || spec.fp8_weight_cast == "separate",
             fmt::format("--fp8-weight-cast must be auto, fused or separate, not '{}'", spec.fp8_weight_cast));
  TB_REQUIRE(spec.precision == "bf16" || spec.precision == "fp8",
             fmt::format("--precision must be bf16 or fp8, not '{}'", spec.precision));
  TB_REQUIRE(spec.precision == "bf16" || spec.device == "cuda", "--precision fp8 needs --device cuda");
  TB_REQUIRE(!spec.autotune || spec.device == "cuda", "--autotune tunes cuBLASLt's GEMMs: it needs --device cuda");
  TB_REQUIRE(spec.fp8_recipe == "current" || spec.fp8_recipe == "delayed",
             fmt::format("--fp8-recipe must be current or delayed, not '{}'", spec.fp8_recipe));
  TB_REQUIRE(spec.fp8_format == "hybrid" || spec.fp8_format == "e4m3",
             fmt::format("--fp8-format must be hybrid or e4m3, not '{}'", spec.fp8_format));
  TB_REQUIRE(spec.fp8_amax == "max" || spec.fp8_amax == "most_recent",
             fmt::format("--fp8-amax must be max or most_recent, not '{}'", spec.fp8_amax));
  TB_REQUIRE(spec.fp8_history >= 1 && spec.fp8_history <= 1024, "--fp8-history must be in [1, 1024]");
  TB_REQUIRE(spec.fp8_margin >= 0 && spec.fp8_margin < 32, "--fp8-margin must be in [0, 32)");
  TB_REQUIRE(!spec.fp8_lm_head || spec.precision == "fp8", "--fp8-lm-head needs --precision fp8");
  TB_REQUIRE(spec.fp8_lm_head_grad.empty() || spec.fp8_lm_head_grad == "e4m3" || spec.fp8_lm_head_grad == "e5m2",
             fmt::format("--fp8-lm-head-grad must be e4m3 or e5m2, not '{}'", spec.fp8_lm_head_grad));
  TB_REQUIRE(spec.fp8_lm_head_grad.empty() || spec.fp8_lm_head,
             "--fp8-lm-head-grad sets the FP8 LM head's logit gradients: add --fp8-lm-head (or drop it)");
  TB_REQUIRE(spec.fp8_lm_head_rounding.empty() || spec.fp8_lm_head_rounding == "nearest" ||
                 spec.fp8_lm_head_rounding == "stochastic",
             fmt::format("--fp8-lm-head-rounding must be nearest or stochastic, not '{}'", spec.fp8_lm_head_rounding));
  TB_REQUIRE(spec.fp8_lm_head_rounding.empty() || spec.fp8_lm_head,
             "--fp8-lm-head-rounding rounds the FP8 LM head's logit gradients: add --fp8-lm-head (or drop it)");
  TB_REQUIRE(spec.fp8_grad_rounding == "nearest" || spec.fp8_grad_rounding == "stochastic",
             fmt::format("--fp8-grad-rounding must be nearest or stochastic, not '{}'", spec.fp8_grad_rounding));
  TB_REQUIRE(spec.fp8_grad_rounding == "nearest" || spec.precision == "fp8",
             "--fp8-grad-rounding rounds the FP8 linear layers' gradients: add --precision fp8 (or drop it)");
  fp8_head_gemms(spec);  // (its own message for a bad list)
  TB_REQUIRE(spec.fp8_lm_head_gemms.empty() || spec.fp8_lm_head,
             "--fp8-lm-head-gemms chooses the FP8 LM head's GEMMs: add --fp8-lm-head (or drop it)");
  TB_REQUIRE(spec.fp8_attention_emulate.empty() || spec.fp8_attention_emulate == "qkv" ||
                 spec.fp8_attention_emulate == "o" || spec.fp8_attention_emulate == "qkv,o",
             fmt::format("--fp8-attention-emulate takes qkv, o or qkv,o, not '{}'", spec.fp8_attention_emulate));
  TB_REQUIRE(spec.fp8_attention_emulate.empty() ||
                 (spec.precision == "fp8" && !spec.fp8_attention && spec.cp == 1 && spec.recompute == "none"),
             "--fp8-attention-emulate (a diagnostic of BF16 attention) needs --precision fp8 without --fp8-attention, "
             "--cp 1 and --recompute none");
  if (spec.fp8_attention) {  // what cuDNN's FP8 attention (ops/cuda/attention_fp8.h) cannot do, before any GPU work
    TB_REQUIRE(spec.precision == "fp8", "--fp8-attention needs --precision fp8");
    TB_REQUIRE(spec.cp == 1, fmt::format("--fp8-attention does not combine with context parallel (--cp {}): cuDNN's "
                                         "FP8 attention has no bottom-right causal mask on Hopper; use --cp 1 or leave "
                                         "--fp8-attention off",
                                         spec.cp));
    TB_REQUIRE(!spec.deterministic, "--fp8-attention has no deterministic backward (cuDNN's FP8 attention): drop "
                                    "--deterministic or --fp8-attention");
    const model::ModelConfig m = resolve_model(spec);
    TB_REQUIRE(m.head_dim == 128, fmt::format("--fp8-attention needs head_dim 128 (cuDNN's FP8 attention backward on "
                                              "Hopper takes no other); {} has head_dim {}: leave --fp8-attention off",
                                              m.name, m.head_dim));
  }
  TB_REQUIRE(spec.gpu >= 0, "--gpu must be a device index >= 0");
  if (spec.device == "cuda" && spec.tp == 1) {  // (tensor-parallel shards: each rank's decoder checks its own)
    const model::ModelConfig m = resolve_model(spec);
    const std::string problem = model::cuda_layout_problem(m, model::dense_layout(m));
    TB_REQUIRE(problem.empty(), fmt::format("model '{}' on --device cuda: {}", m.name, problem));
  }
}

std::string fp8_head_grad_format(const TrainSpec& spec) {
  if (!spec.fp8_lm_head_grad.empty()) return spec.fp8_lm_head_grad;
  return spec.fp8_format == "e4m3" ? "e4m3" : "e5m2";
}

std::string fp8_head_rounding(const TrainSpec& spec) {
  return spec.fp8_lm_head_rounding.empty() ? "stochastic" : spec.fp8_lm_head_rounding;
}

std::vector<std::string> fp8_head_gemms(const TrainSpec& spec) {
  static const std::vector<std::string> kAll = {"forward", "dgrad", "wgrad"};
  if (spec.fp8_lm_head_gemms.empty()) return kAll;
  std::vector<std::string> given;
  std::stringstream in(spec.fp8_lm_head_gemms);
  for (std::string item; std::getline(in, item, ',');) {
    TB_REQUIRE(std::find(kAll.begin(), kAll.end(), item) != kAll.end(),
               fmt::format("--fp8-lm-head-gemms takes forward, dgrad and wgrad, comma-separated; '{}' is none of them",
                           item));
    TB_REQUIRE(std::find(given.begin(), given.end(), item) == given.end(),
               fmt::format("--fp8-lm-head-gemms names '{}' twice", item));
    given.push_back(item);
  }
  TB_REQUIRE(spec.fp8_lm_head_gemms.back() != ',',
             "--fp8-lm-head-gemms takes forward, dgrad and wgrad, comma-separated; it ends with an empty item");
  std::vector<std::string> out;  // in the head's order
  for (const auto& g : kAll)
    if (std::find(given.begin(), given.end(), g) != given.end()) out.push_back(g);
  return out;
}

std::string MemoryEstimate::parts_gib() const {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  return fmt::format("weights {:.2f} + gradients {:.2f} + master {:.2f} + moments {:.2f} + activations {:.2f}{} + "
                     "workspaces {:.2f} GiB",
                     weights / kGiB, grads / kGiB, master / kGiB, moments / kGiB, activations / kGiB,
                     fp8_weights > 0 ? fmt::format(" + FP8 copies {:.2f}", fp8_weights / kGiB) : "",
                     workspaces / kGiB);
}

LrSchedule lr_schedule(const TrainSpec& spec, const model::ModelConfig& m) {
  const double lr = spec.lr > 0 ? spec.lr : model::param_count(m) < 100'000'000 ? 3e-3 : 3e-4;
  return LrSchedule{lr, spec.min_lr >= 0 ? spec.min_lr : lr / 10, std::min(spec.lr_warmup, spec.steps), spec.steps};
}

model::ModelConfig resolve_model(const TrainSpec& spec) {
  model::ModelConfig m = spec.model_config ? *spec.model_config : model::preset(spec.model);
  if (spec.layers > 0) m.layers = spec.layers;
  if (spec.seq > 0) m.seq = spec.seq;
  m.validate();
  return m;
}

TrainResult train_cpu(const TrainSpec& spec, const std::function<void(const StepStats&)>& on_step) {
  if ((spec.job_ranks && comm::world().size > 1) || spec.tp * spec.pp * spec.vp * spec.cp > 1)
    return train_cpu_parallel(spec, on_step);
  validate(spec);
  TrainResult res;
  res.model = resolve_model(spec);
  const auto& m = res.model;
  const int global = global_batch(spec, 1);
  const int accum = global / spec.micro_batch;
  res.params = model::param_count(m);
  res.tokens_per_step = double(global) * m.seq;
  res.flops_per_step = res.tokens_per_step * model::flops_per_token(m, spec.convention).total();

  model::CpuDecoder<float> net(m, spec.seed);
  DataSource source(spec.data, spec.token_type, m.vocab, m.seq, spec.seed);
  res.loss_floor = source.loss_floor();
  const auto params = net.params();
  std::vector<float> adam_m(params.size(), 0.f), adam_v(params.size(), 0.f);
  const auto mask = decay_mask(net.layout(), params.size());
  const LrSchedule schedule = lr_schedule(spec, m);
  ops::cpu::AdamWParams hp;
  hp.beta1 = spec.beta1, hp.beta2 = spec.beta2, hp.eps = spec.eps, hp.weight_decay = spec.weight_decay;

  std::vector<double> measured, measured_opt;
  const bool delay = spec.debug_delay_rank >= 0 && launch_rank().rank == spec.debug_delay_rank &&
                     spec.debug_delay_ms > 0;  // an injected straggler
  for (int step = 1; step <= spec.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    if (delay) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(spec.debug_delay_ms));
    net.zero_grads();
    double loss = 0;
    for (int a = 0; a < accum; ++a) {
      const Batch b = source.next(spec.micro_batch);
      loss += net.forward_backward(b.tokens, b.targets, b.batch, b.seq, 1.0 / accum) / accum;
    }
    StepStats st;
    st.step = step;
    st.loss = loss;
    const auto t_opt = std::chrono::steady_clock::now();
    st.grad_norm = spec.clip > 0 ? ops::cpu::clip_grad_norm(net.grads(), spec.clip) : ops::cpu::grad_norm(net.grads());
    TB_REQUIRE(std::isfinite(st.grad_norm), fmt::format("step {}: the gradient norm is not finite (loss {}): lower "
                                                        "--lr or raise --clip",
                                                        step, loss));
    st.lr = schedule.lr(step - 1);
    hp.lr = st.lr;
    ops::cpu::adamw_step(params, net.grads(), adam_m, adam_v, hp, step, mask);
    const auto t1 = std::chrono::steady_clock::now();
    st.step_s = std::chrono::duration<double>(t1 - t0).count();
    if (step > spec.warmup_steps) measured_opt.push_back(std::chrono::duration<double>(t1 - t_opt).count());
    st.tokens_per_s = res.tokens_per_step / st.step_s;
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    st.mem_gib = double(u.ru_maxrss) / (1024.0 * 1024.0);  // peak RSS; ru_maxrss is in KiB on Linux
    st.tflops = res.flops_per_step / st.step_s / 1e12;
    if (step > spec.warmup_steps) measured.push_back(st.step_s);
    res.steps.push_back(st);
    if (on_step) on_step(st);
    if (interrupted()) {
      res.interrupted = true;
      break;
    }
  }
  if (measured.empty()) measured.push_back(res.steps.back().step_s);  // interrupted during warmup
  res.step_s = summarize(measured);
  if (!measured_opt.empty()) res.optimizer_s = summarize(measured_opt).median;
  res.tokens_per_s = res.tokens_per_step / res.step_s.median;
  res.tflops = res.flops_per_step / res.step_s.median / 1e12;
  return res;
}

}  // namespace tb::train
