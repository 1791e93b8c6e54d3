// mlperf/benchmark.cpp: the two benchmarks' rules (sources in docs/MLPERF.md, section "The rules trainbench follows").
#include "mlperf/benchmark.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "core/error.h"
#include "core/suggest.h"

namespace tb::mlperf {
namespace {

constexpr const char* kLoraRules = "training_rules.adoc v4.1, Llama 2 70B LoRA hyperparameter table";
constexpr const char* kLoraRef = "mlcommons/training llama2_70b_lora/run_llama_70B_scrolls_r16.sh";
constexpr const char* kLoraRcp = "mlperf_logging rcp_checker/training_4.1.0/rcps_llama2_70b_lora.json";
constexpr const char* kGptRules = "training_rules.adoc v4.1, GPT-3 hyperparameter table";
constexpr const char* kGptRcp = "mlperf_logging rcp_checker/training_4.1.0/rcps_gpt3.json";

Benchmark llama2_70b_lora() {
  Benchmark b;
  b.name = "llama2_70b_lora";
  b.model = "Llama 2 70B, LoRA adapters on qkv and o";
  b.dataset = "SCROLLS GovReport, packed to 8,192 tokens";
  b.target = 0.925;
  b.eval_every_samples = 384;
  b.skip_early_evals = true;
  b.runs = 10;
  b.seq = 8192;
  b.train_samples = 3901;
  b.eval_samples = 173;
  b.reference_global_batch = 8;
  b.settings = {
      {"lr", 4e-4, false, std::string(kLoraRules) + ": opt_base_learning_rate unconstrained; 4e-4: " + kLoraRef},
      {"warmup_ratio", 0, false, std::string(kLoraRules) + ": opt_learning_rate_warmup_ratio unconstrained"},
      {"max_steps", 1024, false, std::string(kLoraRules) + ": opt_learning_rate_training_steps unconstrained"},
      {"clip", 0.3, true, std::string(kLoraRules) + ": opt_gradient_clip_norm 0.3"},
      {"weight_decay", 1e-4, true, std::string(kLoraRules) + ": opt_weight_decay 1e-4"},
      {"lora_rank", 16, true, "compliance checker closed_llama2_70b_lora.yaml: lora_rank == 16"},
      {"lora_alpha", 32, true, std::string(kLoraRules) + ": lora_alpha 32"},
      {"lora_dropout", 0.1, true, std::string(kLoraRules) + ": lora_dropout 0.1"},
      {"beta1", 0.9, true, std::string(kLoraRef) + ": adamw_torch defaults (not a modifiable hyperparameter)"},
      {"beta2", 0.999, true, std::string(kLoraRef) + ": adamw_torch defaults (not a modifiable hyperparameter)"},
      {"eps", 1e-8, true, std::string(kLoraRef) + ": adamw_torch defaults (not a modifiable hyperparameter)"},
  };
  b.convergence = {{8, 4e-4, 3178.7, kLoraRcp},
                   {16, 4e-4, 4032, kLoraRcp},
                   {32, 4e-4, 6037.3, kLoraRcp},
                   {128, 1e-3, 11264, kLoraRcp}};
  b.data_files = "train.bin + train.index and validation.bin + validation.index (scripts/convert_mlperf_govreport.py "
                 "on the MLPerf GovReport parquet files)";
  b.recipe = "mlperf-llama2-70b-lora";
  b.rulesets = {"4.1.0", "5.0.0"};
  return b;
}

Benchmark gpt3() {
  Benchmark b;
  b.name = "gpt3";
  b.model = "GPT-3 175B, from the reference checkpoint (4,000 steps at GBS 1536)";
  b.dataset = "C4 en 3.0.1";
  b.target = 2.69;
  b.target_floor = 2.6;
  b.eval_every_samples = 24576;
  b.runs = 3;
  b.seq = 2048;
  b.train_samples = 0;  // the tokenised C4 shards: counted from the data
  b.eval_samples = 24567;
  b.reference_global_batch = 1536;
  b.settings = {
      {"lr", 2e-5, false, std::string(kGptRules) + ": 2e-5 for GBS 1536-3072, 3e-5 for 4096-8192", {2e-5, 3e-5}},
      {"end_lr_ratio", 0.1, true, std::string(kGptRules) + ": end LR 10% of the base"},
      {"warmup_steps_1536", 265, true, std::string(kGptRules) + ": warmup ceil(265·1536/GBS) steps"},
      {"decay_steps_1536", 108600, true, std::string(kGptRules) + ": decay ceil(108600·1536/GBS) steps"},
      {"init_checkpoint_steps_1536", 4000, true, std::string(kGptRules) + ": ceil(4000·1536/GBS)"},
      {"clip", 1.0, true, "closed_gpt3.yaml: opt_gradient_clip_norm == 1.0"},
      {"weight_decay", 0.1, true, "mlcommons/training gpt3 run_gpt3.sh: --weight-decay 0.1"},
      {"beta1", 0.9, true, "closed_gpt3.yaml: opt_adam_beta_1 == 0.9"},
      {"beta2", 0.95, true, "closed_gpt3.yaml: opt_adam_beta_2 == 0.95"},
      {"eps", 1e-8, true, "closed_gpt3.yaml: opt_adam_epsilon == 1e-8"},
      {"max_steps", 0, false, "a step limit of trainbench's (0: none beyond the schedule)"},
  };
  for (auto [gbs, lr, tokens] : {std::tuple{1536, 2e-5, 1.195e9}, {2048, 2e-5, 1.183e9}, {3072, 2e-5, 1.208e9},
                                 {4096, 3e-5, 1.258e9}, {8192, 3e-5, 1.623e9}})
    b.convergence.push_back({gbs, lr, tokens / 2048.0, kGptRcp});
  b.data_files = "train.bin + train.index and validation.bin + validation.index (C4 tokenised with the reference's "
                 "SentencePiece model)";
  b.recipe = "mlperf-gpt3-175b";
  b.rulesets = {"4.1.0"};  // retired after v4.1 (5.0.0 has Llama 3.1 405B in its place)
  return b;
}

}  // namespace

std::string_view division_name(Division d) { return d == Division::closed ? "closed" : "open"; }

Division parse_division(std::string_view text) {
  if (text == "closed") return Division::closed;
  if (text == "open") return Division::open;
  raise_config(fmt::format("--division '{}': expected closed or open", text));
}

const Setting& Benchmark::setting(std::string_view n) const {
  for (const auto& s : settings)
    if (s.name == n) return s;
  raise_error(Error::Kind::internal, fmt::format("MLPerf {}: no setting '{}'", name, n));
}

int Benchmark::eval_skipped(int global_batch) const {
  return skip_early_evals ? int(std::floor(0.125 * global_batch + 2)) : 0;
}

int Benchmark::eval_every_steps(int global_batch) const {
  return (eval_every_samples + global_batch - 1) / global_batch;
}

std::optional<ConvergencePoint> Benchmark::convergence_at(int global_batch) const {
  std::optional<ConvergencePoint> best;
  double best_d = std::numeric_limits<double>::infinity();
  for (const auto& c : convergence) {
    const double d = std::abs(std::log(double(c.global_batch) / global_batch));
    if (d < best_d) best_d = d, best = c;
  }
  return best;
}

const std::vector<Benchmark>& benchmarks() {
  static const std::vector<Benchmark> all = {llama2_70b_lora(), gpt3()};
  return all;
}

const Benchmark& find_benchmark(std::string_view name) {
  std::vector<std::string> names;
  for (const auto& b : benchmarks()) {
    if (b.name == name) return b;
    names.push_back(b.name);
  }
  raise_config(fmt::format("unknown MLPerf benchmark '{}'{}; trainbench runs: {}", name, did_you_mean(name, names),
                           fmt::join(names, ", ")));
}

}  // namespace tb::mlperf
