// cli/cmd_mlperf.cpp: `trainbench mlperf BENCHMARK [options]`: MLPerf Training time-to-train runs with MLLOG logs
// (mlperf/run.h); `trainbench mlperf summarize DIR`: the score of several runs' logs and each log's compliance
// verdict (mlperf/summarize.h). docs/MLPERF.md.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "mlperf/run.h"
#include "mlperf/summarize.h"

namespace tb::cli {
namespace {

// "lr=1e-3" -> {"lr", 1e-3}; Error{config} otherwise.
std::pair<std::string, double> parse_set(const std::string& kv) {
  const auto eq = kv.find('=');
  if (eq == std::string::npos || eq == 0)
    raise_config(fmt::format("--set {}: expected NAME=VALUE, e.g. --set lr=1e-3", kv));
  const std::string value = kv.substr(eq + 1);
  try {
    std::size_t used = 0;
    const double v = std::stod(value, &used);
    if (used == value.size()) return {kv.substr(0, eq), v};
  } catch (const std::exception&) {
  }
  raise_config(fmt::format("--set {}: '{}' is not a number", kv, value));
}

// The folder holding the mlperf_logging package: --mlperf-logging, else .deps/mlperf of the source tree when the
// command runs there, else "" (python3's own path).
std::string logging_path(const std::string& given) {
  if (!given.empty()) return given;
  return std::filesystem::is_directory(".deps/mlperf/mlperf_logging") ? ".deps/mlperf" : "";
}

int cmd_summarize(int argc, char** argv) {
  CLI::App app{"the score of several MLPerf runs' logs (olympic mean) and each log's compliance verdict",
               "trainbench mlperf summarize"};
  std::filesystem::path dir;
  std::vector<std::string> rulesets = {"4.1.0", "5.0.0"};
  std::string pythonpath;
  app.add_option("dir", dir, "folder of result_<k>.txt MLLOG files (what `trainbench mlperf` writes)")->required();
  app.add_option("--ruleset", rulesets, "compliance checker training rulesets")->capture_default_str();
  app.add_option("--mlperf-logging", pythonpath, "folder holding the mlperf_logging package (default: .deps/mlperf "
                                                 "when run in the source tree, else python3's path)");
  if (auto code = parse(app, argc, argv)) return *code;
  const mlperf::Summary s = mlperf::summarize(dir, rulesets, logging_path(pythonpath));
  std::printf("%s: %zu logs\n", s.benchmark.c_str(), s.logs.size());
  for (const auto& l : s.logs) {
    std::string verdicts;
    for (const auto& v : l.verdicts)
      verdicts += fmt::format(" | {} {}", v.ruleset, !v.checked ? "not checked" : v.passed ? "PASS" : "FAIL");
    std::printf("  %-16s  %s  %s%s%s\n", l.file.filename().c_str(),
                l.ttt_min ? fmt::format("{:8.3f} min", *l.ttt_min).c_str() : "       - min", l.status.c_str(),
                verdicts.c_str(), l.dropped ? fmt::format("  dropped: {}", l.drop_reason).c_str() : "");
  }
  if (s.score_min)
    std::printf("score (olympic mean, %d dropped): %.3f min%s\n", s.dropped, *s.score_min,
                s.valid ? "" : " (not a valid MLPerf result)");
  for (const auto& n : s.notes) std::printf("note: %s\n", n.c_str());
  return s.score_min ? kOk : kFailed;
}

}  // namespace

int cmd_mlperf(int argc, char** argv) {
  if (argc >= 2 && std::string_view(argv[1]) == "summarize") return cmd_summarize(argc - 1, argv + 1);
  CLI::App app{"MLPerf Training time-to-train runs with MLLOG logs (`trainbench mlperf summarize DIR`: the score)",
               "trainbench mlperf"};
  mlperf::RunSpec spec;
  std::string division = "closed";
  std::vector<std::string> sets;
  std::optional<std::filesystem::path> out;
  int max_steps = 0;
  app.add_option("benchmark", spec.benchmark, "llama2_70b_lora | gpt3")->required();
  app.add_option("--data", spec.data, "the benchmark's converted data folder (default: the synthetic task, not "
                                      "comparable with MLPerf results)");
  app.add_option("--gpus", spec.gpus, "GPUs of the platform (the log's submission_platform)")
      ->check(whole_number(1));
  app.add_option("--seed", spec.seed, "seed of run 0; run k uses seed + k")->capture_default_str();
  app.add_option("--runs", spec.runs, "runs (the rules: 10 for llama2_70b_lora, 3 for gpt3)")
      ->check(whole_number(1, 100))->capture_default_str();
  app.add_option("--division", division, "closed | open (open: --set may change the fixed hyperparameters)")
      ->capture_default_str();
  app.add_option("--set", sets, "NAME=VALUE: a hyperparameter (closed: only the ones the rules leave free, e.g. lr)");
  app.add_option("--global-batch", spec.global_batch, "sequences per step (default: the reference's)")
      ->check(whole_number(1));
  app.add_option("--max-steps", max_steps, "step limit (default: the benchmark's max_steps)")->check(whole_number(1));
  app.add_option("--org", spec.org, "submission_org")->capture_default_str();
  app.add_option("--platform", spec.platform, "submission_platform (default: '<gpus>xCPU (trainbench CPU proxy)')");
  app.add_option("-o,--out", out, "results folder (default: results/<run id>)");
  app.add_flag("--echo", spec.echo, "print the MLLOG lines too");
  if (auto code = parse(app, argc, argv)) return *code;
  spec.division = mlperf::parse_division(division);
  for (const auto& kv : sets) spec.overrides.insert(parse_set(kv));
  if (max_steps > 0) spec.max_steps = max_steps;
  mlperf::validate(spec);  // bad input refused before anything is written
  CommonOptions opt;
  opt.out = out;
  RunOutput run = open_run(opt, argc, argv);
  spec.out = run.dir;
  int converged = 0;
  std::string label;
  mlperf::run_mlperf(spec, [&](const mlperf::RunOutcome& o) {
    run.sink->write(mlperf::to_record(spec, o));
    converged += o.converged;
    label = o.data;
    std::printf("run %d (seed %llu): %s after %lld samples (%d steps), time to train %.3f min, last eval loss %s\n",
                o.index, static_cast<unsigned long long>(o.seed), o.converged ? "reached the target" : "stopped",
                static_cast<long long>(o.samples), o.steps, o.ttt_min,
                o.evals.empty() ? "-" : fmt::format("{:.4f}", o.evals.back().loss).c_str());
  });
  std::printf("logs: %s/result_<k>.txt (%s); score: trainbench mlperf summarize %s\n", run.dir.c_str(),
              label.c_str(), run.dir.c_str());
  print_results_location(run);
  return converged == spec.runs ? kOk : kFailed;
}

}  // namespace tb::cli
