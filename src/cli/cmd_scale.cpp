// cli/cmd_scale.cpp: `trainbench scale <recipe> --gpus 1,2,4,8 [--mode weak|strong]`: the recipe at each GPU count,
// efficiency against the smallest, per-GPU throughput, communication share where known (report/scale.h).
// Each count is measured as its per-GPU proxy (`trainbench run --ref-gpus N`) and projected (`trainbench project --gpus
// N --from` that proxy), and where this node has the GPUs, trained for real (`trainbench train --gpus N`, data
// parallel); every row says which.
#include <fmt/format.h>

#include <cstdio>

#include "cli/commands.h"
#include "bench/sysinfo.h"
#include "cli/common.h"
#include "report/run_args.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/provenance.h"
#include "recipe/recipe.h"
#include "report/exec.h"
#include "report/scale.h"

namespace tb::cli {
using report::check_sweep_key;
using report::run_args;
using report::run_point;
using report::last_line;

int cmd_scale(int argc, char** argv) {
  CLI::App app{"a recipe at several GPU counts: per-GPU throughput, efficiency, communication share", "trainbench scale"};
  std::string name, mode = "weak", device = "cuda", system;
  std::vector<int> gpus;
  std::vector<std::string> sets;
  std::optional<std::filesystem::path> out, recipes_dir;
  int steps = 0, warmup = -1;
  bool no_project = false;
  app.add_option("recipe", name, "a recipe of `trainbench list recipes`")->required();
  app.add_option("--gpus", gpus, "GPU counts, e.g. 1,2,4,8")->required()->delimiter(',')->check(whole_number(1));
  app.add_option("--mode", mode, "weak: the recipe's layout per count (global batch grows); strong: the smallest "
                                 "count's global batch throughout")->check(CLI::IsMember({"weak", "strong"}))->capture_default_str();
  app.add_option("--set", sets, "fixed for every count: key=value (layers seq micro_batch tp pp cp vp precision ...)");
  app.add_option("--out", out, "the scaling folder (rerun to resume; default results/scale-<recipe>-<id>)");
  app.add_option("--steps", steps, "measured steps per run (default: run's)");
  app.add_option("--warmup-steps", warmup, "unmeasured steps per run (default: run's)");
  app.add_option("--device", device, "cuda or cpu")->check(CLI::IsMember({"cuda", "cpu"}))->capture_default_str();
  app.add_option("--system", system, "the projection's target system (trainbench project --system)");
  app.add_flag("--no-project", no_project, "measured points only, no projection");
  app.add_option("--recipes", recipes_dir, "recipes folder (default: next to the binary, or $TRAINBENCH_RECIPES)");
  if (auto rc = parse(app, argc, argv)) return *rc;

  const auto recipes = recipe::load_recipes(recipe::find_recipes_dir(recipes_dir));
  const recipe::Recipe& r = recipe::find_recipe(recipes, name);
  std::sort(gpus.begin(), gpus.end());
  gpus.erase(std::unique(gpus.begin(), gpus.end()), gpus.end());
  report::Point fixed;
  for (const auto& s : sets) {
    const report::Point p = report::parse_point(s);
    for (const auto& [k, v] : p) TB_REQUIRE(k != "ref_gpus", "--gpus sets the GPU count, not --set ref_gpus");
    fixed.insert(fixed.end(), p.begin(), p.end());
  }
  const auto fixed_args = run_args(fixed);

  report::ScaleSpec spec{r.name, mode, gpus, out ? *out : std::filesystem::path("results") / fmt::format("scale-{}-{}", r.name, make_run_id())};
  report::ScaleHooks hooks;
  // Measured: the recipe's model (its preset; the proxy's layers, default 8, and sequence) trained for real on N GPUs
  // of this node, data parallel (`trainbench train --gpus N`): micro-batch per GPU fixed, global batch micro x N
  // (weak) or the smallest count's (strong). Compares GPU counts of one model; the proxy rows extrapolate depth.
  auto fixed_value = [&](const std::string& key, const std::string& fallback) {
    for (const auto& [k, v] : fixed)
      if (k == key) return v;
    return fallback;
  };
  hooks.measured = [&](int n, const std::filesystem::path& dir, std::string* why) -> std::optional<nlohmann::json> {
    if (device != "cuda") return *why = "measured points need --device cuda", std::nullopt;
    if (r.shape_overridden) return *why = "the recipe overrides its preset's shape (train takes presets)", std::nullopt;
    if (const int visible = bench::visible_gpu_count(); visible < n)
      return *why = fmt::format("this node shows {} GPU{}", visible, visible == 1 ? "" : "s"), std::nullopt;
    const int micro = std::stoi(fixed_value("micro_batch", "1"));
    const int global = mode == "strong" ? micro * gpus.front() : micro * n;
    std::vector<std::string> argv2{report::self_exe(), "train", "--model", r.preset, "--layers", fixed_value("layers", "8"),
                                   "--seq", fixed_value("seq", std::to_string(r.model.seq)), "--micro-batch",
                                   std::to_string(micro), "--global-batch", std::to_string(global), "--precision",
                                   fixed_value("precision", r.precisions.front()), "--gpus", std::to_string(n),
                                   "--no-op-profile", "--out", dir.string()};
    if (steps > 0) argv2.insert(argv2.end(), {"--steps", std::to_string(steps + std::max(warmup, 0))});
    if (warmup >= 0) argv2.insert(argv2.end(), {"--warmup-steps", std::to_string(warmup)});
    const report::ExecResult res = report::exec(argv2);
    if (const auto trained = report::finished_run(dir, "train")) {
      const nlohmann::json& j = *trained;
      return nlohmann::json{
          {"tokens_per_s_per_gpu", j.value("tokens_per_s_per_gpu", 0.0)},
          {"step_ms", j.value("step_ms", nlohmann::json::object()).value("median", 0.0)},
          {"tflops_per_gpu", j.value("tflops", 0.0)},
          {"mfu", j.value("mfu", 0.0)},
          {"peak_alloc_gib", j.value("peak_alloc_gib", 0.0)},
          {"point_run", j.value("run", "")},
          {"note", fmt::format("trained on {} GPUs (data parallel, ZeRO-1), {} layers", n, j.value("layers", 0))}};
    }
    *why = fmt::format("trainbench train --gpus {}: {}", n, last_line(res.output));
    return std::nullopt;
  };
  hooks.proxy = [&](int n, int global_batch, const std::filesystem::path& dir) {
    std::vector<std::string> args{r.name, "--device", device, "--ref-gpus", std::to_string(n)};
    args.insert(args.end(), fixed_args.begin(), fixed_args.end());
    if (global_batch > 0) args.insert(args.end(), {"--set", fmt::format("global_batch={}", global_batch)});
    if (steps > 0) args.insert(args.end(), {"--steps", std::to_string(steps)});
    if (warmup >= 0) args.insert(args.end(), {"--warmup-steps", std::to_string(warmup)});
    return run_point(args, dir);
  };
  if (!no_project)
    hooks.project = [&](int n, const std::filesystem::path& from, std::string* why) -> std::optional<nlohmann::json> {
      std::vector<std::string> argv2{report::self_exe(), "project", r.name, "--gpus", std::to_string(n), "--from",
                                     from.string(), "--json"};
      for (const auto& [k, v] : fixed) {
        if (k == "precision") argv2.insert(argv2.end(), {"--precision", v});
        if (k == "layers" || k == "seq" || k == "micro_batch" || k == "global_batch" || k == "tp" || k == "pp" ||
            k == "cp" || k == "vp")
          argv2.insert(argv2.end(), {"--set", k + "=" + v});
      }
      if (!system.empty()) argv2.insert(argv2.end(), {"--system", system});
      const report::ExecResult res = report::exec(argv2);
      const auto a = res.output.find('{'), b = res.output.rfind('}');
      if (res.rc == 0 && a != std::string::npos && b != std::string::npos) {
        try {
          return nlohmann::json::parse(res.output.substr(a, b - a + 1));
        } catch (const std::exception&) {
        }
      }
      *why = fmt::format("trainbench project: {}", last_line(res.output));
      return std::nullopt;
    };
  hooks.say = [](const std::string& s) {
    std::printf("%s\n", s.c_str());
    std::fflush(stdout);
  };
  std::printf("scale %s (%s): %zu GPU counts into %s\n", r.name.c_str(), mode.c_str(), gpus.size(), spec.out.c_str());
  CommonOptions common;
  common.out = spec.out;
  auto run = open_run(common, argc, argv);
  install_interrupt_handler();  // a stop request reaches the running point (report/exec.h) and ends the loop
  const auto recs = report::run_scale(spec, hooks, *run.sink);
  int failed = 0;
  for (const auto& j : recs) failed += j.value("status", "") == "error";
  print_results_location(run);
  if (interrupted()) {
    std::printf("interrupted: run the same command again to resume after the recorded points\n");
    return kFailed;
  }
  std::printf("report: trainbench report %s -o %s\n", spec.out.c_str(), (spec.out / "report.html").c_str());
  return failed ? kFailed : kOk;
}

}  // namespace tb::cli
