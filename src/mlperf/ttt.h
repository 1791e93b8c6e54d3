// mlperf/ttt.h: time to train projected from a throughput, for `trainbench project --ttt` and the docs:
//   S     = samples to reach the target at global batch G: the reference convergence point nearest G (RCP mean,
//           Benchmark::convergence_at), rounded up to a whole number of evaluation intervals E = ceil(384 / G)·G
//           (the run stops only at an evaluation)
//   evals = S / E - eval_skipped(G)   (evaluations run; LoRA's first floor(0.125·G + 2) are skipped)
//   t     = S / X  +  evals · eval_samples / (3 · X)      (X: training samples/s at N GPUs; an evaluation sample is
//           a forward pass, a third of a training sample's forward + backward)
//   TTT   = t / 60 minutes (init, before run_start, not counted)
// From a projected step (`trainbench project RECIPE --gpus N --ttt`): X = tokens/s per GPU · N / seq (a sample is a
// sequence of seq tokens), and beside it the published MLPerf row of the recipe at N GPUs of the target's GPU model
// (references/mlperf-training.toml): error = TTT / published TTT - 1.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "mlperf/benchmark.h"
#include "recipe/reference.h"

namespace tb::mlperf {

struct TttProjection {
  ConvergencePoint point;  // the RCP used
  double samples = 0;      // S
  int evals = 0;
  double train_s = 0, eval_s = 0;
  double minutes = 0;
};

// nullopt when the benchmark has no convergence point; Error{config} for a throughput or batch <= 0.
std::optional<TttProjection> project_ttt(const Benchmark& b, int global_batch, double samples_per_s);

struct TttReport {
  const Benchmark* benchmark = nullptr;
  int gpus = 0, global_batch = 0, seq = 0;
  double tokens_per_s_per_gpu = 0, samples_per_s = 0;  // X
  TttProjection ttt;
  const recipe::ReferenceRow* published = nullptr;     // null: none at this size
  double error = 0;                                    // ttt.minutes / published - 1
};

// The MLPerf benchmark whose recipe is `recipe_name` (Benchmark::recipe); Error{config} naming those there are.
const Benchmark& benchmark_of_recipe(std::string_view recipe_name);
// The projection at `gpus` GPUs and the newest published row of `recipe_name` there: a row with time_to_train_min,
// this precision, and a GPU model that `gpu_name` (the target system's name) contains.
TttReport ttt_report(std::string_view recipe_name, int gpus, int global_batch, int seq, double tokens_per_s_per_gpu,
                     const std::vector<recipe::ReferenceRow>& rows, std::string_view gpu_name,
                     std::string_view precision);
std::string render_ttt(const TttReport& r);
nlohmann::json to_json(const TttReport& r);

}  // namespace tb::mlperf
