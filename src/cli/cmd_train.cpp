// cli/cmd_train.cpp: `trainbench train`: one model, real training steps, per-step log lines, a summary and one
// "train" record (train/trainer.h). MFU = TFLOP/s / the GPU's dense peak of the run's precision (references/systems).
#include <fmt/format.h>
#include <sys/resource.h>

#include <cstdio>
#include <optional>

#include "bench/sysinfo.h"
#include "bench/telemetry.h"
#include "core/interrupt.h"
#include "core/provenance.h"
#include "core/error.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/ranks.h"
#include "cli/train_progress.h"
#include "comm/mpi.h"
#include "parallel/mesh.h"
#include "comm/mpi_comm.h"
#include "model/config_override.h"
#include "model/param_layout.h"
#include "model/flops.h"
#include "train/rank_agreement.h"
#include "train/trainer.h"

namespace tb::cli {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

double peak_rss_gib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / (1024.0 * 1024.0);  // ru_maxrss is in KiB on Linux
}

nlohmann::json ops_json(const train::TrainResult& res) {
  auto a = nlohmann::json::array();
  for (const auto& o : res.ops) a.push_back({{"op", o.op}, {"ms", o.seconds * 1e3}, {"calls", o.calls}});
  return a;
}

void print_ops(const train::TrainResult& res) {
  double sum = 0;
  for (const auto& o : res.ops) sum += o.seconds;
  if (sum <= 0) return;
  std::printf("\nGPU time by op (one eager step, CUDA events between ops):\n");
  for (const auto& o : res.ops)
    std::printf("  %-26s %9.2f ms  %5.1f%%  (%d calls)\n", o.op.c_str(), o.seconds * 1e3, 100.0 * o.seconds / sum,
                o.calls);
  std::printf("  %-26s %9.2f ms  (graph-replayed step, GPU events: %.2f ms; host wall: %.2f ms)\n", "sum", sum * 1e3,
              res.gpu_step_s.median * 1e3, res.step_s.median * 1e3);
}

// The train record's CUDA fields: the memory and precision settings, FP8's, graph and GEMM plans, peak and MFU, memory
// against its estimate, power and energy, the time by op.
nlohmann::json cuda_fields(const train::TrainSpec& spec, const train::TrainResult& res, double peak, double mfu) {
  nlohmann::json d;
  d["gpu"] = res.device_name;
  d["recompute"] = train::name(spec.memory.recompute);
  d["moments"] = dtype_name(spec.optimizer.moments);
  d["grads"] = dtype_name(spec.memory.grads);
  d["master"] = train::name(spec.optimizer.master);
  d["grad_buffer"] = res.grads_shared ? "shared" : "separate";
  const train::Fp8Spec& f = spec.precision.fp8;
  if (spec.fp8())
    d["fp8"] = {{"recipe", train::name(f.recipe)},
                     {"format", train::name(f.format)},
                     {"history", f.history},
                     {"amax", train::name(f.amax)},
                     {"margin", f.margin},
                     {"reduce_amax", f.reduce_amax},
                     {"lm_head", f.lm_head ? "fp8" : "bf16"},
                     {"attention", f.attention ? "fp8" : "bf16"},
                     {"attention_emulate", train::attention_emulation_name(spec.debug.fp8_attention_emulate)},
                     {"weight_cast", res.fp8_weight_cast},
                     {"grad_rounding", train::name(spec.debug.fp8_grad_rounding)}};
  if (spec.fp8() && f.lm_head) {
    const train::HeadGemms& g = spec.debug.fp8_head_gemms;
    auto gemms = nlohmann::json::array();
    for (const auto& [on, gemm] : {std::pair{g.forward, "forward"}, {g.dgrad, "dgrad"}, {g.wgrad, "wgrad"}})
      if (on) gemms.push_back(gemm);
    d["fp8"]["lm_head_grad"] = dtype_name(train::fp8_head_grad_format(spec));
    d["fp8"]["lm_head_gemms"] = gemms;
    d["fp8"]["lm_head_rounding"] = train::name(train::fp8_head_rounding(spec));
  }
  d["graph"] = res.graph;
  d["gemm_plans"] = res.gemm_plans;
  d["gemm_retuned"] = res.gemm_retuned;
  d["gpu_step_ms"] = to_json(scaled(res.gpu_step_s, 1e3));
  d["peak_tflops"] = peak;
  if (mfu > 0) d["mfu"] = mfu;
  d["peak_alloc_gib"] = res.peak_alloc_bytes / kGiB;
  d["device_used_gib"] = res.device_used_bytes / kGiB;
  d["estimate_gib"] = res.estimate.total() / kGiB;
  const train::MemoryEstimate& e = res.estimate;
  d["estimate_parts_gib"] = {{"weights", e.weights / kGiB},         {"grads", e.grads / kGiB},
                                  {"master", e.master / kGiB},           {"moments", e.moments / kGiB},
                                  {"activations", e.activations / kGiB}, {"fp8_weights", e.fp8_weights / kGiB},
                                  {"workspaces", e.workspaces / kGiB}};
  d["power_w"] = res.telemetry ? res.telemetry->power_w_mean : 0.0;
  d["energy_j_per_token"] = res.energy_j_per_token;
  if (res.telemetry) d["telemetry"] = bench::to_json(*res.telemetry);
  d["ops"] = ops_json(res);
  return d;
}

