// train/step_cuda.cpp: the CUDA trainer's step, enqueued and captured (train/step_cuda.h).
#include "train/step_cuda.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <utility>

#include "core/packing.h"

namespace tb::train {

StepCuda::StepCuda(ops::DeviceContext& dc, const TopologyCuda& topo, ReplicaCuda& replica, const OptimizerCuda& opt,
                   PipelineCuda* pipe, int accum, std::size_t n, int mb, int seq, int dp, bool clip, int segments,
                   std::function<void(std::string_view)> mark)
    : dc_(dc), topo_(topo), rep_(replica), opt_(opt), pipe_(pipe), accum_(accum), mb_(mb), seq_(seq), dp_(dp), n_(n),
      clip_(clip), mark_(std::move(mark)), h_tokens_(std::size_t(accum) * n), h_targets_(std::size_t(accum) * n),
      h_losses_(std::size_t(accum)), d_tokens_(dc.device(), h_tokens_.bytes()),
      d_targets_(dc.device(), h_targets_.bytes()), d_scalars_(dc.device(), sizeof(ops::AdamWStepScalars)),
      d_losses_(dc.device(), h_losses_.bytes()), d_norm_(dc.device(), sizeof(ops::GradNormResult)),
      segments_(segments), h_positions_(segments > 0 ? std::size_t(accum) * n : 1),
      h_offsets_(segments > 0 ? std::size_t(accum) * std::size_t(segments + 1) : 1),
      h_weights_(segments > 0 ? std::size_t(accum) * n : 1) {
  // LoRA's dropout masks follow the optimizer step the graph's first copy brings in
  const auto* step = reinterpret_cast<const std::int64_t*>(d_scalars_.as<std::byte>() +
                                                           offsetof(ops::AdamWStepScalars, step));
  for (const auto& chunk : rep_.chunks) chunk->set_step_counter(step);
  if (segments_ == 0) return;
  d_positions_ = ops::DeviceBuffer(dc.device(), h_positions_.bytes());
  d_offsets_ = ops::DeviceBuffer(dc.device(), h_offsets_.bytes());
  d_weights_ = ops::DeviceBuffer(dc.device(), h_weights_.bytes());
  for (int a = 0; a < accum_; ++a)
    packed_.push_back({d_positions_.as<std::int32_t>() + std::size_t(a) * n_,
                       d_offsets_.as<std::int32_t>() + std::size_t(a) * std::size_t(segments_ + 1),
                       d_weights_.as<float>() + std::size_t(a) * n_});
}

double StepCuda::loss(int world, int pp) const {
  double sum = 0;
  for (int a = 0; a < accum_; ++a) sum += double(loss(a));
  return segments_ > 0 ? sum / (accum_ * dp_) : sum / (accum_ * world / pp);
}

StepCuda::~StepCuda() {
  if (graph_) cudaGraphExecDestroy(graph_);
}

// Per optimizer step, all on one stream:
//   H2D: tokens and targets of the step's micro-batches, lr and t      (from pinned host memory)
//   data / tensor parallel: start the all-gathers of the weights the ranks' optimizers wrote (overlapping the forward)
//   grads = 0 (the linear layers' by their first GEMM writing, beta 0);  FP8: the weights' FP8 copies
//   for each micro-batch a: loss[a] = forward_backward(tokens[a], grad_scale 1 / (micro-batches dp))  (or the
//     pipeline's schedule);  FP8: the delayed-scaling update
//   the gradients' reductions: tp all-reduces, the tied embedding's sum over the stages, dp reduce-scatters
//   norm, clip = grad_norm(grads, max_norm) summed over the groups;  AdamW(master, m, v -> bf16 weights)
//   D2H: loss[0..micro-batches), norm                                   (into pinned host memory)
void StepCuda::load_inputs(DataSource& source, int full_seq, int cp, int step, float lr) {
  const parallel::Coord& place = topo_.place;
  const std::size_t c = std::size_t(full_seq) / std::size_t(2 * cp);  // context parallel: chunk length
  std::int32_t* tokens = h_tokens_.get();
  std::int32_t* targets = h_targets_.get();
  std::vector<Batch> batches(std::size_t(accum_ * dp_));
  counted_ = {};
  for (Batch& b : batches) b = source.next(mb_), counted_.add(b);
  for (int k = 0; k < accum_ * dp_; ++k) {
    const Batch& b = batches[std::size_t(k)];
    const int a = k - place.dp * accum_;
    if (a < 0 || a >= accum_) continue;
    if (segments_ > 0) load_packed(b, a, accum_ * dp_);
    if (cp == 1) {
      std::copy(b.tokens.begin(), b.tokens.end(), tokens + std::size_t(a) * n_);
      std::copy(b.targets.begin(), b.targets.end(), targets + std::size_t(a) * n_);
      continue;
    }
    for (int i = 0; i < mb_; ++i)  // sequence i: this rank's chunks cp rank and 2 cp - 1 - cp rank
      for (int h = 0; h < 2; ++h) {
        const std::size_t g = std::size_t(h == 0 ? place.cp : 2 * cp - 1 - place.cp);
        const std::size_t from = std::size_t(i) * std::size_t(full_seq) + g * c;
        const std::size_t to = std::size_t(a) * n_ + std::size_t(i) * std::size_t(seq_) + std::size_t(h) * c;
        std::copy_n(b.tokens.begin() + std::ptrdiff_t(from), c, tokens + to);
        std::copy_n(b.targets.begin() + std::ptrdiff_t(from), c, targets + to);
      }
  }
  scalars().lr = lr;
  scalars().step = step;
}

// Micro-batch a's positions, segment offsets (padded with empty segments to the capacity) and loss weights.
void StepCuda::load_packed(const Batch& b, int a, int micro_batches) {
  TB_REQUIRE(b.docs().packed() && b.tokens.size() == n_,
             "CUDA trainer: prepared for packed data, but a micro-batch came without its documents");
  const std::vector<std::int32_t> off = segment_offsets(b.docs(), b.seq);
  TB_REQUIRE(off.size() <= std::size_t(segments_) + 1,
             fmt::format("CUDA trainer: a micro-batch of {} segments, over the capacity of {} the decoders were prepared "
                         "for",
                         off.size() - 1, segments_));
  const std::vector<std::int32_t> pos = segment_positions(off);
  std::copy(pos.begin(), pos.end(), h_positions_.get() + std::size_t(a) * n_);
  std::int32_t* o = h_offsets_.get() + std::size_t(a) * std::size_t(segments_ + 1);
  std::copy(off.begin(), off.end(), o);
  std::fill(o + off.size(), o + segments_ + 1, off.back());
  const std::vector<double> w = loss_weights(b, micro_batches, std::int64_t(counted_.loss_tokens));
  float* wf = h_weights_.get() + std::size_t(a) * n_;
  for (std::size_t i = 0; i < n_; ++i) wf[i] = w.empty() ? float(1.0 / double(n_)) : float(w[i]);
}

void StepCuda::enqueue() {
  cudaStream_t st = dc_.stream();
  const auto& chunks = rep_.chunks;
  model::CudaDecoder& net = rep_.net();
  TensorParallelCuda* tpc = rep_.tp();
  DataParallelCuda* ddp = rep_.dp();
  auto mark = [this](std::string_view op) {
    if (mark_) mark_(op);
  };
  TB_CHECK(cudaMemcpyAsync(d_tokens_.get(), h_tokens_.get(), h_tokens_.bytes(), cudaMemcpyHostToDevice, st));
  TB_CHECK(cudaMemcpyAsync(d_targets_.get(), h_targets_.get(), h_targets_.bytes(), cudaMemcpyHostToDevice, st));
  TB_CHECK(cudaMemcpyAsync(d_scalars_.get(), h_scalars_.get(), h_scalars_.bytes(), cudaMemcpyHostToDevice, st));
  if (segments_ > 0) {
    TB_CHECK(cudaMemcpyAsync(d_positions_.get(), h_positions_.get(), h_positions_.bytes(), cudaMemcpyHostToDevice, st));
    TB_CHECK(cudaMemcpyAsync(d_offsets_.get(), h_offsets_.get(), h_offsets_.bytes(), cudaMemcpyHostToDevice, st));
    TB_CHECK(cudaMemcpyAsync(d_weights_.get(), h_weights_.get(), h_weights_.bytes(), cudaMemcpyHostToDevice, st));
  }
  for (const auto& d : rep_.dps) d->start_step();  // all-gather the weights the ranks' optimizers wrote (overlapped
  for (const auto& t : rep_.tps) t->start_step();  // with the forward)
  for (const auto& chunk : chunks) chunk->zero_grads_for_overwrite();
  mark("inputs + zero grads");
  for (std::size_t c = 0; c < rep_.dps.size() && net.fp8(); ++c)
    rep_.dps[c]->params_needed(rep_.zero[c].padded_total);  // the FP8 casts read every weight
  for (const auto& chunk : chunks) chunk->fp8_begin_step();  // FP8 copies of the weights AdamW just wrote
  const double grad_scale = 1.0 / (accum_ * dp_);
  // micro-batch a of this rank holds sequences [(dp rank · accum + a) · micro-batch, ...) of the step (load_inputs)
  const std::int64_t first_sequence = std::int64_t(topo_.place.dp) * accum_ * mb_;
  if (pipe_) {  // the schedule's forwards, backwards and sends / receives; losses only on the last stage
    TB_CHECK(cudaMemsetAsync(d_losses_.get(), 0, h_losses_.bytes(), st));
    pipe_->enqueue(d_tokens_.as<std::int32_t>(), d_targets_.as<std::int32_t>(), n_, grad_scale, d_losses_.as<float>(),
                   packed_, first_sequence, mb_);
  }
  for (int a = 0; a < accum_ && !pipe_; ++a) {
    rep_.final_pass[0] = a == accum_ - 1;
    net.forward_backward_device(d_tokens_.as<std::int32_t>() + std::size_t(a) * n_,
                                d_targets_.as<std::int32_t>() + std::size_t(a) * n_, mb_, seq_, grad_scale,
                                d_losses_.as<float>() + a, packed_.empty() ? nullptr : &packed_[std::size_t(a)],
                                first_sequence + std::int64_t(a) * mb_);
  }
  for (const auto& chunk : chunks) chunk->fp8_end_step();
  auto* norm = d_norm_.as<ops::GradNormResult>();
  for (const auto& t : rep_.tps) t->finish_grads();
  if (tpc) mark("tp gradient all-reduce (exposed)");
  if (topo_.tied && opt_.tied_grads) {  // (after the tp sums, before the dp reduce-scatters read it; frozen: none)
    topo_.tied->all_reduce(opt_.tied_grads, opt_.tied_grads, opt_.tied_elems, DType::f32);
    mark("tied embedding gradient all-reduce");
  }
  for (const auto& d : rep_.dps) d->finish_grads();  // (dp x tp: after the tp all-reduces, whose sums it reads)
  if (ddp) mark("gradient reduce-scatter (exposed)");
  opt_.grad_norm(norm, st);
  // Sums over the groups in turn (tp, the pipeline's stages, the dp x cp shards): the squares of the gradient norm,
  // then the norm and clip scale from the total; the losses (the last stage's reach every rank).
  auto sum_over_groups = [&](void* buf, std::size_t count, DType t) {
    if (tpc) tpc->all_reduce(buf, count, t);
    if (pipe_) topo_.pp->all_reduce(buf, buf, count, t);
    if (ddp) ddp->all_reduce(buf, count, t);
  };
  if (tpc || pipe_ || ddp) {
    sum_over_groups(&norm->norm_sq, 1, DType::f64);
    ops::clip_from_norm_sq(norm, opt_.max_norm(), st);
    sum_over_groups(d_losses_.get(), std::size_t(accum_), DType::f32);
  }
  opt_.step(d_scalars_.as<ops::AdamWStepScalars>(), clip_ ? norm : nullptr, st);
  for (const auto& chunk : chunks)  // aux-loss-free balancing: the step's expert loads over dp, then the bias
    chunk->update_expert_bias([ddp](float* load, std::size_t n) {
      if (ddp) ddp->all_reduce(load, n, DType::f32);
    });
  for (const auto& d : rep_.dps) d->finish_step();
  for (const auto& t : rep_.tps) t->finish_step();
  mark("grad norm + AdamW");
  TB_CHECK(cudaMemcpyAsync(h_losses_.get(), d_losses_.get(), h_losses_.bytes(), cudaMemcpyDeviceToHost, st));
  TB_CHECK(cudaMemcpyAsync(h_norm_.get(), d_norm_.get(), h_norm_.bytes(), cudaMemcpyDeviceToHost, st));
}

std::string StepCuda::capture() {
  cudaStream_t st = dc_.stream();
  cudaGraph_t g = nullptr;
  TB_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue();
  } catch (const Error& e) {
    cudaStreamEndCapture(st, &g);
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    return std::string("capture failed: ") + e.what();
  }
  const cudaError_t end = cudaStreamEndCapture(st, &g);
  if (end != cudaSuccess || !g) {
    cudaGetLastError();
    return std::string("capture failed: ") + cudaGetErrorString(end);
  }
  const cudaError_t inst = cudaGraphInstantiate(&graph_, g, 0);
  cudaGraphDestroy(g);
  if (inst != cudaSuccess) {
    cudaGetLastError();
    graph_ = nullptr;
    return std::string("instantiation failed: ") + cudaGetErrorString(inst);
  }
  return "captured";
}

void StepCuda::launch() {
  if (graph_)
    TB_CHECK(cudaGraphLaunch(graph_, dc_.stream()));
  else
    enqueue();
}

}  // namespace tb::train
