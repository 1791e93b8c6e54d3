// cli/cmd_train.cpp: `trainbench train`: one model, real training steps, per-step log lines, a summary
// and one "train" record (train/trainer.h). The CUDA backend is not built yet: --device cuda says so.
#include <fmt/format.h>
#include <sys/resource.h>

#include <cstdio>

#include "bench/sysinfo.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "model/flops.h"
#include "train/trainer.h"

namespace tb::cli {
namespace {

double peak_rss_gib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / (1024.0 * 1024.0);  // ru_maxrss is in KiB on Linux
}

}  // namespace

int cmd_train(int argc, char** argv) {
  CLI::App app{"train a model for a few steps and measure it", "trainbench train"};
  train::TrainSpec spec;
  CommonOptions common;
  common.add_to(app);
  std::vector<std::string> models;
  for (const auto& p : model::presets()) models.push_back(p.name);
  app.add_option("-m,--model", spec.model, "model preset")->check(CLI::IsMember(models))->capture_default_str();
  app.add_option("--layers", spec.layers, "layers (default: the preset's)")->check(CLI::PositiveNumber);
  app.add_option("--seq", spec.seq, "sequence length (default: the preset's)")->check(CLI::PositiveNumber);
  app.add_option("--micro-batch", spec.micro_batch, "sequences per micro-batch")->capture_default_str();
  app.add_option("--global-batch", spec.global_batch, "sequences per step (default: the micro-batch)");
  app.add_option("--steps", spec.steps, "optimizer steps")->capture_default_str();
  app.add_option("--warmup-steps", spec.warmup_steps, "steps not measured")->capture_default_str();
  app.add_option("--device", spec.device, "cuda or cpu")->check(CLI::IsMember({"cuda", "cpu"}))->capture_default_str();
  app.add_option("--data", spec.data, "markov | copy | random (synthetic tasks) or a token file")->capture_default_str();
  app.add_option("--token-type", spec.token_type, "token file element type: uint16 | uint32")->capture_default_str();
  app.add_option("--lr", spec.lr, "peak learning rate")->capture_default_str();
  app.add_option("--min-lr", spec.min_lr, "final learning rate")->capture_default_str();
  app.add_option("--seed", spec.seed, "seed of the initial weights and the data")->capture_default_str();
  std::string convention = "full";
  app.add_option("--flops", convention, "FLOP convention: full | causal")->check(CLI::IsMember({"full", "causal"}))
      ->capture_default_str();
  if (auto rc = parse(app, argc, argv)) return *rc;
  spec.convention = model::parse_convention(convention);
  train::validate(spec);
  const model::ModelConfig m = train::resolve_model(spec);  // bad shapes fail before any work

  if (spec.device == "cuda") {
    if (bench::visible_gpu_count() == 0) {
      std::fprintf(stderr, "trainbench train: needs a GPU: %s (or use --device cpu)\n", bench::no_gpu_reason().c_str());
      return kUsage;
    }
    std::fprintf(stderr, "trainbench train: the CUDA training backend is not built yet; use --device cpu\n");
    return kUsage;
  }

  auto run = open_run(common, argc, argv);
  const int global = spec.global_batch > 0 ? spec.global_batch : spec.micro_batch;
  std::printf("train %s on cpu: %d layers, d_model %d, seq %d, %s params, micro-batch %d, global batch %d, %d steps\n",
              m.name.c_str(), m.layers, m.d_model, m.seq, fmt::format("{:.3g}", double(model::param_count(m))).c_str(),
              spec.micro_batch, global, spec.steps);
  const auto res = train::train_cpu(spec, [&](const train::StepStats& s) {
    std::printf("step %d/%d | loss %.4f | lr %.2e | grad_norm %.3f | step_s %.3f | tokens/s %.0f | TFLOP/s/GPU %.4f | "
                "mem %.2f GiB\n",
                s.step, spec.steps, s.loss, s.lr, s.grad_norm, s.step_s, s.tokens_per_s, s.tflops, peak_rss_gib());
    std::fflush(stdout);
  });

  Record r;
  r.bench = "train";
  r.name = fmt::format("{}/L{}/s{}/mb{}/gb{}/cpu", m.name, m.layers, m.seq, spec.micro_batch, global);
  auto losses = nlohmann::json::array();
  for (const auto& s : res.steps) losses.push_back(s.loss);
  r.data = {{"model", m.name},
            {"layers", m.layers},
            {"seq", m.seq},
            {"micro_batch", spec.micro_batch},
            {"global_batch", global},
            {"device", "cpu"},
            {"precision", "fp32"},
            {"params", res.params},
            {"steps", spec.steps},
            {"warmup_steps", spec.warmup_steps},
            {"step_ms", to_json(scaled(res.step_s, 1e3))},
            {"tokens_per_s", res.tokens_per_s},
            {"flops_per_step", res.flops_per_step},
            {"flop_convention", model::convention_name(spec.convention)},
            {"tflops", res.tflops},
            {"loss", losses},
            {"loss_first", res.steps.front().loss},
            {"loss_last", res.steps.back().loss},
            {"peak_rss_gib", peak_rss_gib()},
            {"data", spec.data}};
  if (res.loss_floor > 0) r.data["loss_floor"] = res.loss_floor;
  run.sink->write(r);
  std::printf("\nsummary: step_s median %.4f (p10 %.4f, p90 %.4f) over %zu steps | tokens/s %.0f | TFLOP/s %.4f | "
              "loss %.4f -> %.4f%s\n",
              res.step_s.median, res.step_s.p10, res.step_s.p90, res.step_s.n, res.tokens_per_s, res.tflops,
              res.steps.front().loss, res.steps.back().loss,
              res.loss_floor > 0 ? fmt::format(" (task floor {:.4f})", res.loss_floor).c_str() : "");
  print_results_location(run);
  return kOk;
}

}  // namespace tb::cli