// A MoE model's routing over the measured steps, per MoE layer and micro-batch (docs/METRICS.md "moe").
nlohmann::json moe_json(const model::ModelConfig& m, const train::TrainResult& res) {
  const model::MoeStats& s = res.moe;
  const double per = res.moe_forwards > 0 ? 1.0 / res.moe_forwards : 0.0;
  const double layers = s.empty() ? 1.0 : double(s.tokens_per_expert.size()) / s.experts;
  const model::MoeStats::Spread t = s.spread();
  nlohmann::json j = {{"experts", m.moe.experts},
                      {"top_k", m.moe.top_k},
                      {"layers", m.moe_layers()},
                      {"routing", model::routing_name(m.moe.routing)},
                      {"score", model::router_score_name(m.moe.score)},
                      {"active_params", model::active_param_count(m)},
                      {"tokens_per_expert", {{"min", t.min * per}, {"mean", t.mean * per}, {"max", t.max * per}}},
                      {"imbalance", t.mean > 0 ? t.max / t.mean : 0.0},
                      {"dropped", double(s.dropped) * per},
                      {"aux_loss", s.aux * per / layers},
                      {"seq_aux_loss", s.seq_aux * per / layers},
                      {"z_loss", s.z * per / layers}};
  return j;
}

// " (delayed scaling, hybrid, FP8 LM head with E5M2 logit gradients rounded stochastically, FP8 attention)"; a head
// with some GEMMs in BF16: "FP8 LM head (dgrad,wgrad in FP8) with ..."
std::string fp8_description(const train::TrainSpec& spec) {
  const train::Fp8Spec& f = spec.precision.fp8;
  const train::HeadGemms& gemms = spec.debug.fp8_head_gemms;
  const std::string which = gemms.all() ? "" : fmt::format(" ({} in FP8)", train::head_gemm_names(gemms));
  const std::string attention =
      f.attention ? std::string(", FP8 attention")
      : spec.debug.fp8_attention_emulate.on()
          ? ", BF16 attention, E4M3-rounded " + train::attention_emulation_name(spec.debug.fp8_attention_emulate)
          : std::string();
  const bool stochastic_head = train::fp8_head_rounding(spec) == train::Rounding::stochastic;
  return fmt::format(
      " ({} scaling, {}{}{}{})", train::name(f.recipe), train::name(f.format),
      spec.debug.fp8_grad_rounding == train::Rounding::stochastic ? ", gradients rounded stochastically" : "",
      f.lm_head ? fmt::format(", FP8 LM head{} with {} logit gradients rounded {}", which,
                              train::fp8_head_grad_format(spec) == DType::e4m3 ? "E4M3" : "E5M2",
                              stochastic_head ? "stochastically" : "to nearest")
                : "",
      attention);
}

