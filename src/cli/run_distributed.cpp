// cli/run_distributed.cpp: `trainbench run RECIPE` as one job of N ranks (`--gpus N` on this node, or the ranks of
// mpirun / srun across nodes): every rank trains the recipe's model (recipe/plan.h RunPlan::model) at the layout for
// N GPUs, with its global batch and micro-batch, and the step is measured end to end (communication and pipeline
// bubble included). The figures, from rank 0's median step time t over the measured steps:
//   tokens/s per GPU = global_batch seq / (t N),  TFLOP/s per GPU = tokens/s per GPU x FLOPs per token (the
//   reference's convention),  MFU = TFLOP/s per GPU / the GPU's dense peak;
//   se(t) = stdev / sqrt(steps), se(tokens/s per GPU) = tokens/s per GPU x se(t) / t.
// Records: one "run" record (figures under `measured`, mode "distributed") from rank 0, a "rank_steps" record from
// every rank. Before any GPU work: the layout against the engine (train::validate_on), and the ranks' agreement on
// the configuration, the binary, the data and the recipe (its name and its file's hash).
#include <fmt/format.h>

#include <cmath>
#include <cstdio>

#include "bench/sysinfo.h"
#include "cli/ranks.h"
#include "cli/run_recipe.h"
#include "comm/mpi.h"
#include "comm/mpi_comm.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "report/plus_minus.h"
#include "train/rank_agreement.h"
#include "train/trainer.h"

namespace tb::cli {

int run_distributed(RunRequest& q) {
  const recipe::RunPlan& plan = q.plan;
  const recipe::Layout& L = plan.layout;
  const recipe::Recipe& r = *q.recipe;
  const bool cuda = q.cuda();
  train::TrainSpec spec = recipe_spec(q, plan.model, L.micro_batch, L.global_batch);
  spec.parallel.tp = L.tp, spec.parallel.pp = L.pp, spec.parallel.cp = L.cp, spec.parallel.vp = L.vp;
  spec.parallel.ep = L.ep;
  TB_REQUIRE(L.ep == 1 || L.expert_tp() == 1,
             fmt::format("recipe '{}': ep={} with expert tensor parallel etp={} (etp 0 means tp): expert parallel runs "
                         "with etp 1 only (set etp = 1)",
                         r.name, L.ep, L.expert_tp()));
  spec.run.op_profile = false;  // the end-to-end step is the measurement
  train::validate_on(spec, L.gpus);
  if (auto rc = start_ranks(L.gpus, "run", q.argc, q.argv)) return *rc;  // re-executes as L.gpus ranks
  spec.parallel.job_ranks = true;
  const bool rank0 = is_rank0();
  // Kept to the end: no rank exits before every rank has written its records.
  const std::unique_ptr<comm::Communicator> job = comm::world_communicator();
  train::check_ranks_agree(spec, *job, {{"recipe", r.name}, {"recipe_file", train::file_hash(r.file)}});
  share_run_id(*job);
  auto finish = [&](int code) {
    std::fflush(stdout);
    job->barrier();
    return code;
  };
  install_interrupt_handler();
  auto run = open_run(q.common, q.argc, q.argv);
  if (rank0) {
    auto text = [](const recipe::Layout& l) {
      return fmt::format(
          "tp {} pp {} cp {} vp {} dp {}, micro-batch {}, global batch {} ({} micro-batches per rank), "
          "{} layers, seq {}",
          l.tp, l.pp, l.cp, l.vp, l.dp, l.micro_batch, l.global_batch, l.grad_accum(), l.layers, l.seq);
    };
    std::printf("run %s (%s) on %d %s, %d steps after %d warm-up\n  this run:  %s\n  reference: %s (%s)\n",
                r.name.c_str(), q.precision.c_str(), L.gpus, cuda ? "GPUs" : "CPU ranks", q.steps, q.warmup,
                text(L).c_str(), plan.reference.gpus > 0 ? text(plan.reference).c_str() : "none listed for this count",
                (L.where + (L.note.empty() ? "" : "; " + L.note)).c_str());
    if (r.lora.enabled()) std::printf("  %s, the base frozen\n", model::lora_text(r.lora).c_str());
    for (const std::string& d : plan.differences) std::printf("  differs from the reference: %s\n", d.c_str());
    std::fflush(stdout);
  }
  auto on_step = [&](const train::StepStats& s) {
    if (!rank0) return;
    std::printf("  step %d/%d | loss %.4f | step_s %.4f | tokens/s/GPU %.0f | TFLOP/s/GPU %.1f | mem %.2f GiB\n",
                s.step, spec.run.steps, s.loss, s.step_s, s.tokens_per_s / L.gpus, s.tflops, s.mem_gib);
    std::fflush(stdout);
  };
  const train::TrainResult res = cuda ? train::train_cuda(spec, on_step) : train::train_cpu(spec, on_step);
  run.sink->write(rank_steps_record(spec, res, cuda));
  if (!rank0) return finish(res.interrupted ? kFailed : kOk);

  Record rec;
  rec.bench = "run";
  rec.name = fmt::format("{}/{}/{}gpus", r.name, q.precision, L.gpus);
  rec.world = L.gpus;
  if (cuda) rec.device = res.gpu;
  const double peak = cuda ? peak_tflops_or_warn(q.common, res.gpu, q.precision) : 0.0;
  rec.data = run_record_data(q, cuda ? res.device_name : "CPU", peak);
  rec.data["loss_tokens_per_step"] = res.loss_tokens_per_step;
  auto losses = nlohmann::json::array();
  for (const auto& s : res.steps) losses.push_back(s.loss);
  const double t = res.step_s.median;
  const double se = res.step_s.n > 1 ? res.step_s.stdev / std::sqrt(double(res.step_s.n)) : 0.0;
  const double per_gpu = t > 0 ? double(L.global_batch) * L.seq / (t * L.gpus) : 0.0;
  rec.data["measured"] = {{"step_ms", 1e3 * t},
                          {"step_ms_summary", to_json(scaled(res.step_s, 1e3))},
                          {"grad_accum", L.grad_accum()},
                          {"tokens_per_s_per_gpu", per_gpu},
                          {"peak_alloc_gib", res.peak_alloc_bytes / double(1 << 30)},
                          {"graph", res.graph},
                          {"loss", losses},
                          {"se", {{"step_ms", 1e3 * se}, {"tokens_per_s_per_gpu", t > 0 ? per_gpu * se / t : 0.0}}}};
  if (res.telemetry) rec.data["measured"]["telemetry"] = bench::to_json(*res.telemetry);  // rank 0's GPU
  if (res.interrupted || res.steps.size() <= std::size_t(spec.run.warmup_steps)) {
    rec.status = Status::interrupted;
    run.sink->write(rec);
    std::printf("\ninterrupted after %zu of %d steps; no figures\n", res.steps.size(), spec.run.steps);
    print_results_location(run);
    return finish(kFailed);
  }
  std::printf("\nmeasured on %d %s: step %s ms (%d micro-batches per rank), %s tokens/s/GPU, loss %.4f -> %.4f\n\n",
              L.gpus, cuda ? "GPUs" : "CPU ranks", report::plus_minus(1e3 * t, 1e3 * se, 2).c_str(), L.grad_accum(),
              report::plus_minus(per_gpu, t > 0 ? per_gpu * se / t : 0.0, 0).c_str(), res.steps.front().loss,
              res.steps.back().loss);
  return finish(finish_run(q, rec, run));
}

}  // namespace tb::cli
