// train/trainer_cpu_parallel.cpp: train_cpu() on several ranks or a parallel layout (mpirun -np N trainbench train
// --device cpu --tp/--pp/--vp/--cp ...): the CPU reference of every layout (parallel/trainer_cpu.h) with the
// single-rank loop's data, LR schedule and step records. Every rank draws the step's whole global batch from the
// same data source (micro-batches in the single-rank order) and the trainer takes its share, so a layout trains
// on exactly the tokens the one-rank run sees (packed data: its documents and the loss weights over the whole step).
// Step time: the host clock around the step on rank 0.
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "comm/mpi_comm.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "parallel/trainer_cpu.h"
#include "train/data.h"
#include "train/schedule.h"
#include "train/trainer.h"

namespace tb::train {

TrainResult train_cpu_parallel(const TrainSpec& spec, const std::function<void(const StepStats&)>& on_step) {
  validate(spec);
  TrainResult res;
  res.model = resolve_model(spec);
  const model::ModelConfig& m = res.model;
  auto world = spec.parallel.job_ranks ? comm::world_communicator() : comm::make_self_communicator();
  TB_REQUIRE(spec.run.save.empty() && spec.run.resume.empty(),
             fmt::format("--save and --resume: checkpoints are written and read by the one-rank CPU trainer so far; "
                         "this job has {} ranks",
                         world->size()));
  const int model_ranks = spec.parallel.tp * spec.parallel.pp * spec.parallel.cp;
  TB_REQUIRE(model_ranks >= 1 && world->size() % model_ranks == 0,
             fmt::format("tp·pp·cp = {} does not divide the job's {} ranks", model_ranks, world->size()));
  parallel::ParallelTrainSpec ps;
  ps.mesh = mesh_shape(spec, world->size());
  ps.micro_batch = spec.batch.micro;
  ps.global_batch = global_batch(spec, ps.mesh.dp);
  ps.hyper = {spec.optimizer.beta1, spec.optimizer.beta2, spec.optimizer.eps, spec.optimizer.weight_decay,
              spec.optimizer.clip};
  parallel::ParallelCpuTrainer<float> trainer(*world, m, ps, spec.run.seed);  // validates the layout on every rank
  res.gpus = world->size();
  res.params = model::param_count(m);
  res.tokens_per_step = double(ps.global_batch) * m.seq;
  res.flops_per_step = res.tokens_per_step * model::flops_per_token(m, spec.run.convention).total();

  DataSource source(spec.run.data, spec.run.token_type, m.vocab, m.seq, spec.run.seed);
  res.loss_floor = source.loss_floor();
  const LrSchedule schedule = lr_schedule(spec, m);
  std::vector<std::int32_t> tokens, targets, doc_lens, row_docs;
  std::vector<double> weights, measured;
  const int micro_batches = ps.global_batch / spec.batch.micro;  // over every dp rank
  std::vector<Batch> batches(static_cast<std::size_t>(micro_batches));
  double flops_sum = 0, loss_tokens_sum = 0;
  for (int step = 1; step <= spec.run.steps; ++step) {
    tokens.clear(), targets.clear(), doc_lens.clear(), row_docs.clear(), weights.clear();
    StepTokens counted;
    for (Batch& b : batches) b = source.next(spec.batch.micro), counted.add(b);
    for (const Batch& b : batches) {
      tokens.insert(tokens.end(), b.tokens.begin(), b.tokens.end());
      targets.insert(targets.end(), b.targets.begin(), b.targets.end());
      doc_lens.insert(doc_lens.end(), b.doc_lens.begin(), b.doc_lens.end());
      row_docs.insert(row_docs.end(), b.row_docs.begin(), b.row_docs.end());
      const std::vector<double> w = loss_weights(b, micro_batches, std::int64_t(counted.loss_tokens));
      weights.insert(weights.end(), w.begin(), w.end());
    }
    const double flops = step_flops(m, spec.run.convention, counted);
    world->barrier();  // the step starts together on every rank
    const auto t0 = std::chrono::steady_clock::now();
    const parallel::ParallelStepStats ps_step =
        trainer.step(tokens, targets, schedule.lr(step - 1), {doc_lens, row_docs}, weights);
    StepStats st;
    st.step = step;
    st.loss = ps_step.loss;
    st.grad_norm = ps_step.grad_norm;
    st.lr = ps_step.lr;
    st.step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    st.tokens_per_s = res.tokens_per_step / st.step_s;
    st.tflops = flops / world->size() / st.step_s / 1e12;
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    st.mem_gib = double(u.ru_maxrss) / (1024.0 * 1024.0);
    TB_REQUIRE(std::isfinite(st.loss), fmt::format("step {}: the loss is not finite: lower --lr", step));
    loss_tokens_sum += counted.loss_tokens;
    if (step > spec.run.warmup_steps) measured.push_back(st.step_s), flops_sum += flops;
    res.steps.push_back(st);
    if (on_step) on_step(st);
    if (interrupted()) {  // (every rank gets the signal from mpirun)
      res.interrupted = true;
      break;
    }
  }
  if (measured.empty()) measured.push_back(res.steps.back().step_s);
  else if (source.max_documents_per_row() > 0)
    res.flops_per_step = flops_sum / double(measured.size()), res.flop_tokens = "documents";
  res.loss_tokens_per_step = loss_tokens_sum / double(res.steps.size());
  res.step_s = summarize(measured);
  res.tokens_per_s = res.tokens_per_step / res.step_s.median;
  res.tflops = res.flops_per_step / world->size() / res.step_s.median / 1e12;
  return res;
}

}  // namespace tb::train