// The summary lines: step time, tokens/s, FLOP rate and MFU, the loss, memory against the estimate, power and energy,
// the time by op.
void print_summary(const train::TrainResult& res, int accum, const std::string& flop_rate, double peak, bool cuda) {
  std::printf("\nsummary: step_s median %.4f (p10 %.4f, p90 %.4f) over %zu steps%s | tokens/s %.0f%s | %s",
              res.step_s.median, res.step_s.p10, res.step_s.p90, res.step_s.n,
              accum > 1 ? fmt::format(" ({} micro-batches each: {:.1f} ms per micro-batch)", accum,
                                      1e3 * res.step_s.median / accum).c_str()
                        : "",
              res.tokens_per_s,
              res.gpus > 1 ? fmt::format(" ({:.0f} per GPU, {} GPUs)", res.tokens_per_s / res.gpus, res.gpus).c_str()
                           : "",
              flop_rate.c_str());
  const double mfu = peak > 0 ? res.tflops / peak : 0;
  if (mfu > 0) std::printf(" | MFU %.1f%% of %.0f", 100 * mfu, peak);
  std::printf("\n         loss %.4f -> %.4f%s\n", res.steps.front().loss, res.steps.back().loss,
              res.loss_floor > 0 ? fmt::format(" (task floor {:.4f})", res.loss_floor).c_str() : "");
  if (res.model.moe.enabled() && !res.moe.empty()) {
    const nlohmann::json j = moe_json(res.model, res);
    const auto& t = j["tokens_per_expert"];
    std::printf(
        "         moe: %d experts top-%d, %s routing; tokens per expert and micro-batch min %.0f mean %.0f max "
        "%.0f (imbalance %.2f); aux %.4f, z %.3f per layer\n",
        res.model.moe.experts, res.model.moe.top_k, j["routing"].get<std::string>().c_str(), t["min"].get<double>(),
        t["mean"].get<double>(), t["max"].get<double>(), j["imbalance"].get<double>(), j["aux_loss"].get<double>(),
        j["z_loss"].get<double>());
  }
  if (cuda) {
    std::printf("         memory: peak %.2f GiB allocated by trainbench (estimate %.2f; gradients %s), %.2f GiB in use "
                "on the GPU | graph: %s | GEMM shapes %d (%d retuned)\n",
                res.peak_alloc_bytes / kGiB, res.estimate.total() / kGiB,
                res.grads_shared ? "in activation memory" : "separate", res.device_used_bytes / kGiB,
                res.graph.c_str(), res.gemm_plans, res.gemm_retuned);
    std::printf("         estimate: %s\n", res.estimate.parts_gib().c_str());
    if (res.telemetry && res.telemetry->samples > 0)
      std::printf("         %s | energy %.1f mJ/token\n", bench::describe(*res.telemetry).c_str(),
                  1e3 * res.energy_j_per_token);  // three digits: runs differ in the third
    print_ops(res);
  }
}

// An option naming one of a choice table's values (train/spec.h): help and errors list the names; `set` takes the
// value parsed.
template <class E, std::size_t N, class Set>
CLI::Option* add_choice_option(CLI::App& app, const std::string& flags, const train::Choice<E> (&table)[N],
                               const std::string& help, Set set) {
  std::vector<std::string> names;
  for (const auto& c : table) names.emplace_back(c.name);
  return app
      .add_option_function<std::string>(
          flags, [&table, flags, set](const std::string& text) { set(train::parse_choice(table, text, flags)); },
          help)
      ->check(CLI::IsMember(names));
}
template <class E, std::size_t N>
CLI::Option* add_choice(CLI::App& app, const std::string& flags, E& value, const train::Choice<E> (&table)[N],
                        const std::string& help) {
  return add_choice_option(app, flags, table, help, [&value](E v) { value = v; })
      ->default_str(std::string(train::choice_name(table, value)));
}
// An optional choice: unset unless given (its default is the spec's rule, train/spec.h).
template <class E, std::size_t N>
CLI::Option* add_choice(CLI::App& app, const std::string& flags, std::optional<E>& value,
                        const train::Choice<E> (&table)[N], const std::string& help) {
  return add_choice_option(app, flags, table, help, [&value](E v) { value = v; });
}

