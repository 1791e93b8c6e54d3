// cli/cmd_scale.cpp: `trainbench scale <recipe> --gpus 1,2,4,8 [--mode weak|strong]`: the recipe at each GPU count,
// efficiency against the smallest, per-GPU throughput, communication share where known (report/scale.h). Until
// multi-GPU training exists each count is measured as its per-GPU proxy (`trainbench run --ref-gpus N`) and projected
// (`trainbench project --gpus N --from` that proxy); every row says which.
#include <fmt/format.h>

#include <cstdio>

#include "cli/commands.h"
#include "cli/common.h"
#include "report/run_args.h"
#include "core/error.h"
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
  app.add_option("--gpus", gpus, "GPU counts, e.g. 1,2,4,8")->required()->delimiter(',')->check(CLI::PositiveNumber);
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
    for (const auto& [k, v] : p) TB_REQUIRE(k != "ref_gpus", "scale: --gpus sets the GPU count, not --set ref_gpus");
    fixed.insert(fixed.end(), p.begin(), p.end());
  }
  const auto fixed_args = run_args(fixed);

  report::ScaleSpec spec{r.name, mode, gpus, out ? *out : std::filesystem::path("results") / fmt::format("scale-{}-{}", r.name, make_run_id())};
  report::ScaleHooks hooks;
  hooks.measured = [](int, const std::filesystem::path&, std::string* why) -> std::optional<nlohmann::json> {
    // Multi-GPU training (the parallel issue) plugs in here: run `trainbench run --gpus N` into dir and return
    // point_metrics() of its run record plus the measured comm share.
    *why = "multi-GPU training is not built yet: proxy and projection only";
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
  const auto recs = report::run_scale(spec, hooks, *run.sink);
  int failed = 0;
  for (const auto& j : recs) failed += j.value("status", "") == "error";
  print_results_location(run);
  std::printf("report: trainbench report %s -o %s\n", spec.out.c_str(), (spec.out / "report.html").c_str());
  return failed ? kFailed : kOk;
}

}  // namespace tb::cli
