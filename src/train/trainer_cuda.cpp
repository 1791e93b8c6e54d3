// train/trainer_cuda.cpp: the training loop of trainer.h on one GPU or several, from its parts:
//   topology (train/topology_cuda.h)   the rank's mesh place and communicators
//   replica (train/replica_cuda.h)     its model chunks, with their tensor-, context- and data-parallel wiring
//   optimizer (train/optimizer_cuda.h) distributed AdamW over the trainable parameters, the weights' init
//   pipeline (train/pipeline_cuda.h)   pipeline parallel: the 1F1B or interleaved schedule of the chunks
//   step (train/step_cuda.h)           one optimizer step on one stream, captured as a CUDA graph
// The first step (1, or the one after a --resume checkpoint's) runs eagerly (plans every GEMM and attention shape);
// then (with spec.run.autotune) every GEMM shape is autotuned (bench/gemm_tune.h) and the same enqueue is captured once
// as a CUDA graph and replayed, the host writing the next step's inputs into the pinned buffers between replays. Each
// step is timed by the host clock (launch to completion) and by CUDA events around it. The memory needs
// (train/memory_cuda.cpp) are estimated and checked against the GPU's free memory before anything is allocated.
// Pipeline parallel (--pp): each rank's decoder is its stage (layers [r L/pp, (r+1) L/pp), parameters of that stage
// only); the micro-batch loop becomes the rank's schedule, the loss is summed over the pipeline ranks (only the last
// stage's is non-zero) and so is the gradient norm's sum of squares. Interleaved (--vp > 1): the rank holds vp
// chunks, chunk c = global stage c·pp + r of pp·vp. Mixes (docs/PARALLEL.md): one NCCL communicator per mesh group;
// the reductions run per group in turn (tp, then pp, then dp x cp).
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/gemm_tune.h"
#include "bench/op_profile.h"
#include "bench/telemetry.h"
#include "comm/mpi_comm.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/log.h"
#include "core/provenance.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/context.h"
#include "parallel/mesh.h"
#include "parallel/tensor_shard.h"
#include "train/cuda_spec.h"
#include "train/data.h"
#include "train/optimizer_cuda.h"
#include "train/pipeline_cuda.h"
#include "train/replica_cuda.h"
#include "train/schedule.h"
#include "train/step_cuda.h"
#include "train/topology_cuda.h"
#include "train/trainer.h"

namespace tb::train {
namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// The rank's data-parallel size and its GPU: its node-local rank, or with --share-gpus the mesh's sharing rule.
void place_rank(TrainSpec& spec, const comm::World& world, const parallel::MeshShape& mesh, int devices) {
  spec.parallel.dp = mesh.dp;
  if (spec.parallel.share_gpus && world.size > devices) {
    if (const std::string problem = share_gpus_problem(mesh, devices); !problem.empty()) raise_config(problem);
    spec.run.gpu = parallel::shared_gpu(parallel::coord_of(mesh, world.rank), devices);
  } else if (world.size > 1) {
    spec.run.gpu = world.local_rank;
  }
}

// The rank's GPU exists and the run fits in its free memory (else the estimate and the knobs that would fit).
void check_fits(const TrainSpec& spec, const model::ModelConfig& m, const comm::World& world, int devices) {
  TB_REQUIRE(spec.run.gpu < devices,
             fmt::format("{}needs GPU {} of this node, which has {} GPU{}: run at most {} ranks per node",
                         world.size > 1 ? "this rank " : "this run ", spec.run.gpu, devices, devices == 1 ? "" : "s",
                         devices));
  TB_CHECK(cudaSetDevice(spec.run.gpu));
  std::size_t free_b = 0, total_b = 0;
  TB_CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (std::string advice = fit_advice(spec, m, double(free_b)); !advice.empty()) raise_config(advice);
}

// After the eager first step: the device memory in use, the GEMM plans, their autotuning (--autotune), the capture of
// the step as a CUDA graph.
void after_first_step(const TrainSpec& spec, ops::DeviceContext& dc, StepCuda& step_run, int rank, TrainResult& res) {
  std::size_t fr = 0, tot = 0;
  TB_CHECK(cudaMemGetInfo(&fr, &tot));
  res.device_used_bytes = double(tot - fr);
  dc.for_each_plan([&](ops::GemmPlan&) { ++res.gemm_plans; });
  if (spec.run.autotune) {  // up to kCandidates x (200 ms + 20 runs) per shape: say so before the silence
    if (rank == 0)
      log::info("train: --autotune: timing cuBLASLt's candidates of {} GEMM shapes (up to ~{:.0f} s)", res.gemm_plans,
                res.gemm_plans * ops::GemmPlan::kCandidates * bench::kTuneSustainMs * 1.2e-3);
    res.gemm_retuned = bench::tune_all_plans(dc);
    ops::reset_device_memory_peak();  // its scratch operands are gone: not part of a training step
  }
  const bool use_graph =  // train/spec.h; a MoE layer's FP8 experts sync with the host (model/moe_mlp_cuda.h)
      spec.run.graph == Switch::on ||
      (spec.run.graph == Switch::automatic && spec.parallel.tp == 1 && !(res.model.moe.enabled() && spec.fp8()));
  res.graph = use_graph ? step_run.capture() : "off";
  if (res.graph != "captured" && use_graph)
    log::warn("train: running without a CUDA graph ({}); step times include launch overhead", res.graph);
}

}  // namespace

