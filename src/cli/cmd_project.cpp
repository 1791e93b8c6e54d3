// cli/cmd_project.cpp: `trainbench project <recipe> --gpus N [--system FILE] --from RESULTS`: the recipe's step at N
// GPUs of a target system (project/step_model.h) from a measured per-GPU proxy (`trainbench run`), with the
// breakdown, the sensitivity to the network bandwidth and how sure it is; `trainbench project --validate` does it
// for every published reference row it can and prints predicted vs published (project/validate.h); `--ttt` adds an
// MLPerf recipe's time to train at N GPUs beside NVIDIA's published row (mlperf/ttt.h). No GPU needed.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/suggest.h"
#include "mlperf/ttt.h"
#include "project/step_model.h"
#include "project/train_check.h"
#include "project/validate.h"
#include "recipe/convention.h"
#include "recipe/plan.h"
#include "recipe/reference.h"
#include "recipe/system.h"

namespace tb::cli {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// --system: a file, or the name of a references/systems file ("h100") or of its GPU ("H100").
const recipe::SystemRef& pick_system(std::vector<recipe::SystemRef>& systems, const std::string& want) {
  namespace fs = std::filesystem;
  if (fs::is_regular_file(want)) {
    systems.push_back(recipe::load_system(want));
    return systems.back();
  }
  std::vector<std::string> names;
  for (const auto& s : systems) {
    const std::string stem = fs::path(s.file).stem().string();
    names.push_back(stem);
    if (lower(stem) == lower(want)) return s;
  }
  if (const auto* s = recipe::match_system(systems, want)) return *s;
  raise_config(fmt::format("--system {}: no such file and no references/systems file of that name{}", want,
                           did_you_mean(lower(want), names)));
}

std::string pct(double x) { return fmt::format("{:+.1f}%", 100 * x); }

const char* kNeedsMeasurement =
    "trainbench project needs a per-GPU measurement of the recipe (its proxy, on one GPU):\n"
    "  trainbench run %s                         # writes results/<run id>/results.jsonl\n"
    "  trainbench project %s --gpus N --from results/<run id>\n"
    "or use the H200 measurements shipped with trainbench: --from %s\n";

nlohmann::json to_json(const project::Projection& p, const project::Context& ctx) {
  const auto& l = p.layout;
  return {{"recipe", p.recipe},
          {"precision", p.precision},
          {"system", ctx.target_name},
          {"layout",
           {{"gpus", l.gpus},
            {"tp", l.tp},
            {"pp", l.pp},
            {"cp", l.cp},
            {"vp", l.vp},
            {"dp", l.dp},
            {"ep", l.ep},
            {"etp", l.expert_tp()},
            {"micro_batch", l.micro_batch},
            {"global_batch", l.global_batch},
            {"layers", l.layers},
            {"seq", l.seq},
            {"grad_accum", p.grad_accum},
            {"where", l.where}}},
          {"anchor",
           {{"where", p.anchor->where},
            {"recipe", p.anchor->recipe},
            {"gpu", p.anchor->gpu},
            {"kind", std::string(project::anchor_kind_name(p.anchor_kind))},
            {"layer_scale", p.layer_scale},
            {"hardware_factor", p.hardware_factor}}},
          {"layer",
           {{"from", ctx.layer_time == project::LayerTime::fit ? "fit" : "measured"},
            {"fit_ms", 1e3 * p.layer_fit_s},
            {"measured_ms", 1e3 * p.layer_measured_s},
            {"target_ms", 1e3 * p.layer_s}}},
          {"calibration",
           {{"reference_efficiency", ctx.cal.reference_efficiency},
            {"overlap_cost", ctx.cal.overlap_cost},
            {"straggler_sigma_ms", 1e3 * ctx.cal.straggler_sigma_s}}},
          {"step_ms", 1e3 * p.step_s},
          {"breakdown_ms",
           {{"compute", 1e3 * p.compute_s},
            {"tp_exposed", 1e3 * p.tp_exposed_s},
            {"cp_exposed", 1e3 * p.cp_exposed_s},
            {"ep_exposed", 1e3 * p.ep_exposed_s},
            {"bubble", 1e3 * p.bubble_s},
            {"pp_exposed", 1e3 * p.pp_exposed_s},
            {"dp_exposed", 1e3 * p.dp_exposed_s},
            {"optimizer", 1e3 * p.optimizer_s},
            {"stragglers", 1e3 * p.straggler_s}}},
          {"comm_ms",
           {{"tp", 1e3 * p.tp_comm_s},
            {"cp", 1e3 * p.cp_comm_s},
            {"ep", 1e3 * p.ep_comm_s},
            {"pp", 1e3 * p.pp_comm_s},
            {"dp_reduce_scatter", 1e3 * p.dp_reduce_scatter_s},
            {"dp_all_gather", 1e3 * p.dp_all_gather_s}}},
          {"tokens_per_s_per_gpu", p.tokens_per_s_per_gpu},
          {"tflops_per_gpu", p.tflops_per_gpu},
          {"flop_convention", std::string(recipe::convention_name(p.convention))},
          {"mfu", p.mfu}};
}

int run_validate(const std::vector<recipe::Recipe>& recipes, const std::vector<recipe::ReferenceRow>& rows,
                 const project::Context& ctx, bool calibrate, double max_error, double median_error, double points) {
  std::vector<project::Skip> skipped;
  const auto cases = project::reference_cases(recipes, rows, ctx, &skipped);
  if (cases.empty()) {
    std::fprintf(stderr, "trainbench project --validate: no %s reference row has a measurement in --from\n",
                 ctx.target_name.c_str());
    return kUsage;
  }
  auto v = project::validate(cases, ctx);
  v.skipped = skipped;
  std::printf(
      "validation on %s: per-GPU compute measured on %s, layer time %s, efficiency %.3f, overlap cost %.2f, "
      "straggler sigma %.0f ms (%s)\n\n",
      ctx.target_name.c_str(), ctx.source_name.c_str(),
      ctx.layer_time == project::LayerTime::fit ? "from the cost model" : "of the anchor", ctx.cal.reference_efficiency,
      ctx.cal.overlap_cost, 1e3 * ctx.cal.straggler_sigma_s, ctx.cal_source.c_str());
  std::printf("%s", project::render_validation(v).c_str());
  bool scaling_ok = true;
  for (const auto& s : v.scaling)
    if (s.primary && std::abs(s.points()) > points) scaling_ok = false;
  const bool ok = v.primary.max <= max_error / 100 && v.primary.median <= median_error / 100 && scaling_ok;
  std::printf(
      "\nacceptance (primary rows): max |error| %.1f%% <= %.0f%%: %s; median %.1f%% <= %.0f%%: %s; weak scaling "
      "within %.0f points: %s\n",
      100 * v.primary.max, max_error, v.primary.max <= max_error / 100 ? "yes" : "NO", 100 * v.primary.median,
      median_error, v.primary.median <= median_error / 100 ? "yes" : "NO", points, scaling_ok ? "yes" : "NO");
  if (calibrate) std::printf("\n%s", project::render_cross_validation(project::cross_validate(cases, ctx)).c_str());
  return ok ? kOk : kFailed;
}

}  // namespace

