// mlperf/run.h: one MLPerf time-to-train run and a series of them (`trainbench mlperf BENCHMARK`).
//
// A run logs MLLOG lines (mlperf/mllog.h) into <out>/result_<k>.txt the way the rules want them: cache_clear,
// init_start, the submission and hyperparameter keys, init_stop, run_start, then per evaluation interval a block
// (block_start / block_stop with samples_count), the evaluation (eval_start, eval_accuracy, eval_stop; the first
// Benchmark::eval_skipped(GBS) intervals have none), and run_stop with status success when the eval loss reaches the
// target, aborted at the step limit. Time to train = run_stop - run_start (time_ms), as the result summarizer counts.
// Run k uses seed + k (seeds must differ between runs). to_record: the run as a trainbench.result.v1 record.
//
// Engine: the CPU backend (CpuDecoder, AdamW of ops/cpu) on a proxy of the benchmark's model, on the synthetic task or
// the converted data (mlperf/data.h; GPT-3: the synthetic task, from the proxy's own checkpoint, run.cpp); the CUDA
// engine is not in this build.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/record.h"
#include "mlperf/benchmark.h"
#include "mlperf/mllog.h"

namespace tb::mlperf {

struct RunSpec {
  std::string benchmark;                 // llama2_70b_lora | gpt3
  std::string data;                      // "" synthetic, else the data folder
  int gpus = 1;                          // for the log's platform and global batch (the CPU engine runs one process)
  std::uint64_t seed = 1;                // run k: seed + k
  int runs = 1;
  Division division = Division::closed;
  std::map<std::string, double> overrides;  // --set NAME=VALUE (closed: only the free settings)
  int global_batch = 0;                  // 0: the reference's (LoRA: 8)
  std::optional<int> max_steps;          // the step limit (default: the benchmark's max_steps setting)
  std::filesystem::path out;             // folder of result_<k>.txt
  std::string org = "trainbench", platform;  // submission_org; submission_platform ("" : "<gpus>xCPU")
  bool echo = false;                     // MLLOG lines on stdout too
  MllogWriter::Clock clock;              // tests
};

struct EvalPoint {
  std::int64_t samples = 0;
  double loss = 0;
};

struct RunOutcome {
  int index = 0;
  std::uint64_t seed = 0;
  bool converged = false;
  double ttt_min = 0;  // (run_stop - run_start) / 60000
  std::int64_t samples = 0;
  int steps = 0;
  std::vector<EvalPoint> evals;
  std::filesystem::path log;
  std::string data;  // what the run trained on (Dataset::label)
};

// The hyperparameters a run uses: each setting's default, then the overrides. Closed division: an override of a fixed
// setting raises Error{config} naming the rule and --division open; an unknown name raises with the nearest one.
std::map<std::string, double> resolve_settings(const Benchmark& b, const RunSpec& spec);

Record to_record(const RunSpec& spec, const RunOutcome& o);

// Everything a run needs, before anything is written: the benchmark, the overrides, the counts, the data folder and
// its files (opened and checked).
// Raises Error{config} with one message.
void validate(const RunSpec& spec);
// validate(spec), then spec.runs runs; on_run after each.
std::vector<RunOutcome> run_mlperf(const RunSpec& spec, const std::function<void(const RunOutcome&)>& on_run = {});

}  // namespace tb::mlperf