// The options of the model, batch, run, optimizer, parallel, memory and precision sections of spec.
void add_spec_options(CLI::App& app, train::TrainSpec& spec) {
  train::ModelSpec& md = spec.model;
  std::vector<std::string> models;
  for (const auto& p : model::presets()) models.push_back(p.name);
  app.add_option("-m,--model", md.preset, "model preset")->check(CLI::IsMember(models))->capture_default_str();
  app.add_option("--layers", md.layers, "layers (default: the preset's)")->check(whole_number(1));
  app.add_option("--seq", md.seq, "sequence length (default: the preset's)")->check(whole_number(1));
  train::LoraSpec& lo = spec.lora;
  app.add_option_function<int>(
      "--lora-rank", [&lo](int r) { lo.rank = r; },
      "LoRA fine-tuning: adapters of rank R on the --lora-targets linears, every other parameter frozen (no "
      "gradient, master weights or moments; its weight-gradient GEMMs skipped)");
  app.add_option_function<double>(
      "--lora-alpha", [&lo](double a) { lo.alpha = a; },
      "LoRA: the adapters' scale is alpha / rank (default 2 x rank)");
  app.add_option_function<double>(
      "--lora-dropout", [&lo](double p) { lo.dropout = p; },
      "LoRA: dropout on each adapter's input, seeded per step (default 0)");
  app.add_option_function<std::string>(
      "--lora-targets", [&lo](const std::string& t) { lo.targets = model::parse_lora_targets(t); },
      "LoRA: fused (qkv, fc1: NeMo) | canonical (q, k, v, o, gate, up, down: HF PEFT) | mlperf (qkv, o) | a "
      "comma-separated list of q k v qkv o gate up fc1 down (default fused)");
  app.add_flag("--freeze-base", lo.freeze_base, "freeze every parameter but LoRA's adapters (implied by --lora-rank)");
  app.add_option("--micro-batch", spec.batch.micro, "sequences per micro-batch")
      ->capture_default_str()
      ->check(whole_number(1));
  app.add_option("--global-batch", spec.batch.global,
                 "sequences per step (default: micro-batch x dp, one micro-batch per rank); each rank runs "
                 "global / (micro-batch x dp) micro-batches per step and accumulates their gradients")
      ->check(whole_number(1));
  train::RunSpec& r = spec.run;
  app.add_option("--steps", r.steps, "optimizer steps")->capture_default_str()->check(whole_number(1, 100000000));
  app.add_option("--warmup-steps", r.warmup_steps, "steps not measured")->capture_default_str()->check(whole_number(0));
  add_choice(app, "--device", r.device, train::kDevices, "cuda or cpu");
  app.add_option("--gpu", r.gpu, "CUDA device index (--device cuda, one GPU)")
      ->capture_default_str()
      ->check(whole_number(0));
  train::ParallelSpec& pl = spec.parallel;
  app.add_option("--tp", pl.tp, "tensor-parallel ranks (with sequence parallelism)")
      ->capture_default_str()
      ->check(whole_number(1));
  app.add_option("--pp", pl.pp, "pipeline-parallel ranks (1F1B; interleaved with --vp)")
      ->capture_default_str()
      ->check(whole_number(1));
  app.add_option("--vp", pl.vp, "virtual pipeline stages per rank (interleaved 1F1B)")
      ->capture_default_str()
      ->check(whole_number(1));
  app.add_option("--cp", pl.cp, "context-parallel ranks (load-balanced causal chunks)")
      ->capture_default_str()
      ->check(whole_number(1));
  app.add_option("--ep", pl.ep,
                 "expert-parallel ranks (a MoE model, --device cpu): each holds experts / ep, tokens exchanged by "
                 "all-to-all; a pipeline stage's tp·cp·dp ranks split as ep x edp")
      ->capture_default_str()
      ->check(whole_number(1));
  add_choice(app, "--recompute", spec.memory.recompute, train::kRecomputeModes,
             "activation recomputation: none | selective (the norm and activation outputs) | full (each layer from "
             "its input)");
  add_choice(app, "--moments", spec.optimizer.moments, train::kStateTypes, "AdamW moment precision: f32 | bf16");
  add_choice(app, "--grads", spec.memory.grads, train::kStateTypes,
             "weight gradient precision: f32 | bf16 (half their bytes, the bf16-state peer's; --device cuda, one GPU)");
  add_choice(app, "--master", spec.optimizer.master, train::kMasters,
             "the weights AdamW updates: split (fp32 master as the bf16 weight + a 16-bit residual, exact) | f32 (an "
             "fp32 master copy) | none (the bf16 weights, each update rounded: PyTorch's bf16 parameters)");
  add_choice(app, "--grad-buffer", spec.memory.grad_buffer, train::kGradBuffers,
             "--device cuda: the weight gradients shared (in activation memory already used, with one micro-batch "
             "per rank and no --pp or --cp; else separate) | separate");
  train::Fp8Spec& f = spec.precision.fp8;
  add_choice(app, "--precision", spec.precision.linear, train::kPrecisions,
             "bf16 | fp8 (FP8 linear layers, --device cuda)");
  add_choice(app, "--fp8-recipe", f.recipe, train::kFp8Recipes, "FP8 scaling: current | delayed");
  add_choice(app, "--fp8-format", f.format, train::kFp8Formats,
             "FP8 formats: hybrid (E4M3 forward, E5M2 gradients, as Transformer Engine) | e4m3 (gradients E4M3 too)");
  app.add_option("--fp8-history", f.history, "delayed scaling: amax history length")
      ->capture_default_str()
      ->check(whole_number(1));
  add_choice(app, "--fp8-amax", f.amax, train::kAmaxRules, "delayed scaling: max | most_recent");
  app.add_option("--fp8-margin", f.margin, "FP8 scale margin: scale = max / amax / 2^margin")->capture_default_str();
  app.add_flag_callback(
      "--fp8-local-amax", [&f] { f.reduce_amax = false; },
      "delayed scaling on several ranks: each rank scales by its own amaxes (default: the max over "
      "the data-, tensor- and context-parallel ranks, as one GPU would see them)");
  app.add_flag("--fp8-lm-head", f.lm_head,
               "FP8: the LM head's three GEMMs in FP8 too, current scaling (default: BF16, as Transformer Engine and "
               "NeMo keep it)");
  add_choice(app, "--fp8-weight-cast", f.weight_cast, train::kWeightCasts,
             "FP8: who makes the linear layers' FP8 weight copies, fused (AdamW in its update, where it can: delayed "
             "scaling without data or context parallel) | separate (a cast at each step's start) | auto (fused with "
             "fp32 moments, where it is faster); the same numbers");
  app.add_flag("--fp8-attention", f.attention,
               "FP8: attention through cuDNN's FP8 SDPA too (Hopper: head_dim 128; O, dP and dQKV with delayed "
               "scales); off by default: it costs accuracy at high learning rates (docs/TRAINING.md)");
  add_choice(app, "--graph", r.graph, train::kSwitches,
             "capture the step as a CUDA graph: on | off | auto (on; off with --tp > 1)");
  app.add_flag_callback(
      "--no-graph", [&r] { r.graph = train::Switch::off; }, "the same as --graph off");
  app.add_flag("--autotune", r.autotune,
               "time cuBLASLt's candidates for every GEMM shape after step 1, each at its settled (power-limited) "
               "clock; on an H200 no faster than the heuristic's picks (bench/RESULTS.md)");
  app.add_flag_callback(
      "--no-op-profile", [&r] { r.op_profile = false; }, "skip the extra eager step that times each op");
  app.add_flag("--deterministic", r.deterministic, "deterministic attention backward (repeatable, slower)");
  app.add_option("--data", r.data,
                 "markov | copy | random (synthetic tasks), packed-squad | packed-govreport (synthetic packed "
                 "fine-tuning documents), a packed-data FILE.index or a token file")
      ->capture_default_str();
  add_choice(app, "--token-type", r.token_type, train::kTokenTypes, "token file element type: uint16 | uint32");
  train::OptimizerSpec& o = spec.optimizer;
  app.add_option("--lr", o.lr, "peak learning rate (default: 3e-3 under 100M parameters, else 3e-4)");
  app.add_option("--min-lr", o.min_lr, "final learning rate (default: lr / 10)");
  app.add_option("--clip", o.clip, "gradient norm clipping (0: off)")->capture_default_str();
  app.add_option("--seed", r.seed, "seed of the initial weights and the data")->capture_default_str();
  app.add_option("--save", r.save,
                 "write a checkpoint (safetensors: the trainable weights, with LoRA the adapters alone, their AdamW "
                 "moments, the step; train/checkpoint.h) after the last step, or after --save-step (one GPU or the CPU "
                 "backend, one rank)");
  app.add_option("--save-step", r.save_step, "the step after which --save writes (default: the last)");
  app.add_option("--resume", r.resume,
                 "continue a run from its checkpoint: the steps after the file's, with its weights, moments, learning "
                 "rate schedule and data stream (the same model, data, seed, global batch and adapters)");
  app.add_flag("--share-gpus", pl.share_gpus,
               "--gpus N above the node's GPU count: ranks share GPUs, each group on distinct ones (a layout mix "
               "checked on a smaller node; correctness only, the times mean nothing)");
  app.add_option("--comm-timeout", pl.comm_timeout_s,
                 "several GPUs: seconds a step's NCCL work may take before the job is aborted as hung, naming the rank")
      ->capture_default_str();
}