TrainResult train_cuda(const TrainSpec& spec_in, const std::function<void(const StepStats&)>& on_step) {
  TrainSpec spec = spec_in;
  const comm::World world = spec.parallel.job_ranks ? comm::world() : comm::World{};  // else this process alone
  TB_REQUIRE(spec.parallel.tp >= 1 && spec.parallel.pp >= 1 && spec.parallel.cp >= 1 &&
                 world.size % (spec.parallel.tp * spec.parallel.pp * spec.parallel.cp) == 0,
             fmt::format("--tp {} x --pp {} x --cp {} does not divide the job's {} ranks", spec.parallel.tp,
                         spec.parallel.pp, spec.parallel.cp, world.size));
  const parallel::MeshShape mesh = mesh_shape(spec, world.size);
  int devices = 0;
  TB_CHECK(cudaGetDeviceCount(&devices));
  place_rank(spec, world, mesh, devices);
  validate(spec);
  TrainResult res;
  res.model = resolve_model(spec);
  res.gpus = world.size;
  res.gpu = spec.run.gpu;
  const model::ModelConfig& m = res.model;
  const int tp = spec.parallel.tp, pp = spec.parallel.pp, cp = spec.parallel.cp, dp = spec.parallel.dp;
  const int global = global_batch(spec, dp);
  parallel::validate_layout(mesh, m, world.size, spec.batch.micro, global);
  const model::ModelConfig ml = tp > 1 ? parallel::tp_shard_config(m, tp) : m;  // this rank's shard of the model
  const int accum = micro_batches_per_rank(spec, dp);
  const int mb = spec.batch.micro, seq = m.seq / cp;  // context parallel: this rank's two chunks of every sequence
  const std::size_t n = std::size_t(mb) * std::size_t(seq);
  res.params = model::param_count(m);
  res.tokens_per_step = double(global) * m.seq;
  res.flops_per_step = res.tokens_per_step * model::flops_per_token(m, spec.run.convention).total();
  const double flops_per_gpu = res.flops_per_step / world.size;
  res.estimate = estimate_memory(spec, m);

  DataSource source(spec.run.data, spec.run.token_type, m.vocab, m.seq, spec.run.seed);
  res.loss_floor = source.loss_floor();
  // Packed data: each micro-batch holds at most this many segments (a row's documents and its padding).
  const int segments = source.max_documents_per_row() > 0 ? mb * (source.max_documents_per_row() + 1) : 0;
  TB_REQUIRE(segments == 0 || cp == 1, fmt::format("--data {}: packed sequences with context parallel (--cp {}) are not "
                                                   "built: run packed data with --cp 1",
                                                   spec.run.data, cp));
  if (segments > 0) ops::require_packed_cudnn(fmt::format("--data {}", spec.run.data));
  check_fits(spec, m, world, devices);  // before any allocation
  cudaDeviceProp prop{};
  TB_CHECK(cudaGetDeviceProperties(&prop, spec.run.gpu));
  res.device_name = prop.name;

  ops::reset_device_memory_peak();
  ops::DeviceContext dc(spec.run.gpu);
  cudaStream_t st = dc.stream();
  TopologyCuda topo(world, mesh, spec.run.gpu, st, m.tied_embeddings);
  ReplicaCuda rep(dc, spec, topo, m, ml, n, accum);
  res.grads_shared = rep.grads_shared;
  res.buckets = rep.buckets;
  OptimizerCuda opt(dc, spec, m, rep, topo.tied != nullptr);
  opt.init_weights(spec.run.seed);
  // Gradients in the activations' memory: the arena that holds them is allocated before anything takes
  // grads_device() (the optimizer's tensors), after the weights' init (whose temporaries would otherwise come on top
  // of the whole arena).
  if (rep.grads_shared) {
    rep.net().prepare(mb, seq, 1, segments);
    if (TensorParallelCuda* t = rep.tp()) t->set_grads(rep.net().grads_device());
    if (DataParallelCuda* d = rep.dp()) d->set_grads(rep.net().grads_device());
  }
  opt.build();
  res.fp8_weight_cast = opt.fp8_weight_cast();

  std::unique_ptr<PipelineCuda> pipe;
  if (pp > 1)
    pipe =
        std::make_unique<PipelineCuda>(*topo.pp, st, rep.chunks, parallel::PipelineShape{pp, spec.parallel.vp, accum});
  for (std::size_t c = 0; c < rep.chunks.size(); ++c)
    rep.chunks[c]->prepare(mb, seq, pipe ? pipe->activation_sets(int(c)) : 1, segments);
  if (pipe) pipe->prepare();

  bench::OpProfiler profiler(st);
  bool profiling = false;
  auto mark = [&](std::string_view op) {
    if (profiling) profiler.mark(op);
  };
  rep.connect_step(pipe.get(), opt.tied_chunk, mark);
  StepCuda step_run(dc, topo, rep, opt, pipe.get(), accum, n, mb, seq, dp, spec.optimizer.clip > 0, segments, mark);

  // Checkpoints (one rank): the trainable state through the host (train/optimizer_cuda.h); a resumed run starts after
  // the file's step, the data stream that many steps on.
  OptimizerCuda::HostState host;
  if (!spec.run.save.empty() || !spec.run.resume.empty()) host = opt.host_state();
  const CheckpointPlan ck = plan_checkpoints(spec, m, global, host.view());
  const int first = ck.first;
  if (first > 1) opt.upload(host);
  source.skip(std::int64_t(first - 1) * global);

  const LrSchedule schedule = lr_schedule(spec, m);
  auto load_inputs = [&](int step) { step_run.load_inputs(source, m.seq, cp, step, float(schedule.lr(step - 1))); };

  cudaEvent_t ev0 = nullptr, ev1 = nullptr;
  TB_CHECK(cudaEventCreate(&ev0));
  TB_CHECK(cudaEventCreate(&ev1));
  bench::Telemetry telemetry({dc.device()});
  bench::Telemetry::Mark tm_from = 0;
  std::vector<double> measured, measured_gpu;
  double flops_sum = 0, loss_tokens_sum = 0;
  dc.synchronize();
  const bool delay = spec.debug.delay_rank >= 0 && launch_rank().rank == spec.debug.delay_rank &&
                     spec.debug.delay_ms > 0;  // an injected straggler
  for (int step = first; step <= spec.run.steps; ++step) {
    load_inputs(step);
    if (step == first + spec.run.warmup_steps) {
      tm_from = telemetry.mark();
      for (auto& chunk : rep.chunks) chunk->reset_moe_stats();  // the routing of the measured steps
    }
    const auto t0 = std::chrono::steady_clock::now();
    if (delay) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(spec.debug.delay_ms));
    TB_CHECK(cudaEventRecord(ev0, st));
    step_run.launch();
    TB_CHECK(cudaEventRecord(ev1, st));
    if (topo.waiter)
      topo.waiter->wait(st,
                        spec.parallel.comm_timeout_s);  // raises naming this rank when a peer died, hung or NCCL failed
    else
      TB_CHECK(cudaStreamSynchronize(st));
    StepStats s;
    s.step = step;
    s.step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    float gpu_ms = 0;
    TB_CHECK(cudaEventElapsedTime(&gpu_ms, ev0, ev1));
    s.loss = step_run.loss(world.size, pp);
    s.grad_norm = step_run.grad_norm();
    s.lr = step_run.scalars().lr;
    s.tokens_per_s = res.tokens_per_step / s.step_s;
    const double step_flops_per_gpu =
        segments > 0 ? step_flops(m, spec.run.convention, step_run.counted()) / world.size : flops_per_gpu;
    s.tflops = step_flops_per_gpu / s.step_s / 1e12;
    loss_tokens_sum += step_run.counted().loss_tokens;
    s.mem_gib = double(ops::device_memory_stats().peak) / kGiB;
    TB_REQUIRE(std::isfinite(s.loss) && std::isfinite(s.grad_norm),
               fmt::format("step {}: the loss ({}) or the gradient norm ({}) is not finite: lower --lr or check the "
                           "data (token ids must be below the vocabulary, {})",
                           step, s.loss, s.grad_norm, m.vocab));
    if (step == first) after_first_step(spec, dc, step_run, world.rank, res);
    if (step >= first + spec.run.warmup_steps) {
      measured.push_back(s.step_s);
      measured_gpu.push_back(double(gpu_ms) * 1e-3);
      flops_sum += step_flops_per_gpu * world.size;
    }
    res.steps.push_back(s);
    if (ck.save_after(step)) {
      opt.download(host);
      CheckpointInfo done = ck.info;
      done.step = step;
      save_checkpoint(spec.run.save, host.view(), done);
    }
    if (on_step) on_step(s);
    if (interrupted()) {
      res.interrupted = true;
      break;
    }
  }
  if (measured.empty())
    measured.push_back(res.steps.back().step_s), measured_gpu.push_back(res.steps.back().step_s);
  else if (segments > 0)
    res.flops_per_step = flops_sum / double(measured.size()), res.flop_tokens = "documents";
  res.loss_tokens_per_step = loss_tokens_sum / double(res.steps.size());
  const bench::Telemetry::Mark tm_to = telemetry.mark();
  res.step_s = summarize(measured);
  res.gpu_step_s = summarize(measured_gpu);
  if (m.moe.enabled()) {
    for (auto& chunk : rep.chunks) res.moe.add(chunk->moe_stats());
    res.moe_forwards = int(measured.size()) * accum;
  }
  res.tokens_per_s = res.tokens_per_step / res.step_s.median;
  res.tflops = res.flops_per_step / world.size / res.step_s.median / 1e12;
  res.peak_alloc_bytes = double(ops::device_memory_stats().peak);
  if (telemetry.available()) {
    const bench::TelemetrySummary ts = telemetry.summary(dc.device(), tm_from, tm_to);
    res.energy_j_per_token = ts.energy_j / (res.tokens_per_step / world.size * double(measured.size()));  // per GPU
    res.telemetry = ts;
  }

  // ---- One more step, eager, with an event after every op: the breakdown.
  if (spec.run.op_profile && !res.interrupted) {
    load_inputs(spec.run.steps + 1);
    profiling = true;
    profiler.begin();
    step_run.enqueue();
    for (const bench::OpTime& t : profiler.finish()) {
      res.ops.push_back({t.op, t.seconds, t.calls});
      if (t.op == "grad norm + AdamW") res.optimizer_s = t.seconds;
    }
    profiling = false;
  }
  cudaEventDestroy(ev0);
  cudaEventDestroy(ev1);
  return res;
}

}  // namespace tb::train