int cmd_project(int argc, char** argv) {
  CLI::App app{"project a recipe to N GPUs: measured per-GPU work + modelled communication = predicted step time",
               "trainbench project"};
  std::string name, system = "H100", precision, release, convention;
  int gpus = 0;
  std::vector<std::filesystem::path> from;
  std::optional<std::filesystem::path> recipes_dir, references_dir;
  std::optional<double> efficiency, overlap_cost, straggler_sigma_ms;
  std::string layer_time = "fit";
  bool validate = false, calibrate = false, json = false, ttt = false;
  double max_error = 15, median_error = 8, scaling_points = 5;
  app.add_option("recipe", name, "a recipe of `trainbench list recipes`");
  app.add_option("--gpus", gpus,
                 "the GPU count to project to (its layout: the recipe's, or derived by its scaling rule; at most 2^20)")
      ->check(whole_number(1, 1 << 20));
  app.add_option("--from", from,
                 "results of `trainbench run` (folders or results.jsonl files; micro.nccl records of 2+ "
                 "GPUs set the NVLink bandwidths; train records of 2+ GPUs are compared with the model)");
  app.add_option("--system", system,
                 "target system: a references/systems file or its name (h100, h200, cpu); default H100, or cpu when "
                 "every --from run was measured on the CPU");
  app.add_option("--precision", precision, "bf16 | fp8 (default: the recipe's first)");
  std::vector<std::string> sets;
  app.add_option("--set", sets,
                 "override the layout: layers, seq, micro_batch, global_batch, tp, pp, cp, vp (key=value)");
  app.add_option("--release", release, "the release whose layouts to use (default: the recipe's)");
  app.add_option("--convention", convention, "FLOP convention of TFLOP/s and MFU (default: the reference's)");
  app.add_option("--efficiency", efficiency,
                 "override [projection] reference_efficiency (1: trainbench's own kernels)");
  app.add_option("--overlap-cost", overlap_cost, "override [projection] overlap_cost");
  app.add_option("--straggler-sigma-ms", straggler_sigma_ms,
                 "override [projection] straggler_sigma_ms (0: no straggler term)");
  app.add_option("--layer-time", layer_time,
                 "per-GPU layer time: fit (the precision's cost model fitted to every measured proxy) or measured "
                 "(the anchor proxy's own, carried to the shard)")
      ->check(CLI::IsMember({"fit", "measured"}))
      ->capture_default_str();
  app.add_flag("--validate", validate, "project every published reference row of the target GPU model and compare");
  app.add_flag("--calibrate", calibrate,
               "with --validate: fit the three calibration constants and cross-validate them");
  app.add_option("--max-error", max_error, "--validate: largest |error| allowed on the primary rows, %")
      ->capture_default_str();
  app.add_option("--median-error", median_error, "--validate: median |error| allowed, %")->capture_default_str();
  app.add_option("--scaling-points", scaling_points, "--validate: weak-scaling efficiency gap allowed, points")
      ->capture_default_str();
  app.add_flag("--json", json, "print the projection as one JSON object");
  app.add_flag("--ttt", ttt,
               "an MLPerf recipe (mlperf-llama2-70b-lora, mlperf-gpt3-175b): its time to train at --gpus (samples to "
               "the target / projected samples/s + evaluations) beside NVIDIA's published row");
  app.add_option("--recipes", recipes_dir, "recipes folder (default: next to the binary, or $TRAINBENCH_RECIPES)");
  app.add_option("--references", references_dir, "references folder (default: next to the binary)");
  if (auto rc = parse(app, argc, argv)) return *rc;

  if (calibrate) validate = true;
  if (!validate && (name.empty() || gpus == 0)) {
    std::fprintf(stderr,
                 "trainbench project: give a recipe and --gpus N (or --validate); see trainbench project --help\n");
    return kUsage;
  }
  const auto recipes = recipe::load_recipes(recipe::find_recipes_dir(recipes_dir));
  const recipe::Recipe* r = validate ? nullptr : &recipe::find_recipe(recipes, name);
  if (ttt) {
    TB_REQUIRE(!validate, "--ttt projects one MLPerf recipe: give it without --validate");
    mlperf::benchmark_of_recipe(r->name);  // an MLPerf recipe, before any measurement is read
  }
  if (from.empty()) {
    const char* n = r ? r->name.c_str() : "<recipe>";
    const auto shipped = recipe::find_references_dir(references_dir) / "measured" / "h200-recipes";  // absolute
    std::fprintf(stderr, kNeedsMeasurement, n, n, shipped.c_str());
    return kUsage;
  }
  const auto refdir = recipe::find_references_dir(references_dir);
  auto systems = recipe::load_systems(refdir / "systems");
  systems.reserve(systems.size() + 1);  // pick_system may append a file given by path
  const project::Inputs inputs = project::load_inputs(from);
  const bool all_cpu = !inputs.runs.empty() && std::all_of(inputs.runs.begin(), inputs.runs.end(),
                                                           [](const auto& m) { return m.gpu == "CPU"; });
  if (app.count("--system") == 0 && all_cpu) system = "cpu";  // a CPU measurement projects to CPU ranks
  const recipe::SystemRef& target = pick_system(systems, system);
  project::Context ctx = project::make_context(recipes, inputs, systems, target);
  if (efficiency) ctx.cal.reference_efficiency = *efficiency, ctx.cal_source = "--efficiency";
  if (overlap_cost) ctx.cal.overlap_cost = *overlap_cost, ctx.cal_source = "--overlap-cost";
  if (straggler_sigma_ms)
    ctx.cal.straggler_sigma_s = *straggler_sigma_ms / 1e3, ctx.cal_source = "--straggler-sigma-ms";
  if (layer_time == "measured") ctx.layer_time = project::LayerTime::measured;
  // Real multi-GPU steps in --from: the model of those layouts on the measuring GPU next to them.
  std::vector<project::TrainCheck> checks;
  if (!inputs.trains.empty()) {
    project::Context on_source = project::make_context(recipes, inputs, systems, *ctx.source);
    on_source.cal.overlap_cost = ctx.cal.overlap_cost, on_source.layer_time = ctx.layer_time;
    checks = project::check_trains(inputs.trains, on_source);
  }
  TB_REQUIRE(ctx.cal.reference_efficiency > 0 && ctx.cal.overlap_cost >= 0 && ctx.cal.overlap_cost <= 1 &&
                 ctx.cal.straggler_sigma_s >= 0,
             "--efficiency must be positive, --overlap-cost in [0, 1] and --straggler-sigma-ms not negative");
  const auto rows = recipe::load_reference_dir(refdir);

  if (validate) {
    const int rc = run_validate(recipes, rows, ctx, calibrate, max_error, median_error, scaling_points);
    if (!checks.empty()) std::printf("\n%s", project::render_train_checks(checks).c_str());
    return rc;
  }

  if (precision.empty()) precision = r->precisions.front();
  std::map<std::string, std::string> set_map;
  for (const std::string& kv : sets) {
    const auto eq = kv.find('=');
    TB_REQUIRE(eq != std::string::npos && eq > 0, fmt::format("--set {}: expected key=value, e.g. --set cp=1", kv));
    set_map[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  // --ttt: the recipe's layout for the target's GPU model where it has one (NVIDIA's H200 layout), as the published
  // row ran it; otherwise (and without --ttt) the reference's H100 layouts.
  std::string layout_gpu;
  if (ttt)
    for (const auto& lay : r->layouts)
      if (!lay.gpu.empty() && target.name.find(lay.gpu) != std::string::npos) layout_gpu = lay.gpu;
  const recipe::Layout l =
      recipe::resolve_layout(*r, recipe::LayoutQuery(gpus, precision, release, layout_gpu), set_map);
  // The published row at this count (for the convention and the comparison), or the recipe's newest row.
  const recipe::ReferenceRow* published = nullptr;
  const recipe::ReferenceRow* any_row = nullptr;
  for (const auto& row : rows) {
    if (row.recipe != r->name || row.precision != precision || target.name.find(row.gpu) == std::string::npos) continue;
    if (!any_row || recipe::compare_releases(row.release(), any_row->release()) > 0) any_row = &row;
    const bool rel_ok = release.empty() || std::any_of(row.releases.begin(), row.releases.end(), [&](const auto& x) {
                          return recipe::release_matches(x, release);
                        });
    if (row.gpus == gpus && rel_ok && (!published || recipe::compare_releases(row.release(), published->release()) > 0))
      published = &row;
  }
  recipe::Convention conv = recipe::Convention::full;
  if (!convention.empty())
    conv = recipe::parse_convention(convention);
  else if (published && published->convention)
    conv = *published->convention;
  else if (any_row && any_row->convention)
    conv = *any_row->convention;

  const project::Projection p = project::project(*r, l, precision, ctx, conv);
  std::optional<mlperf::TttReport> ttt_of;
  if (ttt)
    ttt_of = mlperf::ttt_report(r->name, gpus, l.global_batch, l.seq, p.tokens_per_s_per_gpu, rows, target.name,
                                precision);
  if (json) {
    nlohmann::json j = to_json(p, ctx);
    if (ttt_of) j["time_to_train"] = mlperf::to_json(*ttt_of);
    std::printf("%s\n", j.dump(2).c_str());
    return kOk;
  }
  // Sensitivity to the network.
  auto step_with = [&](double nvl, double net) {
    project::Context c = ctx;
    c.net = ctx.net.scaled(nvl, net);
    return project::project(*r, l, precision, c, conv).step_s / p.step_s - 1;
  };
  const double so_lo = step_with(1, 0.8), so_hi = step_with(1, 1.2), nv_lo = step_with(0.8, 1),
               nv_hi = step_with(1.2, 1);
  auto step_with_sigma = [&](double factor) {
    project::Context c = ctx;
    c.cal.straggler_sigma_s *= factor;
    return project::project(*r, l, precision, c, conv).step_s / p.step_s - 1;
  };
  // How sure: the cost model's leave-one-out error and this recipe's published rows.
  const project::CostModel& cm = ctx.cost_model(precision);
  const auto loo = project::leave_one_out_errors(cm.samples, ctx.source_membw_tbps, cm.attn_given_tflops);
  std::vector<project::Skip> skipped;
  std::vector<project::Case> mine;
  for (const auto& c : project::reference_cases(recipes, rows, ctx, &skipped))
    if (c.recipe == r && c.row->precision == precision) mine.push_back(c);
  const auto own = mine.empty() ? project::Validation{} : project::validate(mine, ctx);

  const double peak = target.peak_tflops(precision);
  std::printf("project %s (%s) to %d GPUs of %s\n", r->name.c_str(), precision.c_str(), gpus, target.name.c_str());
  std::printf(
      "  layout   tp %d pp %d cp %d vp %d dp %d, micro-batch %d, global batch %d, GA %d, %d layers, seq %d%s (%s)\n",
      l.tp, l.pp, l.cp, l.vp, l.dp, l.micro_batch, l.global_batch, p.grad_accum, l.layers, l.seq,
      l.proxy ? ", a proxy" : "", l.where.c_str());
  std::printf(
      "  network  %s\n           NVLink busbw all_reduce %.1f, all_gather %.1f, reduce_scatter %.1f, sendrecv %.1f%s "
      "GB/s (%s); scale-out %.1f GB/s per GPU\n",
      ctx.net.description.c_str(), ctx.net.nvlink.all_reduce_gbps, ctx.net.nvlink.all_gather_gbps,
      ctx.net.nvlink.reduce_scatter_gbps, ctx.net.nvlink.send_recv_gbps,
      r->model.moe.enabled() ? fmt::format(", all_to_all {:.1f}", ctx.net.nvlink.all_to_all_gbps).c_str() : "",
      ctx.net_source.c_str(), ctx.net.scaleout.all_gather_gbps);
  const auto& a = *p.anchor;
  std::printf(
      "  compute  %s cost model: GEMM %.0f, attention %.0f TFLOP/s, memory %.2f TB/s, fitted to %zu measured "
      "shards on %s\n",
      precision.c_str(), cm.rates.gemm_tflops, cm.rates.attn_tflops, cm.rates.mem_tbps, cm.samples.size(),
      ctx.source_name.c_str());
  std::printf(
      "           anchor %s (%s, tp %d cp %d micro-batch %d: %s): a layer %.2f ms measured, %.2f ms on this "
      "shard (x %.3f, cost model)\n",
      a.where.c_str(), a.recipe.c_str(), a.layout.tp, a.layout.cp, a.layout.micro_batch,
      std::string(project::anchor_kind_name(p.anchor_kind)).c_str(), 1e3 * a.f1_s, 1e3 * p.layer_measured_s,
      p.layer_scale);
  std::printf(
      "           a layer: %.2f ms (%s%s) x %.3f (%s -> %s) / %.3f (reference efficiency) = %.2f ms per "
      "micro-batch\n",
      1e3 * (ctx.layer_time == project::LayerTime::fit ? p.layer_fit_s : p.layer_measured_s),
      ctx.layer_time == project::LayerTime::fit ? "cost model" : "measured",
      l.sequence_parallel && l.tp > 1 ? ", sequence parallel" : "", p.hardware_factor, ctx.source_name.c_str(),
      ctx.target_name.c_str(), ctx.cal.reference_efficiency, 1e3 * p.layer_s);
  std::printf("step time %27.3f s\n", p.step_s);
  std::printf("  compute %25.3f s  %d micro-batches x %.1f ms on the slowest pipeline rank\n", p.compute_s,
              p.grad_accum, 1e3 * p.compute_s / p.grad_accum);
  std::printf("  TP communication exposed %8.3f s  of %.3f s of all-gathers and reduce-scatters (overlap cost %.2f)\n",
              p.tp_exposed_s, p.tp_comm_s, ctx.cal.overlap_cost);
  std::printf("  CP communication exposed %8.3f s  of %.3f s of K/V exchange\n", p.cp_exposed_s, p.cp_comm_s);
  if (r->model.moe.enabled())
    std::printf("  EP communication exposed %8.3f s  all-to-alls over ep %d%s (%d per NVLink domain), not overlapped\n",
                p.ep_exposed_s, l.ep, l.expert_tp() > 1 ? fmt::format(", gathers over etp {}", l.expert_tp()).c_str() : "",
                p.ep_per_domain);
  std::printf("  pipeline bubble %17.3f s  (pp-1)/(vp m) = %.2f%%\n", p.bubble_s,
              100 * project::bubble_fraction(l.pp, std::max(1, l.vp), p.grad_accum));
  std::printf("  PP send/recv exposed %12.3f s  of %.3f s\n", p.pp_exposed_s, p.pp_comm_s);
  std::printf("  DP communication exposed %8.3f s  gradient reduce-scatter %.3f s, parameter all-gather %.3f s\n",
              p.dp_exposed_s, p.dp_reduce_scatter_s, p.dp_all_gather_s);
  std::printf("  optimizer %23.3f s\n", p.optimizer_s);
  std::printf(
      "  stragglers %22.3f s  sigma sqrt(T) E[max of dp] = %.0f ms x sqrt(%.2f s) x %.2f (slowest of %d replicas)\n",
      p.straggler_s, 1e3 * ctx.cal.straggler_sigma_s, p.step_s - p.straggler_s,
      project::expected_max_normal(p.layout.dp), p.layout.dp);
  std::printf("tokens/s/GPU %.1f | TFLOP/s/GPU %.1f (%s) | MFU %.1f%% of %.0f\n", p.tokens_per_s_per_gpu,
              p.tflops_per_gpu, std::string(recipe::convention_name(conv)).c_str(), 100 * p.mfu, peak);
  std::printf(
      "sensitivity: scale-out bandwidth -20%%: step %s, +20%%: %s; NVLink bandwidth -20%%: %s, +20%%: %s; straggler "
      "sigma 0: %s, x2: %s\n",
      pct(so_lo).c_str(), pct(so_hi).c_str(), pct(nv_lo).c_str(), pct(nv_hi).c_str(), pct(step_with_sigma(0)).c_str(),
      pct(step_with_sigma(2)).c_str());
  const bool fit = ctx.layer_time == project::LayerTime::fit;
  std::string sure =
      fit ? fmt::format(
                "per-GPU layer time from the {} cost model of {} measured shards (the anchor, {}, measured "
                "{:+.1f}% against it)",
                precision, cm.samples.size(), project::anchor_kind_name(p.anchor_kind),
                100 * (p.layer_measured_s / p.layer_fit_s - 1))
          : fmt::format("per-GPU layer time measured: {}", project::anchor_kind_name(p.anchor_kind));
  if (!loo.empty()) {
    double worst = 0;
    for (double e : loo) worst = std::max(worst, std::abs(e));
    sure += fmt::format("; cost model leave-one-out error up to {:.1f}% over those shards", 100 * worst);
  }
  if (own.all.n > 0)
    sure += fmt::format("; this recipe's {} published {} rows: median |error| {:.1f}%, max {:.1f}%", own.all.n,
                        target.name, 100 * own.all.median, 100 * own.all.max);
  for (const auto& k : own.scaling)
    if (k.primary)
      sure += fmt::format(
          "; its weak scaling {} -> {} GPUs ({}): predicted {:.1f}%, published {:.1f}% ({:+.1f} points; the "
          "straggler sigma is fitted to all recipes' weak scaling)",
          k.from_gpus, k.to_gpus, k.release, 100 * k.predicted, 100 * k.published, k.points());
  for (const auto& m : checks)
    if (m.recipe == r->name && m.run->precision == precision)
      sure +=
          fmt::format("; a real {}-GPU step of it (tp {} pp {} cp {} dp {}): the model {:+.1f}%", m.run->layout.gpus,
                      m.run->layout.tp, m.run->layout.pp, m.run->layout.cp, m.run->layout.dp, 100 * m.error);
  std::printf("how sure: %s (calibration: %s)\n", sure.c_str(), ctx.cal_source.c_str());
  if (published && published->publishes_tokens())
    std::printf("published (%s, %s): %.1f tokens/s/GPU; the projection is %s\n", published->release().c_str(),
                published->where.c_str(), published->tokens_per_s_per_gpu(),
                pct(p.tokens_per_s_per_gpu / published->tokens_per_s_per_gpu() - 1).c_str());
  if (!checks.empty()) std::printf("\n%s", project::render_train_checks(checks).c_str());
  if (ttt_of) std::printf("\n%s", mlperf::render_ttt(*ttt_of).c_str());
  return kOk;
}

}  // namespace tb::cli
