// train/trainer.cpp: resolve the model, then the loop of trainer.h on the CPU backend.
#include "train/trainer.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <memory>
#include <sstream>

#include "comm/mpi_comm.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/provenance.h"
#include "model/decoder_cpu.h"
#include "model/lora.h"
#include "ops/cpu/adamw.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/schedule.h"

namespace tb::train {
namespace {

// Per gradient element (the trainable slots'): whether AdamW decays it.
std::vector<std::uint8_t> decay_mask(std::span<const model::Slot> slots, std::size_t n) {
  std::vector<std::uint8_t> mask(n, 1);
  for (const auto& s : slots)
    if (s.has_grad() && !decays(s))
      std::fill_n(mask.begin() + std::ptrdiff_t(s.grad_offset), s.size, std::uint8_t(0));
  return mask;
}

// The trainable parameters as runs {parameter offset, gradient offset, elements}: one run when every slot trains,
// the adapters' one with LoRA (model/param_layout.h).
struct Run {
  std::size_t param, grad, count;
};
std::vector<Run> trainable_runs(std::span<const model::Slot> slots) {
  std::vector<Run> runs;
  for (const auto& s : slots) {
    if (!s.has_grad()) continue;
    if (!runs.empty() && runs.back().param + runs.back().count == s.offset &&
        runs.back().grad + runs.back().count == s.grad_offset)
      runs.back().count += s.size;
    else
      runs.push_back({s.offset, s.grad_offset, s.size});
  }
  return runs;
}

}  // namespace

bool is_group_mix(const parallel::MeshShape& s) {
  return (s.dp > 1) + (s.cp > 1) + (s.tp > 1) + (s.pp > 1) >= 2 && (s.tp > 1 || s.pp > 1);
}

std::string share_gpus_problem(const parallel::MeshShape& s, int gpus) {
  const bool mix = is_group_mix(s);
  const std::string problems = mix ? parallel::shared_gpu_problems(s, gpus) : "not a mix with tp or pp";
  if (problems.empty()) return "";
  return fmt::format("--share-gpus: {} ranks of layout {} cannot share this node's {} GPU{}: {} (a mix with tp or pp "
                     "whose groups each fit on distinct GPUs, as NCCL needs; without --share-gpus: one rank per GPU)",
                     s.world(), s.str(), gpus, gpus == 1 ? "" : "s", problems);
}

std::string MemoryEstimate::parts_gib() const {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  return fmt::format("weights {:.2f} + gradients {:.2f} + master {:.2f} + moments {:.2f} + activations {:.2f}{} + "
                     "workspaces {:.2f} GiB",
                     weights / kGiB, grads / kGiB, master / kGiB, moments / kGiB, activations / kGiB,
                     fp8_weights > 0 ? fmt::format(" + FP8 copies {:.2f}", fp8_weights / kGiB) : "",
                     workspaces / kGiB);
}

double step_flops(const model::ModelConfig& m, model::FlopConvention conv, const StepTokens& t) {
  if (!t.packed) return t.tokens * model::flops_per_token(m, conv).total();
  return model::packed_flops(m, conv, t.doc_tokens, t.doc_squares);
}

LrSchedule lr_schedule(const TrainSpec& spec, const model::ModelConfig& m) {
  const double lr = spec.optimizer.lr > 0 ? spec.optimizer.lr : model::param_count(m) < 100'000'000 ? 3e-3 : 3e-4;
  return LrSchedule{lr, spec.optimizer.min_lr >= 0 ? spec.optimizer.min_lr : lr / 10,
                    std::min(spec.optimizer.lr_warmup, spec.run.steps), spec.run.steps};
}

CheckpointPlan plan_checkpoints(const TrainSpec& spec, const model::ModelConfig& m, int global,
                                const TrainState& state) {
  CheckpointPlan ck;
  ck.info = {0, m.name, spec.run.data, spec.run.seed, global, m.lora.enabled() ? model::lora_text(m.lora) : ""};
  if (spec.run.save.empty() && spec.run.resume.empty()) return ck;
  TB_REQUIRE(m.moe.bias_update_rate == 0, "--save and --resume: the expert bias of aux-loss-free balancing "
                                          "(bias_update_rate > 0) is not in a checkpoint yet");
  if (!spec.run.resume.empty()) {
    ck.first = load_checkpoint(spec.run.resume, state, ck.info).step + 1;
    TB_REQUIRE(ck.first + spec.run.warmup_steps <= spec.run.steps,
               fmt::format("--resume {}: it holds {} steps; --steps {} leaves {} after --warmup-steps {} to measure",
                           spec.run.resume, ck.first - 1, spec.run.steps,
                           std::max(0, spec.run.steps - ck.first + 1 - spec.run.warmup_steps), spec.run.warmup_steps));
  }
  if (spec.run.save.empty()) return ck;
  ck.save_step = spec.run.save_step > 0 ? spec.run.save_step : spec.run.steps;
  TB_REQUIRE(ck.save_step >= ck.first,
             fmt::format("--save-step {}: the resumed run starts at step {}", ck.save_step, ck.first));
  return ck;
}

TrainResult train_cpu(const TrainSpec& spec, const std::function<void(const StepStats&)>& on_step) {
  if ((spec.parallel.job_ranks && comm::world().size > 1) ||
      spec.parallel.tp * spec.parallel.pp * spec.parallel.vp * spec.parallel.cp * spec.parallel.ep > 1)
    return train_cpu_parallel(spec, on_step);
  validate(spec);
  TrainResult res;
  res.model = resolve_model(spec);
  const auto& m = res.model;
  const int global = global_batch(spec, 1);
  const int accum = global / spec.batch.micro;
  res.params = model::param_count(m);
  res.tokens_per_step = double(global) * m.seq;
  res.flops_per_step = res.tokens_per_step * model::flops_per_token(m, spec.run.convention).total();

  model::CpuDecoder<float> net(m, spec.run.seed);
  DataSource source(spec.run.data, spec.run.token_type, m.vocab, m.seq, spec.run.seed);
  res.loss_floor = source.loss_floor();
  const auto params = net.params();
  const auto grads = net.grads();  // the trainable parameters' (LoRA: the adapters'); moments for them only
  std::vector<float> adam_m(grads.size(), 0.f), adam_v(grads.size(), 0.f);
  const auto mask = decay_mask(net.layout(), grads.size());
  const std::vector<Run> runs = trainable_runs(net.layout());
  const LrSchedule schedule = lr_schedule(spec, m);
  ops::cpu::AdamWParams hp;
  hp.beta1 = spec.optimizer.beta1, hp.beta2 = spec.optimizer.beta2, hp.eps = spec.optimizer.eps,
  hp.weight_decay = spec.optimizer.weight_decay;

  // Checkpoints: the file holds the trainable parameters (LoRA: the adapters, the base being the seed's) and their
  // moments; a resumed run starts after its step, the data stream that many steps on.
  const TrainState state{net.layout(), params, adam_m, adam_v};
  const CheckpointPlan ck = plan_checkpoints(spec, m, global, state);
  const int first = ck.first;
  source.skip(std::int64_t(first - 1) * global);
  std::vector<double> measured, measured_opt;
  double flops_sum = 0, loss_tokens_sum = 0;
  std::vector<Batch> batches(static_cast<std::size_t>(accum));
  const bool delay = spec.debug.delay_rank >= 0 && launch_rank().rank == spec.debug.delay_rank &&
                     spec.debug.delay_ms > 0;  // an injected straggler
  for (int step = first; step <= spec.run.steps; ++step) {
    const bool timed = step - first >= spec.run.warmup_steps;
    const auto t0 = std::chrono::steady_clock::now();
    if (delay) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(spec.debug.delay_ms));
    net.zero_grads();
    if (step - first == spec.run.warmup_steps) net.reset_moe_stats();  // the routing of the measured steps
    StepTokens counted;  // the step's micro-batches first: packed data's loss counts the step's answer tokens
    for (Batch& b : batches) b = source.next(spec.batch.micro), counted.add(b);
    double loss = 0;
    for (int a = 0; a < accum; ++a) {
      const Batch& b = batches[std::size_t(a)];
      const std::vector<double> w = loss_weights(b, accum, std::int64_t(counted.loss_tokens));
      loss += net.forward_backward({b.tokens, b.targets, b.batch, b.seq, b.docs(), w, std::int64_t(a) * b.batch, step},
                                   1.0 / accum) /
              accum;
    }
    const double flops = step_flops(m, spec.run.convention, counted);
    StepStats st;
    st.step = step;
    st.loss = loss;
    const auto t_opt = std::chrono::steady_clock::now();
    st.grad_norm = spec.optimizer.clip > 0 ? ops::cpu::clip_grad_norm(net.grads(), spec.optimizer.clip)
                                           : ops::cpu::grad_norm(net.grads());
    TB_REQUIRE(std::isfinite(st.grad_norm), fmt::format("step {}: the gradient norm is not finite (loss {}): lower "
                                                        "--lr or raise --clip",
                                                        step, loss));
    st.lr = schedule.lr(step - 1);
    hp.lr = st.lr;
    for (const Run& r : runs)
      ops::cpu::adamw_step(params.subspan(r.param, r.count), grads.subspan(r.grad, r.count),
                           std::span(adam_m).subspan(r.grad, r.count), std::span(adam_v).subspan(r.grad, r.count), hp,
                           step, std::span<const std::uint8_t>(mask).subspan(r.grad, r.count));
    if (m.moe.bias_update_rate > 0) net.update_expert_bias();
    const auto t1 = std::chrono::steady_clock::now();
    st.step_s = std::chrono::duration<double>(t1 - t0).count();
    if (timed) measured_opt.push_back(std::chrono::duration<double>(t1 - t_opt).count());
    st.tokens_per_s = res.tokens_per_step / st.step_s;
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    st.mem_gib = double(u.ru_maxrss) / (1024.0 * 1024.0);  // peak RSS; ru_maxrss is in KiB on Linux
    st.tflops = flops / st.step_s / 1e12;
    loss_tokens_sum += counted.loss_tokens;
    if (timed) measured.push_back(st.step_s), flops_sum += flops;
    res.steps.push_back(st);
    if (ck.save_after(step)) {
      CheckpointInfo done = ck.info;
      done.step = step;
      save_checkpoint(spec.run.save, state, done);
    }
    if (on_step) on_step(st);
    if (interrupted()) {
      res.interrupted = true;
      break;
    }
  }
  if (measured.empty()) measured.push_back(res.steps.back().step_s);  // interrupted during warmup
  else if (source.max_documents_per_row() > 0)
    res.flops_per_step = flops_sum / double(measured.size()), res.flop_tokens = "documents";
  res.loss_tokens_per_step = loss_tokens_sum / double(res.steps.size());
  res.step_s = summarize(measured);
  if (m.moe.enabled()) res.moe = net.moe_stats(), res.moe_forwards = int(measured.size()) * accum;
  if (!measured_opt.empty()) res.optimizer_s = summarize(measured_opt).median;
  res.tokens_per_s = res.tokens_per_step / res.step_s.median;
  res.tflops = res.flops_per_step / res.step_s.median / 1e12;
  return res;
}

}  // namespace tb::train
