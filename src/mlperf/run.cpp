// mlperf/run.cpp: the time-to-train loop of run.h on the CPU backend, with its MLLOG lines.
// llama2_70b_lora:
//   step t (1-based) trains on train rows [(t-1)·GBS + r, t·GBS + r) (mod the train set; r = 7919·(seed mod 1000003),
//   a seeded rotation); samples after t = t·GBS
//   lr(t) = peak · (t / W) for t <= W, else peak · (1 + cos(pi · (t - W) / (T - W))) / 2   (HF "cosine", W =
//     round(warmup_ratio · T), T = max_steps): the reference's schedule (--lr_scheduler_type cosine)
//   evaluation i (1-based) after step i · ceil(384 / GBS); eval loss = mean cross-entropy over the counted targets of
//   the whole eval set (real data: the summaries' tokens; every token of the synthetic task), LoRA's dropout off
// gpt3 (the synthetic task only): the proxy starts from its own checkpoint, as the benchmark from the reference's:
//   steps 1..P (P = kGptCheckpoint) train during init (not timed; init_checkpoint_step P), the timed run continues
//   from step P + 1 on the same rows and schedule; samples count from the checkpoint
//   lr(t) = m · base · t / W for t <= W,
//   else    m · (end + (base - end) (1 + cos(pi · min(1, (t - W) / (D - W)))) / 2)
//     ("cosine with linear warmup", end = 0.1 · base), m = 12288 / 64 = 192: the width ratio of GPT-3 175B to the
//     proxy, Adam's LR scaled with width as μP scales it (applied to every parameter), so the rules' base LR (2e-5,
//     logged as opt_base_learning_rate) trains the proxy; m is logged as trainbench_lr_width_multiplier
//   evaluation after every kGptEvalEvery steps; log perplexity = mean cross-entropy over the eval set's tokens
#include "mlperf/run.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <numbers>

#include "core/error.h"
#include "core/record.h"
#include "core/suggest.h"
#include "mlperf/data.h"
#include "model/config.h"
#include "model/decoder_cpu.h"
#include "ops/cpu/adamw.h"
#include "parallel/trainer_cpu.h"