// The debug family: diagnostics, not measurements (an injected straggler; the FP8 experiments of docs/TRAINING.md).
void add_debug_options(CLI::App& app, train::DebugSpec& d) {
  const std::string group = "Debug (diagnostics, not for measurements)";
  app.add_option_function<std::string>(
         "--debug-delay-rank",
         [&d](const std::string& text) {
           const auto colon = text.find(':');
           try {
             d.delay_rank = std::stoi(text.substr(0, colon));
             d.delay_ms = colon == std::string::npos ? 20.0 : std::stod(text.substr(colon + 1));
           } catch (const std::exception&) {
             raise_config(fmt::format("--debug-delay-rank {}: expected R or R:MS, e.g. 1:20", text));
           }
           TB_REQUIRE(d.delay_rank >= 0 && d.delay_ms >= 0,
                      fmt::format("--debug-delay-rank {}: rank and milliseconds must be >= 0", text));
         },
         "R[:MS]: launcher rank R sleeps MS ms (default 20) inside every step (an injected straggler)")
      ->group(group);
  app.add_option_function<std::string>(
         "--debug-fp8-attention-emulate",
         [&d](const std::string& text) { d.fp8_attention_emulate = train::parse_attention_emulation(text); },
         "FP8: BF16 attention with its inputs (qkv) and/or output (o) rounded to E4M3 and back as --fp8-attention "
         "stores them, qkv | o | qkv,o (where FP8 attention costs accuracy)")
      ->group(group);
  add_choice(app, "--debug-fp8-grad-rounding", d.fp8_grad_rounding, train::kRoundings,
             "FP8: how the linear layers' output gradients round to FP8, nearest | stochastic (stochastic cost loss "
             "where measured, docs/TRAINING.md)")
      ->group(group);
  add_choice(app, "--debug-fp8-lm-head-grad", d.fp8_head_grad, train::kFp8Types,
             "--fp8-lm-head: its logit gradients' format, e4m3 | e5m2 (default: --fp8-format's, E5M2 in hybrid; E4M3 "
             "cost more accuracy at the Llama vocabulary, docs/TRAINING.md)")
      ->group(group);
  add_choice(app, "--debug-fp8-lm-head-rounding", d.fp8_head_rounding, train::kRoundings,
             "--fp8-lm-head: how its logit gradients round to FP8, nearest | stochastic (the default: unbiased; "
             "nearest rounding moves a row's many small probabilities the same way and cost more loss)")
      ->group(group);
  app.add_option_function<std::string>(
         "--debug-fp8-lm-head-gemms",
         [&d](const std::string& text) { d.fp8_head_gemms = train::parse_head_gemms(text); },
         "--fp8-lm-head: which of its GEMMs run in FP8, comma-separated forward, dgrad, wgrad (default: all three; "
         "the others in BF16: where FP8 costs the head accuracy, docs/TRAINING.md)")
      ->group(group);
}

}  // namespace

