// cli/cmd_run.cpp: `trainbench run <recipe>`: the recipe's reference run (recipe/plan.h) and the comparison with the
// published reference (report/compare.h). With --gpus N, or as a job of N ranks under mpirun / srun, the ranks train
// the whole model at the recipe's layout for N GPUs (run_distributed.cpp). Otherwise, and with --proxy, or when this
// node has fewer GPUs than asked for, one device measures the PROXY: one short training run per layer count, the
// extrapolation to the full layout's per-GPU step, one "run" record.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstdio>

#include "bench/sysinfo.h"
#include "bench/telemetry.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/ranks.h"
#include "cli/run_recipe.h"
#include "comm/mpi.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/record_keys.h"
#include "core/stats.h"
#include "recipe/convention.h"
#include "recipe/plan.h"
#include "recipe/reference.h"
#include "report/compare.h"
#include "report/plus_minus.h"
#include "train/trainer.h"

namespace tb::cli {
namespace {

// Measured steps per point on a GPU. On an H200, repeats of the 8B and 70B recipes spread 4-7% in tokens/s/GPU at 10
// steps (the GPU not yet settled under its power cap; the fit's slope carries each point's noise to the full layer
// count) and agree within 0.6% at 100 (bench/RESULTS.md, Recipes).
constexpr int kGpuSteps = 100;
// Measured steps of a distributed run on GPUs: each step is the layout's whole global batch (tens of micro-batches
// per rank in the DGXC layouts, seconds per step), so fewer steps reach the same total time.
constexpr int kDistributedGpuSteps = 20;

std::map<std::string, std::string> parse_sets(const std::vector<std::string>& sets) {
  std::map<std::string, std::string> out;
  for (const std::string& s : sets) {
    const auto eq = s.find('=');
    TB_REQUIRE(eq != std::string::npos && eq > 0 && eq + 1 < s.size(),
               fmt::format("--set {}: expected key=value, e.g. --set layers=4", s));
    out[s.substr(0, eq)] = s.substr(eq + 1);
  }
  return out;
}

nlohmann::json layout_json(const recipe::Layout& l) {
  return {{"gpus", l.gpus},        {"tp", l.tp},     {"pp", l.pp},     {"cp", l.cp},
          {"vp", l.vp},            {"dp", l.dp},     {"ep", l.ep},     {"etp", l.expert_tp()},
          {"micro_batch", l.micro_batch},            {"global_batch", l.global_batch},
          {"layers", l.layers},    {"seq", l.seq},   {"where", l.where}};
}

// The proxy: one short training run per layer count on one device, extrapolated to the layout's per-GPU step.
int run_proxy(RunRequest& q, int gpu) {
  const recipe::RunPlan& plan = q.plan;
  const recipe::Recipe& r = *q.recipe;
  const bool cuda = q.cuda();
  auto run = open_run(q.common, q.argc, q.argv);
  const recipe::Layout& L = plan.layout;
  std::printf(
      "run %s (%s): reference run %d GPUs, tp %d pp %d cp %d vp %d dp %d, micro-batch %d, global batch %d, "
      "%d layers, seq %d (%s)\n",
      r.name.c_str(), q.precision.c_str(), L.gpus, L.tp, L.pp, L.cp, L.vp, L.dp, L.micro_batch, L.global_batch,
      L.layers, L.seq, L.where.c_str());
  if (r.lora.enabled()) std::printf("  %s, the base frozen\n", model::lora_text(r.lora).c_str());
  for (const std::string& d : plan.differences) std::printf("  proxy: %s\n", d.c_str());
  std::fflush(stdout);

  std::vector<recipe::PointTiming> timings;
  auto points_json = nlohmann::json::array();
  std::string device_name = cuda ? "" : "CPU";
  bool stopped = false;
  double loss_share = 0;  // the counted targets' share of the rows' tokens, over the points
  for (int layers : plan.points) {
    model::ModelConfig m = plan.shard;
    m.layers = layers;
    // one micro-batch per step; the layout's accumulation is extrapolated
    train::TrainSpec spec = recipe_spec(q, m, L.micro_batch, L.micro_batch);
    spec.run.gpu = gpu;
    spec.run.op_profile = cuda;  // the optimizer's share of the step
    std::printf("point: %d layer%s\n", layers, layers > 1 ? "s" : "");
    std::fflush(stdout);
    auto on_step = [&](const train::StepStats& s) {
      std::printf("  step %d/%d | loss %.4f | step_s %.4f | tokens/s %.0f | TFLOP/s/GPU %.1f | mem %.2f GiB\n", s.step,
                  spec.run.steps, s.loss, s.step_s, s.tokens_per_s, s.tflops, s.mem_gib);
      std::fflush(stdout);
    };
    const train::TrainResult res = cuda ? train::train_cuda(spec, on_step) : train::train_cpu(spec, on_step);
    if (cuda) device_name = res.device_name;
    const double step = res.step_s.median, opt_s = std::min(res.optimizer_s, step);
    std::printf(
        "  point %d: step %.2f ms median (optimizer %.2f ms) | tokens/s %.0f | TFLOP/s/GPU %.1f | loss %.3f -> "
        "%.3f%s\n",
        layers, 1e3 * step, 1e3 * opt_s, res.tokens_per_s, res.tflops, res.steps.front().loss, res.steps.back().loss,
        res.interrupted ? " | interrupted" : "");
    if (res.telemetry && res.telemetry->samples > 0) std::printf("    %s\n", bench::describe(*res.telemetry).c_str());
    std::fflush(stdout);
    points_json.push_back({{"layers", layers},
                           {"step_ms", to_json(scaled(res.step_s, 1e3))},
                           {"optimizer_ms", opt_s * 1e3},
                           {"tokens_per_s", res.tokens_per_s},
                           {"loss_tokens_per_step", res.loss_tokens_per_step},
                           {"peak_alloc_gib", res.peak_alloc_bytes / double(1 << 30)},
                           {"graph", res.graph}});
    if (res.telemetry) points_json.back()["telemetry"] = bench::to_json(*res.telemetry);
    // The standard error of the step time over the measured steps: what the fit carries to the extrapolation.
    const double se = res.step_s.n > 1 ? res.step_s.stdev / std::sqrt(double(res.step_s.n)) : 0.0;
    points_json.back()["step_ms_se"] = 1e3 * se;
    timings.push_back({layers, step - opt_s, opt_s, se});
    loss_share += res.loss_tokens_per_step / res.tokens_per_step / double(plan.points.size());
    if (res.interrupted) {
      stopped = true;
      break;
    }
  }

  Record rec;
  rec.bench = "run";
  rec.name = fmt::format("{}/{}/{}gpus", r.name, q.precision, L.gpus);
  rec.world = 1;
  if (cuda) rec.device = gpu;
  const double peak = cuda ? peak_tflops_or_warn(q.common, gpu, q.precision) : 0.0;
  rec.data = run_record_data(q, device_name, peak);
  rec.data["points"] = points_json;
  rec.data["loss_tokens_per_step"] = loss_share * rec.data["tokens_per_step"].get<double>();
  if (stopped || timings.size() < plan.points.size()) {
    rec.status = Status::interrupted;
    run.sink->write(rec);
    std::printf("\ninterrupted: %zu of %zu points measured; no extrapolation\n", timings.size(), plan.points.size());
    print_results_location(run);
    return kFailed;
  }
  const recipe::Extrapolation x = recipe::extrapolate(plan, timings);
  rec.data["extrapolated"] = {
      {"microbatch_ms", 1e3 * x.microbatch_s},
      {"optimizer_ms", 1e3 * x.optimizer_s},
      {"step_ms", 1e3 * x.step_s},
      {"grad_accum", x.grad_accum},
      {"tokens_per_s_per_gpu", x.tokens_per_s_per_gpu},
      {"fit", {{"f0_ms", 1e3 * x.f0}, {"f1_ms", 1e3 * x.f1}, {"o0_ms", 1e3 * x.o0}, {"o1_ms", 1e3 * x.o1}}},
      {"se",
       {{"microbatch_ms", 1e3 * x.microbatch_se_s},
        {"step_ms", 1e3 * x.step_se_s},
        {"tokens_per_s_per_gpu", x.tokens_per_s_per_gpu_se}}}};
  std::printf("\n%s per GPU: step %s ms (%d micro-batches x %s ms + optimizer %s ms), %s tokens/s/GPU\n\n",
              plan.proxy ? "extrapolated to the reference layout" : "measured",
              report::plus_minus(1e3 * x.step_s, 1e3 * x.step_se_s, 2).c_str(), x.grad_accum,
              report::grouped(1e3 * x.microbatch_s, 2).c_str(), report::grouped(1e3 * x.optimizer_s, 2).c_str(),
              report::plus_minus(x.tokens_per_s_per_gpu, x.tokens_per_s_per_gpu_se, 0).c_str());
  return finish_run(q, rec, run);
}

}  // namespace

train::TrainSpec recipe_spec(const RunRequest& q, const model::ModelConfig& m, int micro_batch, int global_batch) {
  train::TrainSpec spec;
  spec.model.config = m;
  spec.model.preset = m.name;
  if (m.lora.enabled()) {  // the recipe's [lora], as train's --lora-* flags give it (seeded by the run's seed)
    const model::LoraConfig& l = m.lora;
    spec.lora = {l.rank, l.alpha > 0 ? std::optional(l.alpha) : std::nullopt, l.dropout, l.targets, false};
  }
  spec.batch.micro = micro_batch;
  spec.batch.global = global_batch;
  spec.run.steps = q.steps + q.warmup;
  spec.run.warmup_steps = q.warmup;
  spec.run.device = q.cuda() ? train::Device::cuda : train::Device::cpu;
  spec.run.data = q.plan.data;
  spec.memory.recompute = train::parse_choice(train::kRecomputeModes, q.recompute, "--recompute");
  if (q.cuda()) {
    spec.precision.linear = train::parse_choice(train::kPrecisions, q.precision, "--precision");
    spec.precision.fp8.recipe = train::parse_choice(train::kFp8Recipes, q.fp8_recipe, "--fp8-recipe");
    spec.precision.fp8.format = train::parse_choice(train::kFp8Formats, q.fp8_format, "--fp8-format");
  }
  return spec;
}

nlohmann::json run_record_data(const RunRequest& q, const std::string& gpu_name, double peak_tflops) {
  const recipe::Recipe& r = *q.recipe;
  const recipe::RunPlan& plan = q.plan;
  auto fpt = nlohmann::json::object();
  for (auto c :
       {recipe::Convention::full, recipe::Convention::causal, recipe::Convention::full_mha, recipe::Convention::linear})
    if (recipe::can_count_flops(r))
      fpt[std::string(recipe::convention_name(c))] = recipe::flops_per_token(r, plan.layout, c);
  nlohmann::json d = {{"recipe", r.name},
                      {"precision", q.precision},
                      {"release", r.release},
                      {"layout", layout_json(plan.layout)},
                      {"mode", plan.distributed ? "distributed" : "proxy"},
                      {"proxy", plan.proxy},
                      {"differences", plan.differences},
                      {"gpu", gpu_name},
                      {"peak_tflops", peak_tflops},
                      {"flops_per_token", fpt},
                      {"params", {{"total", model::param_count(r.model)}, {"active", model::active_param_count(r.model)}}},
                      {"backend", q.device},
                      {"recompute", q.recompute},
                      {"data", plan.data},
                      {"tokens_per_step", double(plan.layout.global_batch) * plan.layout.seq},
                      {"flop_tokens", "rows"}};
  if (r.lora.enabled()) d["lora"] = lora_json(r.lora);
  if (q.precision == "fp8") d["fp8_recipe"] = q.fp8_recipe, d["fp8_format"] = q.fp8_format;
  return d;
}

int finish_run(const RunRequest& q, Record& rec, RunOutput& run) {
  const double tokens_per_gpu = run_figures(rec.data).value("tokens_per_s_per_gpu", 0.0);
  const auto& fpt = rec.data["flops_per_token"];
  if (fpt.contains("full")) {
    rec.data["tflops_per_gpu"] = tokens_per_gpu * fpt["full"].get<double>() / 1e12;
    const double peak = rec.data.value("peak_tflops", 0.0);
    if (peak > 0) rec.data["mfu"] = rec.data["tflops_per_gpu"].get<double>() / peak;
  }
  const report::Comparison c = report::compare_run(to_json(rec, run.run_id), q.ref_rows, q.ref_gpu);
  rec.data["comparison"] = {{"reference_gpu", q.ref_gpu},
                            {"reference_release", c.ref_release},
                            {"reference_where", c.ref_where},
                            {"ratio", c.ratio},
                            {"verdict", report::ref_verdict_name(c.verdict)}};
  run.sink->write(rec);
  std::printf("%s", report::render_comparisons({c}).c_str());
  print_results_location(run);
  return c.verdict == report::RefVerdict::below ? kFailed : kOk;  // as `compare` exits on these results
}

int cmd_run(int argc, char** argv) {
  CLI::App app{
      "run a recipe: its model trained at its layout (--gpus N, or under mpirun / srun) or as the one-GPU "
      "proxy of that layout, compared with the published reference",
      "trainbench run"};
  std::string name;
  RunRequest q;
  q.device = "cuda", q.recompute = "none", q.fp8_recipe = "current", q.fp8_format = "hybrid", q.warmup = 3;
  q.common.add_to(app);
  app.get_option("--gpus")->description(
      "train the whole model at the recipe's layout for N GPUs of this node (one rank per GPU under mpirun; across "
      "nodes start the ranks with srun / mpirun instead); default 1: the one-GPU proxy");
  std::optional<std::filesystem::path> recipes_dir;
  std::string release;
  int ref_gpus = 0;
  bool proxy = false;
  std::vector<std::string> sets;
  std::vector<int> points;
  std::string data;
  app.add_option("recipe", name,
                 "a recipe of `trainbench list recipes` (default: the default recipe; tiny without GPU)");
  app.add_option("--precision", q.precision, "bf16 | fp8 (GPU), fp32 (CPU); default: bf16 on a GPU, fp32 on the CPU");
  app.add_option("--ref-gpus", ref_gpus,
                 "the proxy: the reference run to stand for, by its GPU count (default: the smallest)");
  app.add_flag("--proxy", proxy,
               "measure the one-GPU proxy even under a launcher of several ranks: each rank its own, independently "
               "(a per-GPU health spread; `slurm run --proxies`)");
  app.add_option("--release", release, "the reference release whose layouts to use (default: the recipe's)");
  app.add_option("--reference-gpu", q.ref_gpu,
                 "GPU model of the reference to compare with, and whose layout the proxy stands for where the recipe "
                 "lists one for it (default: H100; CPU on cpu)");
  app.add_option("--set", sets,
                 "override the layout: layers, seq, micro_batch, global_batch, tp, pp, cp, vp (key=value)");
  app.add_option(
         "--points", points,
         "the proxy: layer counts to measure (default: 2,4, or 1,2 for a shallow stage; a one-device recipe: 1 and "
         "its own)")
      ->delimiter(',');
  app.add_option("--data", data,
                 "what to train on (default: the recipe's: packed-squad for fine-tuning, markov for pretraining): "
                 "markov | copy | random, packed-squad | packed-govreport (synthetic packed documents), a packed-data "
                 "FILE.index or a token file");
  app.add_option("--steps", q.steps,
                 "measured steps (default, the proxy: 100 per point on a GPU, where repeats then agree within 1% under "
                 "the power cap, 10 on the CPU; distributed: 20 on GPUs, 10 on the CPU)")
      ->check(whole_number(1));
  app.add_option("--warmup-steps", q.warmup, "unmeasured steps (per point)")->capture_default_str();
  app.add_option("--recompute", q.recompute, "activation recomputation: none | selective | full")
      ->check(CLI::IsMember({"none", "selective", "full"}))
      ->capture_default_str();
  app.add_option("--fp8-recipe", q.fp8_recipe, "FP8 scaling: current | delayed")
      ->check(CLI::IsMember({"current", "delayed"}))
      ->capture_default_str();
  app.add_option("--fp8-format", q.fp8_format, "FP8 formats: hybrid (E5M2 gradients) | e4m3 (all-E4M3)")
      ->check(CLI::IsMember({"hybrid", "e4m3"}))
      ->capture_default_str();
  app.add_option("--device", q.device, "cuda or cpu")->check(CLI::IsMember({"cuda", "cpu"}))->capture_default_str();
  app.add_option("--recipes", recipes_dir, "recipes folder (default: next to the binary, or $TRAINBENCH_RECIPES)");
  if (auto rc = parse(app, argc, argv)) return *rc;
  q.argc = argc, q.argv = argv;

  const auto recipes = recipe::load_recipes(recipe::find_recipes_dir(recipes_dir));
  if (!name.empty()) recipe::find_recipe(recipes, name);  // an unknown recipe is named before the GPU is looked for
  const int visible = bench::visible_gpu_count();
  const bool launched = !proxy && launched_by_mpi() && job_ranks() > 1;  // a job of several ranks: distributed
  if (q.device == "cuda" && visible == 0) {
    if (launched || q.common.gpus > 1 || (!name.empty() && name != "tiny")) {
      std::fprintf(stderr, "trainbench run: %s needs a GPU: %s (`trainbench run tiny --device cpu` runs without one)\n",
                   name.empty() ? "this run" : name.c_str(), bench::no_gpu_reason().c_str());
      return kUsage;
    }
    std::printf("no GPU here (%s): running the `tiny` recipe on the CPU\n", bench::no_gpu_reason().c_str());
    q.device = "cpu", name = "tiny";
  }
  const bool cuda = q.cuda();
  if (name.empty()) name = recipe::default_recipe(recipes).name;
  q.recipe = &recipe::find_recipe(recipes, name);
  if (q.precision.empty()) q.precision = cuda ? "bf16" : "fp32";
  TB_REQUIRE(cuda ? (q.precision == "bf16" || q.precision == "fp8") : q.precision == "fp32",
             fmt::format("the {} backend trains in {}, not {}", q.device, cuda ? "bf16 or fp8" : "fp32", q.precision));
  if (q.ref_gpu.empty()) q.ref_gpu = cuda ? "H100" : "CPU";
  TB_REQUIRE(q.common.gpus <= 1 || cuda,
             "--gpus N starts N GPU ranks; CPU ranks come from your launcher: mpirun -np N trainbench run RECIPE "
             "--device cpu");

  // The mode: a job of several ranks trains the recipe at its layout; --gpus N starts such a job on this node, or
  // falls back to the proxy of the N-GPU layout where the node has fewer GPUs.
  int ranks = 0;
  if (launched) ranks = job_ranks();
  if (!proxy && !launched && q.common.gpus > 1) {
    if (q.common.gpus <= visible) {
      ranks = q.common.gpus;
    } else {
      std::printf(
          "note: --gpus %d but this node shows %d GPU%s: measuring the one-GPU proxy of the %d-GPU layout "
          "instead (extrapolated, no communication)\n",
          q.common.gpus, visible, visible == 1 ? "" : "s", q.common.gpus);
      TB_REQUIRE(ref_gpus == 0 || ref_gpus == q.common.gpus,
                 fmt::format("--gpus {} and --ref-gpus {}: give one", q.common.gpus, ref_gpus));
      ref_gpus = q.common.gpus;
    }
  }
  if (q.steps == 0) q.steps = ranks > 0 ? (cuda ? kDistributedGpuSteps : 10) : (cuda ? kGpuSteps : 10);

  recipe::RunOptions opt;
  opt.ref_gpus = ref_gpus, opt.precision = q.precision, opt.release = release, opt.sets = parse_sets(sets);
  opt.points = points;
  opt.data = data;
  opt.gpu_model = q.ref_gpu;
  opt.ranks = ranks;
  q.plan = recipe::plan_run(*q.recipe, opt);  // every recipe and layout error before any work
  q.ref_rows = recipe::load_reference_dir(recipe::find_references_dir(q.common.references));
  if (q.plan.distributed) return run_distributed(q);

  int gpu = 0;
  if (cuda) {
    CommonOptions one = q.common;
    one.gpus = 0;  // --gpus N asked for the distributed run; the proxy takes one of the visible GPUs
    auto devices = select_devices("run", one);
    if (devices.exit) return *devices.exit;
    // Several proxies under a launcher (--proxy): each rank on its node-local GPU.
    gpu = devices.list[std::size_t(launcher_local_rank()) % devices.list.size()];
    if (devices.list.size() > 1 && !launched_by_mpi())
      std::printf(
          "note: the proxy runs on GPU %d of %zu visible (`run --gpus N` trains the recipe's layout on N of "
          "them)\n",
          gpu, devices.list.size());
  }
  install_interrupt_handler();
  return run_proxy(q, gpu);
}

}  // namespace tb::cli