namespace tb::mlperf {
namespace {

// The LoRA CPU proxy's peak LR without --set lr (free in the rules): with 4e-4, the reference's, it reaches its target
// after about 4,000 samples; with 1e-3 at the first evaluation (1,536 samples at GBS 8).
constexpr double kProxyLr = 1e-3;
constexpr float kHeadScale = 8;  // the frozen LM head's scale (CpuEngine)

// The GPT-3 CPU proxy: rows of 2,048 tokens per step (GBS; --global-batch changes it), the checkpoint's steps, the
// schedule's warmup and decay steps, the steps between evaluations, the LR's width multiplier.
constexpr int kGptBatch = 2, kGptCheckpoint = 10, kGptWarmup = 4, kGptDecay = 400, kGptEvalEvery = 1;
constexpr double kGptWidthMultiplier = 12288.0 / 64.0;

// The CPU proxy of Llama 2 70B LoRA: the `tiny` preset (2 layers, d_model 64) at the data's vocabulary and sequence,
// with the benchmark's adapters (rank, alpha, dropout from the settings; targets qkv and o).
model::ModelConfig lora_proxy(const std::map<std::string, double>& s, const Dataset& task, std::uint64_t seed) {
  model::ModelConfig m = model::preset("tiny");
  m.name = "llama2_70b_lora-cpu-proxy";
  m.vocab = task.vocab;
  m.seq = task.seq;
  m.lora.rank = int(s.at("lora_rank"));
  m.lora.alpha = s.at("lora_alpha");
  m.lora.dropout = s.at("lora_dropout");
  m.lora.targets = model::kLoraMlperf;
  m.lora.seed = seed;
  m.validate();
  return m;
}

// The GPT-3 proxy: GPT-3's architecture (LayerNorm, GELU MLP of 4 d_model, learned positions, tied embeddings) at the
// `tiny` preset's size (2 layers, d_model 64), full training.
model::ModelConfig gpt3_proxy(const Dataset& task) {
  model::ModelConfig m = model::preset("tiny");
  m.name = "gpt3-cpu-proxy";
  m.vocab = task.vocab;
  m.seq = task.seq;
  m.norm = model::Norm::layernorm, m.act = model::Act::gelu, m.pos = model::Pos::learned;
  m.tied_embeddings = true;
  m.ffn = 4 * m.d_model;
  m.validate();
  return m;
}

double gpt3_lr_at(int step, double base, int warmup, int decay) {
  if (step <= warmup) return kGptWidthMultiplier * base * step / warmup;
  const double end = 0.1 * base, progress = std::min(1.0, double(step - warmup) / (decay - warmup));
  return kGptWidthMultiplier * (end + (base - end) * 0.5 * (1 + std::cos(std::numbers::pi * progress)));
}

double lr_at(int step, double peak, int warmup, int total) {
  if (step <= warmup) return peak * step / std::max(warmup, 1);
  const double progress = double(step - warmup) / std::max(total - warmup, 1);
  return peak * 0.5 * (1 + std::cos(std::numbers::pi * std::min(progress, 1.0)));
}

class CpuEngine {
 public:
  CpuEngine(const model::ModelConfig& m, std::uint64_t seed, const std::map<std::string, double>& s)
      : net_(m, seed), eval_net_(without_dropout(m), seed), s_(s) {
    // LoRA: the frozen base stands for a pretrained checkpoint: at its initial scale (std 0.02) the normalised final
    // activations cannot give logits beyond about +-1.3, so no adapter could make a confident prediction. Scaled by
    // kHeadScale the head's logits reach about +-10, as a trained model's do.
    if (m.lora.enabled())
      for (float& w : net_.param("lm_head.weight")) w *= kHeadScale;
    m_.assign(net_.grads().size(), 0.f);
    v_.assign(net_.grads().size(), 0.f);
  }

  double train_step(const train::Batch& b, double lr, int step) {
    net_.zero_grads();
    const std::vector<double> w = train::loss_weights(b, 1, b.loss_tokens());
    const double loss = net_.forward_backward({b.tokens, b.targets, b.batch, b.seq, b.docs(), w, 0, step});
    ops::cpu::clip_grad_norm(net_.grads(), s_.at("clip"));
    ops::cpu::AdamWParams hp;
    hp.lr = lr, hp.beta1 = s_.at("beta1"), hp.beta2 = s_.at("beta2"), hp.eps = s_.at("eps");
    hp.weight_decay = s_.at("weight_decay");
    const auto params = net_.params();
    const auto grads = net_.grads();
    for (const model::Slot& sl : net_.layout()) {
      if (!sl.has_grad()) continue;
      const std::uint8_t decay = parallel::decays(sl) ? 1 : 0;
      mask_.assign(sl.size, decay);
      ops::cpu::adamw_step(params.subspan(sl.offset, sl.size), grads.subspan(sl.grad_offset, sl.size),
                           std::span(m_).subspan(sl.grad_offset, sl.size),
                           std::span(v_).subspan(sl.grad_offset, sl.size), hp, step, mask_);
    }
    return loss;
  }

  // sum over the eval rows' counted targets of CE / their number: each chunk's loss weighted by its counted share
  double eval_loss(const Dataset& data) {
    std::ranges::copy(net_.params(), eval_net_.params().begin());
    const int chunk = std::max(1, 65536 / data.seq);  // rows per forward
    std::vector<train::Batch> chunks;
    double counted = 0;
    for (std::int64_t first = 0; first < data.eval_rows; first += chunk) {
      chunks.push_back(data.rows(true, first, int(std::min<std::int64_t>(chunk, data.eval_rows - first))));
      counted += double(chunks.back().loss_tokens());
    }
    TB_REQUIRE(counted > 0, "MLPerf: the eval set counts no target (its documents have no loss spans)");
    double sum = 0;
    for (const train::Batch& b : chunks) {
      const double share = double(b.loss_tokens()) / counted;
      const std::vector<double> w = train::loss_weights(b, 1, b.loss_tokens());
      if (share > 0) sum += share * eval_net_.forward({b.tokens, b.targets, b.batch, b.seq, b.docs(), w, 0, 1});
    }
    return sum;
  }

