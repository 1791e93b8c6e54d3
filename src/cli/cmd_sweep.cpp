// cli/cmd_sweep.cpp: `trainbench sweep <recipe> --vary key=v1,v2 [--vary ...] | --point k=v,k=v ...`: every point a
// normal `trainbench run` in OUT/points/<point>/, infeasible points skipped with the reason, resumable, the best named
// (report/sweep.h). Feasibility before any work: recipe::plan_run (layouts divide) and, on a GPU, the trainer's
// memory estimate (train::fit_advice) of the point's largest measured layer count against the GPU's memory.
#include <fmt/format.h>

#include <cstdio>

#include "bench/sysinfo.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "report/run_args.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/provenance.h"
#include "recipe/plan.h"
#include "report/sweep.h"
#include "train/trainer.h"

namespace tb::cli {
using report::check_sweep_key;
using report::run_args;
using report::run_point;
using report::last_line;
namespace {

double gpu_memory_bytes() {
  try {
    const auto info = bench::gpu_info();
    if (info.contains("gpus") && !info["gpus"].empty())
      return info["gpus"][0].value("memory_gib", 0.0) * double(1ull << 30);
  } catch (const std::exception&) {
  }
  return 0;
}

// "" when the point can run, else why not (the plan's error, or the memory estimate's advice).
std::string infeasible(const recipe::Recipe& r, const report::Point& fixed, const report::Point& p, double mem_bytes,
                       const std::string& device) {
  recipe::RunOptions opt;
  std::string recompute = "none";
  for (const auto* pts : {&fixed, &p})
    for (const auto& [k, v] : *pts) {
      if (k == "precision") opt.precision = v;
      else if (k == "recompute") recompute = v;
      else if (k == "ref_gpus") opt.ref_gpus = std::stoi(v);
      else if (k != "steps") opt.sets[k] = v;
    }
  if (opt.precision.empty()) opt.precision = device == "cpu" ? "fp32" : "bf16";
  try {
    const recipe::RunPlan plan = recipe::plan_run(r, opt);
    if (device == "cpu" || mem_bytes <= 0) return "";
    train::TrainSpec spec;
    spec.model.config = plan.shard;
    spec.model.config->layers = plan.points.back();
    spec.model.preset = plan.shard.name;
    spec.batch.micro = spec.batch.global = plan.layout.micro_batch;
    spec.memory.recompute = train::parse_choice(train::kRecomputeModes, recompute, "recompute");
    spec.precision.linear = train::parse_choice(train::kPrecisions, opt.precision, "precision");
    return train::fit_advice(spec, *spec.model.config, mem_bytes - double(1ull << 30));  // ~1 GiB: context, libraries
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {  // std::stoi
    return fmt::format("bad value: {}", e.what());
  }
}

}  // namespace

int cmd_sweep(int argc, char** argv) {
  CLI::App app{"run a recipe over a grid of settings; skipped points say why; resumable; the best named", "trainbench sweep"};
  std::string name, device = "cuda";
  std::vector<std::string> vary, listed, sets;
  std::optional<std::filesystem::path> out, recipes_dir;
  int steps = 0, warmup = -1;
  double mem_gib = 0;
  bool dry = false;
  app.add_option("recipe", name, "a recipe of `trainbench list recipes`")->required();
  app.add_option("--vary", vary, "key=v1,v2,... (repeat for a grid): layers seq micro_batch global_batch tp pp cp vp "
                                 "precision recompute ref_gpus steps");
  app.add_option("--point", listed, "a listed point key=v,key=v (repeat; instead of or after the grid)");
  app.add_option("--set", sets, "fixed for every point: key=value (the same keys)");
  app.add_option("--out", out, "the sweep folder (rerun with the same folder to resume; default results/sweep-<recipe>-<id>)");
  app.add_option("--steps", steps, "measured steps per run point (default: run's)");
  app.add_option("--warmup-steps", warmup, "unmeasured steps per run point (default: run's)");
  app.add_option("--device", device, "cuda or cpu")->check(CLI::IsMember({"cuda", "cpu"}))->capture_default_str();
  app.add_option("--gpu-memory-gib", mem_gib, "memory for the fit check (default: GPU 0's; 0 on the CPU: no check)");
  app.add_option("--recipes", recipes_dir, "recipes folder (default: next to the binary, or $TRAINBENCH_RECIPES)");
  app.add_flag("--dry-run", dry, "list the points and whether each can run; run nothing");
  if (auto rc = parse(app, argc, argv)) return *rc;

  const auto recipes = recipe::load_recipes(recipe::find_recipes_dir(recipes_dir));
  const recipe::Recipe& r = recipe::find_recipe(recipes, name);
  std::vector<report::Axis> axes;
  for (const auto& v : vary) {
    axes.push_back(report::parse_axis(v));
    check_sweep_key(axes.back().key);
  }
  std::vector<report::Point> points = axes.empty() ? std::vector<report::Point>{} : report::expand_grid(axes);
  for (const auto& l : listed) points.push_back(report::parse_point(l));
  TB_REQUIRE(!points.empty(), "give --vary key=v1,v2 (a grid) or --point key=v,key=v (a listed set)");
  report::Point fixed;
  for (const auto& s : sets) {
    const report::Point p = report::parse_point(s);
    fixed.insert(fixed.end(), p.begin(), p.end());
  }
  for (const auto& p : points)
    for (const auto& [k, v] : p) report::check_sweep_value(k, v);
  for (const auto& [k, v] : fixed) report::check_sweep_value(k, v);
  const double mem = mem_gib > 0 ? mem_gib * double(1ull << 30) : device == "cuda" ? gpu_memory_bytes() : 0;

  report::SweepSpec spec{r.name, points, out ? *out : std::filesystem::path("results") / fmt::format("sweep-{}-{}", r.name, make_run_id())};
  std::printf("sweep %s: %zu points into %s\n", r.name.c_str(), points.size(), spec.out.c_str());
  if (dry) {
    for (const auto& p : points) {
      const std::string why = infeasible(r, fixed, p, mem, device);
      std::printf("  %-48s %s\n", report::point_name(p).c_str(), why.empty() ? "can run" : ("skip: " + why).c_str());
    }
    return kOk;
  }
  report::SweepHooks hooks;
  hooks.infeasible = [&](const report::Point& p) { return infeasible(r, fixed, p, mem, device); };
  hooks.run = [&](const report::Point& p, const std::filesystem::path& dir) {
    std::vector<std::string> args{r.name, "--device", device};
    const auto f = run_args(fixed), a = run_args(p);
    args.insert(args.end(), f.begin(), f.end());
    args.insert(args.end(), a.begin(), a.end());
    if (steps > 0) args.insert(args.end(), {"--steps", std::to_string(steps)});
    if (warmup >= 0) args.insert(args.end(), {"--warmup-steps", std::to_string(warmup)});
    return run_point(args, dir);
  };
  hooks.say = [](const std::string& s) {
    std::printf("%s\n", s.c_str());
    std::fflush(stdout);
  };
  CommonOptions common;
  common.out = spec.out;
  auto run = open_run(common, argc, argv);
  install_interrupt_handler();  // a stop request reaches the running point (report/exec.h) and ends the loop
  const auto recs = report::run_sweep(spec, hooks, *run.sink);
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
