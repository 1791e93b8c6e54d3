// report/sweep.h: `trainbench sweep`: a grid (every combination of the --vary axes, the first axis slowest) or a
// listed set of points, each run as a normal `trainbench run` into OUT/points/<name>/ (its own run.json and
// results.jsonl), and one "sweep.point" record per point in OUT/results.jsonl:
//   ok       the point's metrics copied from its run record: tokens_per_s_per_gpu, step_s (extrapolated),
//            tflops_per_gpu, mfu, peak_alloc_gib (largest over its measured points)
//   skipped  infeasible before any work (the layout does not divide, the memory estimate does not fit, an
//            option the backend refuses): reason
//   error    the point's run failed: the last line of its log
// Resumable: a point whose folder already holds an ok "run" record is not run again (resumed = true).
// The best point (highest tokens/s per GPU) is named at the end and highlighted by `trainbench report`.
// The work itself (checking feasibility, running a point) is injected (SweepHooks), so this runs in tests
// without a GPU, and cli/cmd_sweep.cpp wires it to recipe::plan_run, train::estimate_memory and a subprocess.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/record.h"

namespace tb::report {

struct Axis {
  std::string key;
  std::vector<std::string> values;
};
using Point = std::vector<std::pair<std::string, std::string>>;  // in axis order

Axis parse_axis(const std::string& text);                  // "micro_batch=1,2,4"; Error{config} when malformed
std::vector<Point> expand_grid(const std::vector<Axis>& axes);
Point parse_point(const std::string& text);                // "micro_batch=2,recompute=full" (a listed point)
std::string point_name(const Point& p);                    // "micro_batch=2,recompute=full" ('/' -> '_')

// The last ok record of `bench` ("run": a recipe run, "train": a training run) in dir/results.jsonl, if any.
std::optional<nlohmann::json> finished_run(const std::filesystem::path& dir, std::string_view bench = "run");

struct PointRun {
  int rc = 0;           // the run's exit status; 2 (configuration) counts as skipped
  std::string message;  // the reason / error line
};

struct SweepHooks {
  std::function<std::string(const Point&)> infeasible;                           // "" when it can run, else why not
  std::function<PointRun(const Point&, const std::filesystem::path& dir)> run;  // runs the point into dir
  std::function<void(const std::string&)> say = [](const std::string&) {};     // progress lines
};

struct SweepSpec {
  std::string recipe;
  std::vector<Point> points;
  std::filesystem::path out;  // the sweep folder
};

// Runs (or resumes) every point, writing one "sweep.point" record each into sink. Returns the records' JSON.
std::vector<nlohmann::json> run_sweep(const SweepSpec& spec, const SweepHooks& hooks, JsonlSink& sink);

// The metrics of a "sweep.point" record taken from a point's run record.
nlohmann::json point_metrics(const nlohmann::json& run_record);

}  // namespace tb::report
