// report/scale.h: `trainbench scale`: one recipe at several GPU counts, one "scale.point" record per (GPU count,
// source) in OUT/results.jsonl, efficiency relative to the smallest count (analysis.h). Sources, each labelled:
//   measured   a real run on N GPUs of this node (`trainbench train --gpus N`, data parallel, the proxy's layers)
//   proxy      `trainbench run --ref-gpus N`: the per-GPU shard of the N-GPU layout on one GPU, extrapolated to
//              the layout's step: compute only, no communication, no pipeline bubble (OUT/gpus-N/)
//   projected  `trainbench project --gpus N --from OUT/gpus-N`: the proxy's compute plus modelled communication
//              and bubble; comm_share = (tp + cp + pp + dp exposed communication) / step
// Mode weak: each count uses the recipe's layout for N (its scale rule grows the global batch with N).
// Mode strong: every count keeps the smallest count's global batch (--set global_batch=G for the proxy runs).
// Proxy points are resumable as sweep points are (a folder with an ok run record is not run again).
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/record.h"
#include "report/sweep.h"

namespace tb::report {

struct ScaleSpec {
  std::string recipe, mode = "weak";  // weak | strong
  std::vector<int> gpus;              // ascending
  std::filesystem::path out;
};

struct ScaleHooks {
  // A real N-GPU run into dir; nullopt (with *why) while multi-GPU training does not exist.
  std::function<std::optional<nlohmann::json>(int gpus, const std::filesystem::path& dir, std::string* why)> measured;
  // The proxy run into dir; global_batch > 0: keep that global batch (strong scaling).
  std::function<PointRun(int gpus, int global_batch, const std::filesystem::path& dir)> proxy;
  // `trainbench project --json` of N GPUs from the proxy's folder; nullopt (with *why) when it cannot.
  std::function<std::optional<nlohmann::json>(int gpus, const std::filesystem::path& from, std::string* why)> project;
  std::function<void(const std::string&)> say = [](const std::string&) {};
};

std::vector<nlohmann::json> run_scale(const ScaleSpec& spec, const ScaleHooks& hooks, JsonlSink& sink);

// comm_share of a `trainbench project --json` object (breakdown_s): exposed communication / step_s.
double projected_comm_share(const nlohmann::json& projection);

}  // namespace tb::report