 private:
  static model::ModelConfig without_dropout(model::ModelConfig m) {
    m.lora.dropout = 0;
    return m;
  }
  model::CpuDecoder<float> net_, eval_net_;
  std::map<std::string, double> s_;
  std::vector<float> m_, v_;
  std::vector<std::uint8_t> mask_;
};

std::string platform_of(const RunSpec& spec) {
  return spec.platform.empty() ? fmt::format("{}xCPU (trainbench CPU proxy)", spec.gpus) : spec.platform;
}

// The run's data: the converted folder (--data), else the synthetic task. Error{config} for a bad folder.
std::unique_ptr<Dataset> open_data(const Benchmark& b, const RunSpec& spec) {
  if (spec.data.empty())
    return std::make_unique<ChainTask>(b.name == "gpt3" ? ChainTask::gpt3() : ChainTask::llama2_70b_lora());
  TB_REQUIRE(b.name != "gpt3",
             fmt::format("MLPerf gpt3 --data {}: real C4 data is not read in this build (the benchmark starts from the "
                         "reference's 175B checkpoint, which a proxy cannot load); run without --data for the "
                         "synthetic task, and `trainbench project {} --gpus N --from RESULTS --ttt` for its time to "
                         "train",
                         spec.data, b.recipe));
  const std::string problem = check_data_dir(spec.data, b.data_files);
  if (!problem.empty()) raise_config(problem);
  return std::make_unique<PackedSet>(spec.data, b.seq);
}

// The schedule and the MLLOG hyperparameter keys of a run: first (the steps before run_start: the checkpoint's),
// last (the step limit), lr(step), evaluations every `every` steps after the first `skipped` intervals.
struct Plan {
  int gbs = 0, first = 0, last = 0, every = 0, skipped = 0;
  std::function<double(int)> lr;
};

Plan plan_lora(const Benchmark& b, const RunSpec& spec, const std::map<std::string, double>& s, MllogWriter& log) {
  Plan p;
  p.gbs = spec.global_batch > 0 ? spec.global_batch : b.reference_global_batch;
  p.last = spec.max_steps ? *spec.max_steps : int(s.at("max_steps"));
  const double lr = spec.overrides.contains("lr") ? s.at("lr") : kProxyLr;
  const int warmup = int(std::lround(s.at("warmup_ratio") * p.last)), total = p.last;
  p.lr = [=](int step) { return lr_at(step, lr, warmup, total); };
  p.every = b.eval_every_steps(p.gbs), p.skipped = b.eval_skipped(p.gbs);
  log.event("global_batch_size", p.gbs);
  log.event("gradient_accumulation_steps", 1);
  log.event("opt_name", "adamw");
  log.event("opt_base_learning_rate", lr);
  log.event("opt_learning_rate_warmup_ratio", s.at("warmup_ratio"));
  log.event("opt_learning_rate_training_steps", p.last);
  log.event("opt_learning_rate_decay_schedule", "cosine");
  log.event("opt_adamw_beta_1", s.at("beta1"));
  log.event("opt_adamw_beta_2", s.at("beta2"));
  log.event("opt_adamw_epsilon", s.at("eps"));
  log.event("opt_adamw_weight_decay", s.at("weight_decay"));
  log.event("opt_gradient_clip_norm", s.at("clip"));
  log.event("lora_rank", int(s.at("lora_rank")));
  log.event("lora_alpha", s.at("lora_alpha"));
  log.event("lora_dropout", s.at("lora_dropout"));
  return p;
}

Plan plan_gpt3(const RunSpec& spec, const std::map<std::string, double>& s, MllogWriter& log) {
  Plan p;
  p.gbs = spec.global_batch > 0 ? spec.global_batch : kGptBatch;
  p.first = kGptCheckpoint;
  const int limit = spec.max_steps ? *spec.max_steps : int(s.at("max_steps"));
  p.last = limit > 0 ? p.first + limit : kGptDecay;
  const double base = s.at("lr");
  p.lr = [=](int step) { return gpt3_lr_at(step, base, kGptWarmup, kGptDecay); };
  p.every = kGptEvalEvery;
  log.event("global_batch_size", p.gbs);
  log.event("gradient_accumulation_steps", 1);
  log.event("init_checkpoint_step", p.first);
  log.event("opt_name", "adam");
  log.event("opt_base_learning_rate", base);
  log.event("opt_end_learning_rate", s.at("end_lr_ratio") * base);
  log.event("opt_learning_rate_warmup_steps", kGptWarmup);
  log.event("opt_learning_rate_decay_steps", kGptDecay);
  log.event("opt_learning_rate_decay_schedule", "cosine with linear warmup");
  log.event("trainbench_lr_width_multiplier", kGptWidthMultiplier);
  log.event("opt_adam_beta_1", s.at("beta1"));
  log.event("opt_adam_beta_2", s.at("beta2"));
  log.event("opt_adam_epsilon", s.at("eps"));
  log.event("opt_weight_decay", s.at("weight_decay"));
  log.event("opt_gradient_clip_norm", s.at("clip"));
  return p;
}

RunOutcome run_one(const Benchmark& b, const RunSpec& spec, const std::map<std::string, double>& s,
                   const Dataset& task, int k) {
  RunOutcome out;
  out.index = k;
  out.seed = spec.seed + std::uint64_t(k);
  out.log = spec.out / fmt::format("result_{}.txt", k);
  out.data = task.label;
  std::FILE* f = std::fopen(out.log.c_str(), "w");
  if (!f) raise_error(Error::Kind::io, fmt::format("MLPerf: cannot write {}", out.log.string()));
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(f, std::fclose);
  MllogWriter log(f, spec.echo, spec.clock);
  const bool gpt = b.name == "gpt3";

  log.event("cache_clear", true);
  log.start("init_start");
  log.event("submission_benchmark", b.name);
  log.event("submission_division", division_name(spec.division));
  log.event("submission_org", spec.org);
  log.event("submission_platform", platform_of(spec));
  log.event("submission_status", "research");
  log.event("trainbench_data", task.label);
  if (spec.division == Division::open && !spec.overrides.empty()) log.event("trainbench_overrides", spec.overrides);
  log.event("seed", out.seed);
  log.event("train_samples", task.train_rows);
  log.event("eval_samples", task.eval_rows);
  log.event("max_sequence_length", task.seq);
  const Plan p = gpt ? plan_gpt3(spec, s, log) : plan_lora(b, spec, s, log);
  CpuEngine engine(gpt ? gpt3_proxy(task) : lora_proxy(s, task, out.seed), out.seed, s);
  const std::int64_t rotation = std::int64_t(out.seed % 1000003) * 7919;
  auto train_step = [&](int step) {
    const train::Batch r = task.rows(false, (std::int64_t(step - 1) * p.gbs + rotation) % task.train_rows, p.gbs);
    const double loss = engine.train_step(r, p.lr(step), step);
    TB_REQUIRE(std::isfinite(loss), fmt::format("MLPerf {}: step {}: the loss is not finite", b.name, step));
    return loss;
  };
  for (int step = 1; step <= p.first; ++step) train_step(step);  // the checkpoint the run starts from
  log.end("init_stop");

  const std::int64_t t_start = log.start("run_start");
  int step = p.first;
  for (int interval = 1; !out.converged && step < p.last; ++interval) {
    log.start("block_start", nullptr, {{"samples_count", std::int64_t(step - p.first) * p.gbs}});
    double loss = 0;
    for (int i = 0; i < p.every && step < p.last; ++i) loss = train_step(++step);
    out.samples = std::int64_t(step - p.first) * p.gbs;
    log.event("train_loss", loss, {{"samples_count", out.samples}});
    log.end("block_stop", nullptr, {{"samples_count", out.samples}});
    if (interval <= p.skipped) continue;
    const nlohmann::json at = {{"samples_count", out.samples}, {"epoch_num", out.samples}};
    log.start("eval_start", nullptr, at);
    const double eval = engine.eval_loss(task);
    log.event("eval_accuracy", eval, at);
    log.end("eval_stop", nullptr, at);
    out.evals.push_back({out.samples, eval});
    out.converged = eval <= b.target;
  }
  out.steps = step - p.first;
  const std::int64_t t_stop =
      log.end("run_stop", out.evals.empty() ? nlohmann::json(nullptr) : nlohmann::json(out.evals.back().loss),
              {{"samples_count", out.samples}, {"status", out.converged ? "success" : "aborted"}});
  out.ttt_min = double(t_stop - t_start) / 60000.0;
  return out;
}

}  // namespace

std::map<std::string, double> resolve_settings(const Benchmark& b, const RunSpec& spec) {
  std::map<std::string, double> s;
  std::vector<std::string> names;
  for (const Setting& st : b.settings) s[st.name] = st.value, names.push_back(st.name);
  for (const auto& [name, value] : spec.overrides) {
    if (!s.contains(name))
      raise_config(fmt::format("--set {}: {} has no setting '{}'{}; its settings: {}", name, b.name, name,
                               did_you_mean(name, names), fmt::join(names, ", ")));
    const Setting& st = b.setting(name);
    if (st.fixed && spec.division == Division::closed)
      raise_config(fmt::format("--set {}={}: the closed division fixes {} at {} ({}); use --division open to change "
                               "it (the log then records the change)",
                               name, value, name, st.value, st.why));
    if (!st.allowed.empty() && spec.division == Division::closed &&
        std::ranges::find(st.allowed, value) == st.allowed.end())
      raise_config(fmt::format("--set {}={}: the closed division allows {} {} only ({}); use --division open for "
                               "another value",
                               name, value, name, fmt::join(st.allowed, " or "), st.why));
    s[name] = value;
  }
  return s;
}

Record to_record(const RunSpec& spec, const RunOutcome& o) {
  Record r;
  r.bench = "mlperf";
  r.name = spec.benchmark;
  r.world = spec.gpus;
  r.data = {{"benchmark", spec.benchmark},    {"division", division_name(spec.division)},
            {"data", o.data},                 {"comparable", false},
            {"run_index", o.index},           {"seed", o.seed},
            {"converged", o.converged},       {"time_to_train_min", o.ttt_min},
            {"samples", o.samples},           {"steps", o.steps},
            {"target", find_benchmark(spec.benchmark).target}, {"log", o.log.string()}};
  nlohmann::json evals = nlohmann::json::array();
  for (const auto& e : o.evals) evals.push_back({{"samples", e.samples}, {"loss", e.loss}});
  r.data["evals"] = evals;
  return r;
}

void validate(const RunSpec& spec) {
  const Benchmark& b = find_benchmark(spec.benchmark);
  resolve_settings(b, spec);
  TB_REQUIRE(spec.runs >= 1, fmt::format("--runs {}: at least 1 ({} needs {} for a score)", spec.runs, b.name, b.runs));
  TB_REQUIRE(spec.gpus >= 1, fmt::format("--gpus {}: at least 1", spec.gpus));
  open_data(b, spec);
}

std::vector<RunOutcome> run_mlperf(const RunSpec& spec, const std::function<void(const RunOutcome&)>& on_run) {
  validate(spec);
  const Benchmark& b = find_benchmark(spec.benchmark);
  const auto settings = resolve_settings(b, spec);
  const std::unique_ptr<Dataset> data = open_data(b, spec);
  std::filesystem::create_directories(spec.out);
  std::vector<RunOutcome> outs;
  for (int k = 0; k < spec.runs; ++k) {
    outs.push_back(run_one(b, spec, settings, *data, k));
    if (on_run) on_run(outs.back());
  }
  return outs;
}

}  // namespace tb::mlperf
