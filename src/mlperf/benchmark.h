// mlperf/benchmark.h: the MLPerf Training benchmarks trainbench runs in MLPerf mode, with what the rules fix
// (training_rules.adoc v4.0 / v4.1 / v5.0, the reference implementations of mlcommons/training, and the compliance
// checker's closed_<benchmark>.yaml; docs/MLPERF.md cites each):
//   quality target: eval_accuracy <= target (both are losses here: LoRA's eval cross-entropy, GPT-3's log perplexity)
//   evaluation: every eval_every_samples sequences, i.e. every ceil(eval_every_samples / GBS) steps; Llama 2 70B LoRA
//     skips the first floor(0.125·GBS + 2) evaluations (eval_skipped)
//   score: olympic mean of `runs` runs' times to train (the fastest and the slowest dropped)
// Hyperparameters are `Setting`s: a fixed one the closed division may not change (open may, and the log says so).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tb::mlperf {

enum class Division { closed, open };
std::string_view division_name(Division d);
Division parse_division(std::string_view text);  // Error{config} otherwise

struct Setting {
  std::string name;   // as in --set NAME=VALUE: lr, warmup_ratio, weight_decay, clip, lora_rank, ...
  double value = 0;   // the default (the reference's)
  bool fixed = true;  // closed division: may not change
  std::string why;    // the rule that fixes it or leaves it free
  std::vector<double> allowed = {};  // a free one: the values the closed division allows (empty: any)
};

// A reference convergence point: samples (LoRA) or tokens (GPT-3) to reach the target, mean of the reference runs.
struct ConvergencePoint {
  int global_batch = 0;
  double lr = 0;
  double samples = 0;  // sequences to converge (GPT-3: tokens / 2048)
  std::string source;
};

struct Benchmark {
  std::string name;             // submission_benchmark: llama2_70b_lora | gpt3
  std::string model, dataset;   // for messages and docs
  double target = 0;            // eval_accuracy <= target
  double target_floor = 0;      // the checker's lower bound (GPT-3: > 2.6), 0 when none
  int eval_every_samples = 0;   // sequences between evaluations
  bool skip_early_evals = false;
  int runs = 0;                 // runs per result (rules: Benchmark Results)
  int seq = 0;                  // max_sequence_length
  int train_samples = 0, eval_samples = 0;  // of the real data set
  int reference_global_batch = 0;
  std::vector<Setting> settings;
  std::vector<ConvergencePoint> convergence;  // the reference convergence points (RCPs)
  std::string data_files;       // what --data DIR must hold (docs/MLPERF.md: how to make it)
  std::string recipe;           // the recipe of its model and NVIDIA's layouts (recipes/<recipe>.toml)
  std::vector<std::string> rulesets;  // the compliance checker's training rulesets that hold it (GPT-3: 4.1.0 only)

  const Setting& setting(std::string_view name) const;  // Error{internal} when absent
  // Evaluations skipped at the start for a global batch (floor(0.125·GBS + 2) for LoRA, else 0).
  int eval_skipped(int global_batch) const;
  // Steps between evaluations: ceil(eval_every_samples / GBS).
  int eval_every_steps(int global_batch) const;
  // Samples to converge at a global batch: the convergence point of that batch, else the nearest one's.
  std::optional<ConvergencePoint> convergence_at(int global_batch) const;
};

const std::vector<Benchmark>& benchmarks();
// The benchmark named `name`; Error{config} "unknown MLPerf benchmark 'x' (did you mean 'y'?); known: a, b".
const Benchmark& find_benchmark(std::string_view name);

}  // namespace tb::mlperf