int cmd_train(int argc, char** argv) {
  CLI::App app{"train a model for a few steps and measure it", "trainbench train"};
  train::TrainSpec spec;
  CommonOptions common;
  common.add_to(app);
  app.get_option("--gpus")->description(
      "GPUs of this node to train on (default 1): starts one rank per GPU under mpirun; the layout "
      "is --tp/--pp/--cp, data parallel the rest");
  std::vector<std::string> sets;
  add_spec_options(app, spec);
  app.add_option(
      "--set", sets,
      "change the preset's shape, key=value, repeatable: layers d_model ffn heads kv_heads head_dim vocab "
      "seq (integers), norm rmsnorm|layernorm|layernorm1p, act swiglu|gelu|sqrelu, pos rope|learned, tied "
      "true|false, rope_theta, rope_scaling on|off, norm_eps; MoE: experts top_k expert_ffn shared_ffn dense_first "
      "moe_every (integers), routing learned|balanced, router_score softmax|sigmoid, aux_loss seq_aux_loss "
      "z_loss capacity_factor; MLA: attention gqa|mla, q_lora_rank kv_lora_rank qk_nope_head_dim qk_rope_head_dim "
      "v_head_dim (integers) (--layers and --seq apply after)");
  std::string convention = "full";
  app.add_option("--flops", convention, "FLOP convention: full | causal")->check(CLI::IsMember({"full", "causal"}))
      ->capture_default_str();
  add_debug_options(app, spec.debug);
  if (auto rc = parse(app, argc, argv)) return *rc;
  TB_REQUIRE(spec.parallel.comm_timeout_s > 0,
             fmt::format("--comm-timeout {}: seconds, more than 0", spec.parallel.comm_timeout_s));
  comm::set_collective_timeout(spec.parallel.comm_timeout_s);  // the MPI collectives' watchdog (NCCL has its own)
  spec.run.convention = model::parse_convention(convention);
  if (!sets.empty()) spec.model.config = model::with_overrides(model::preset(spec.model.preset), sets);
  const int gpus = std::max(1, common.gpus);
  const int world_n = launched_by_mpi() ? job_ranks() : gpus;
  try {
    train::validate_on(spec, world_n);  // the layout against the model and the rank count, before any rank starts
  } catch (const Error& e) {
    // No --device on a machine without a GPU: when the flags would do on the CPU, what is missing is the GPU (the
    // default preset's shapes are only wrong for the CUDA kernels).
    if (e.kind() != Error::Kind::config || app.count("--device") > 0 || bench::visible_gpu_count() > 0) throw;
    train::TrainSpec on_cpu = spec;
    on_cpu.run.device = train::Device::cpu;
    try {
      train::validate_on(on_cpu, world_n);
    } catch (const Error&) {
      throw e;
    }
    raise_config(fmt::format("needs a GPU: {} (or use --device cpu)", bench::no_gpu_reason()));
  }
  const model::ModelConfig m = train::resolve_model(spec);
  const bool cuda = spec.cuda();
  TB_REQUIRE(gpus == 1 || cuda, "--gpus > 1 needs --device cuda (CPU ranks: mpirun -np N trainbench train --device "
                                 "cpu ...)");
  const parallel::MeshShape planned = train::mesh_shape(spec, world_n);
  TB_REQUIRE((spec.run.save.empty() && spec.run.resume.empty()) || world_n == 1,
             fmt::format("--save and --resume: checkpoints are written and read by one-rank runs so far; this job has "
                         "{} ranks (run it on one GPU, --gpus 1)",
                         world_n));
  const int visible = cuda ? bench::visible_gpu_count() : 0;
  if (cuda && visible == 0)  // raised: in a job of several ranks the error ends every rank
    raise_config(fmt::format("needs a GPU: {} (or use --device cpu)", bench::no_gpu_reason()));
  if (cuda && spec.parallel.share_gpus && world_n > visible)  // before any rank starts
    if (const std::string problem = train::share_gpus_problem(planned, visible); !problem.empty())
      raise_config(problem);
  if (cuda && !spec.parallel.share_gpus && !launched_by_mpi() && gpus > visible)
    raise_config(fmt::format("--gpus {}: this node shows {} GPU{} (see `trainbench info`); lower --gpus or check "
                             "CUDA_VISIBLE_DEVICES",
                             gpus, visible, visible == 1 ? "" : "s"));
  if (auto rc = start_ranks(gpus, "train", argc, argv)) return *rc;  // re-executes as `gpus` ranks
  const bool rank0 = is_rank0();
  const int ranks = job_ranks();
  spec.parallel.job_ranks = true;
  // The job's ranks, kept to the end: no rank exits before every rank has written its records (mpirun ends the job
  // as soon as one rank exits non-zero, as an interrupted one does).
  const std::unique_ptr<comm::Communicator> job = ranks > 1 ? comm::world_communicator() : nullptr;
  if (job) {
    train::check_ranks_agree(spec, *job);  // before any GPU work
    share_run_id(*job);
  }
  auto finish = [&](int code) {
    std::fflush(stdout);
    if (job) job->barrier();
    return code;
  };
  auto run = open_run(common, argc, argv);
  const parallel::MeshShape layout = train::mesh_shape(spec, ranks);
  const int global = train::global_batch(spec, layout.dp);
  const char* units = spec.parallel.share_gpus && ranks > visible ? "ranks sharing GPUs" : "GPUs";
  const std::string where =
      !cuda       ? (ranks > 1 ? fmt::format("{} CPU ranks ({})", ranks, layout.str()) : "cpu")
      : ranks > 1 ? fmt::format("{} {} ({}{})", ranks, units, layout.str(), layout.dp > 1 ? ", ZeRO-1" : "")
                  : fmt::format("GPU {}", spec.run.gpu);
  // "(delayed scaling, hybrid, FP8 LM head with E5M2 logit gradients rounded stochastically, FP8 attention)"; a head
  // with some GEMMs in BF16: "FP8 LM head (dgrad, wgrad in FP8) with ..."
  const std::string fp8 = spec.fp8() ? fp8_description(spec) : "";
  const std::string lora = m.lora.enabled() ? fmt::format(", {} ({:.3g} trainable, the base frozen)",
                                                           model::lora_text(m.lora),
                                                           double(model::trainable_param_count(m)))
                                             : "";
  if (rank0)
    std::printf(
        "train %s on %s: %d layers, d_model %d, seq %d, %s params%s, micro-batch %d, global batch %d, %d steps%s\n",
        m.name.c_str(), where.c_str(), m.layers, m.d_model, m.seq,
        fmt::format("{:.3g}", double(model::param_count(m))).c_str(), lora.c_str(), spec.batch.micro, global,
        spec.run.steps,
        cuda ? fmt::format(", {}{}, recompute {}, master {}, moments {}{}", train::name(spec.precision.linear), fp8,
                           train::name(spec.memory.recompute), train::name(spec.optimizer.master),
                           dtype_name(spec.optimizer.moments), spec.memory.grads == DType::bf16 ? ", grads bf16" : "")
                   .c_str()
             : "");
  std::fflush(stdout);
  // GPUs in TFLOP/s per GPU; a CPU rank's model FLOP rate in GFLOP/s (a tiny model's TFLOP/s reads 0.0).
  auto flop_rate = [&](double tflops) {
    return cuda ? fmt::format("TFLOP/s/GPU {:.1f}", tflops)
                : fmt::format("GFLOP/s{} {:.2f}", ranks > 1 ? "/rank" : "", 1e3 * tflops);
  };
  auto on_step = [&](const train::StepStats& s) {
    if (!rank0) return;
    std::printf("step %d/%d | loss %.4f | lr %.2e | grad_norm %.3f | step_s %.4f | tokens/s %.0f | %s | mem %.2f GiB\n",
                s.step, spec.run.steps, s.loss, s.lr, s.grad_norm, s.step_s, s.tokens_per_s,
                flop_rate(s.tflops).c_str(), s.mem_gib);
    std::fflush(stdout);
  };
  const std::string precision = cuda ? std::string(train::name(spec.precision.linear)) : "fp32";
  const std::string case_name = fmt::format("{}/L{}/s{}/mb{}/gb{}/{}", m.name, m.layers, m.seq, spec.batch.micro,
                                            global, cuda ? precision : "cpu");
  TrainProgress progress(rank0 ? run.sink.get() : nullptr, case_name, ranks, spec.run.warmup_steps,
                         !cuda && ranks > 1 ? comm::world_communicator() : nullptr);
  auto after_step = [&](const train::StepStats& s) {
    on_step(s);
    progress.after_step(s);
  };
  install_interrupt_handler();
  const auto res = cuda ? train::train_cuda(spec, after_step) : train::train_cpu(spec, after_step);

  const double peak = cuda ? peak_tflops_or_warn(common, spec.run.gpu, precision) : 0.0;
  const double mfu = peak > 0 ? res.tflops / peak : 0;

  Record r;
  r.bench = "train";
  r.name = case_name;
  auto losses = nlohmann::json::array();
  for (const auto& s : res.steps) losses.push_back(s.loss);
  r.data = {{"model", m.name},
            {"layers", m.layers},
            {"seq", m.seq},
            {"micro_batch", spec.batch.micro},
            {"gpus", res.gpus},
            {"layout",
             {{"dp", layout.dp},
              {"cp", layout.cp},
              {"pp", layout.pp},
              {"tp", layout.tp},
              {"vp", layout.vp},
              {"ep", layout.ep},
              {"sequence_parallel", layout.sequence_parallel}}},
            {"tokens_per_s_per_gpu", res.tokens_per_s / res.gpus},
            {"global_batch", global},
            {"device", cuda ? "cuda" : "cpu"},
            {"precision", precision},
            {"params", res.params},
            {"params_trainable", model::trainable_param_count(m)},
            {"params_frozen", model::frozen_param_count(m)},
            {"steps", spec.run.steps},
            {"warmup_steps", spec.run.warmup_steps},
            {"step_ms", to_json(scaled(res.step_s, 1e3))},
            {"tokens_per_s", res.tokens_per_s},
            {"tokens_per_step", res.tokens_per_step},
            {"loss_tokens_per_step", res.loss_tokens_per_step},
            {"flops_per_step", res.flops_per_step},
            {"flop_convention", model::convention_name(spec.run.convention)},
            {"flop_tokens", res.flop_tokens},
            {"flop_task", model::flop_task(m)},
            {"tflops", res.tflops},
            {"loss", losses},
            {"loss_first", res.steps.front().loss},
            {"loss_last", res.steps.back().loss},
            {"data", spec.run.data}};
  if (res.loss_floor > 0) r.data["loss_floor"] = res.loss_floor;
  if (!spec.run.resume.empty())
    r.data["resumed_from"] = {{"file", spec.run.resume}, {"step", res.steps.front().step - 1}};
  if (!spec.run.save.empty()) r.data["saved"] = spec.run.save;
  if (m.moe.enabled()) r.data["moe"] = moe_json(m, res);
  if (m.lora.enabled()) r.data["lora"] = lora_json(m.lora);
  if (cuda) {
    r.data.update(cuda_fields(spec, res, peak, mfu));
  } else {
    r.data["peak_rss_gib"] = peak_rss_gib();
  }
  if (res.interrupted) r.status = Status::interrupted;
  if (rank0) run.sink->write(r);  // one record per job; every rank writes its rank_steps below
  run.sink->write(rank_steps_record(spec, res, cuda));
  if (!rank0) return finish(res.interrupted ? kFailed : kOk);  // rank 0 prints the summary
  if (res.interrupted) std::printf("\ninterrupted after %zu of %d steps\n", res.steps.size(), spec.run.steps);
  print_summary(res, train::micro_batches_per_rank(spec, layout.dp), flop_rate(res.tflops), peak, cuda);
  print_results_location(run);
  return finish(res.interrupted ? kFailed : kOk);
}

}  // namespace tb::cli
