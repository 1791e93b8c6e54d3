// train/pipeline_cuda.cpp: the 1F1B and interleaved pipelines on the CUDA decoder (see the .h): the host-side plan
// (activation sets and boundary buffers from free lists, in schedule order) and its enqueue on the one stream.
#include "train/pipeline_cuda.h"

#include <fmt/format.h>

#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "core/error.h"

namespace tb::train {
namespace {

using parallel::PipeAction;
using parallel::PipeTransfer;

// Indices handed out smallest-free-first; `count` is the most ever in use at once.
class FreeList {
 public:
  int take() {
    if (free_.empty()) return count_++;
    const int i = *free_.begin();
    free_.erase(free_.begin());
    return i;
  }
  void give(int i) { free_.insert(i); }
  int count() const { return count_; }

 private:
  std::set<int> free_;
  int count_ = 0;
};

// What a boundary buffer holds for a micro-batch, from this rank's side.
enum class Role { input, output, output_grad, input_grad };

Role role_of(const PipeTransfer& t) {
  const bool act = t.what == PipeTransfer::What::activation;
  if (t.dir == PipeTransfer::Dir::send) return act ? Role::output : Role::input_grad;
  return act ? Role::input : Role::output_grad;
}

// The boundary buffers held between the actions, keyed by (role, micro-batch, chunk).
class Held {
 public:
  explicit Held(FreeList& pool) : pool_(pool) {}
  int make(Role r, int mb, int chunk) {
    const int b = pool_.take();
    TB_REQUIRE(held_.emplace(std::tuple{r, mb, chunk}, b).second,
               fmt::format("pipeline plan: boundary buffer of micro-batch {} chunk {} made twice", mb, chunk));
    return b;
  }
  int take(Role r, int mb, int chunk) {  // the buffer, no longer held (the caller gives it back to the pool when done)
    const auto it = held_.find({r, mb, chunk});
    TB_REQUIRE(it != held_.end(), fmt::format("pipeline plan: no boundary buffer for micro-batch {} chunk {} "
                                              "(schedule out of order)", mb, chunk));
    const int b = it->second;
    held_.erase(it);
    return b;
  }
  bool empty() const { return held_.empty(); }

 private:
  FreeList& pool_;
  std::map<std::tuple<Role, int, int>, int> held_;
};

}  // namespace

PipelinePlan plan_pipeline(const parallel::PipelineShape& shape, int rank) {
  const std::vector<PipeAction> schedule = parallel::pipeline_schedule(shape, rank);  // validates shape and rank
  PipelinePlan plan;
  std::vector<FreeList> sets(std::size_t(shape.vp));  // per chunk
  FreeList pool;
  Held held(pool);
  std::map<std::pair<int, int>, int> set_of;  // (micro-batch, chunk) -> activation set, forward to backward
  for (const PipeAction& a : schedule) {
    PipelinePlan::Op op{a.kind, a.mb, a.chunk, -1, -1, -1, {}};
    const bool first = shape.first_stage(rank, a.chunk), last = shape.last_stage(rank, a.chunk);  // exchange: unused
    switch (a.kind) {
      case PipeAction::Kind::forward:
        op.set = sets[std::size_t(a.chunk)].take();
        set_of[{a.mb, a.chunk}] = op.set;
        if (!first) op.in = held.take(Role::input, a.mb, a.chunk);
        if (!last) op.out = held.make(Role::output, a.mb, a.chunk);  // before `in` is freed: out never aliases in
        if (op.in >= 0) pool.give(op.in);
        break;
      case PipeAction::Kind::backward:
        op.set = set_of.at({a.mb, a.chunk});
        set_of.erase({a.mb, a.chunk});
        if (!last) op.in = held.take(Role::output_grad, a.mb, a.chunk);
        if (!first) op.out = held.make(Role::input_grad, a.mb, a.chunk);
        if (op.in >= 0) pool.give(op.in);
        sets[std::size_t(a.chunk)].give(op.set);
        break;
      case PipeAction::Kind::exchange: {
        std::vector<int> sent;  // freed after the whole exchange: a recv of the same group must not overwrite them
        for (const PipeTransfer& t : a.transfers) {
          const bool send = t.dir == PipeTransfer::Dir::send;
          const int b = send ? held.take(role_of(t), t.mb, t.chunk) : held.make(role_of(t), t.mb, t.chunk);
          if (send) sent.push_back(b);
          op.transfers.push_back({send, b, t.peer});
        }
        for (int b : sent) pool.give(b);
        break;
      }
    }
    plan.ops.push_back(std::move(op));
  }
  TB_REQUIRE(held.empty() && set_of.empty(),
             fmt::format("pipeline plan {} rank {}: buffers or activation sets left after the schedule", shape.str(),
                         rank));
  for (const FreeList& s : sets) plan.activation_sets.push_back(s.count());
  plan.buffers = pool.count();
  std::vector<bool> seen(std::size_t(shape.vp), false);  // each chunk's last backward: the first one from the end
  for (auto op = plan.ops.rbegin(); op != plan.ops.rend(); ++op)
    if (op->kind == PipeAction::Kind::backward && !seen[std::size_t(op->chunk)])
      op->last_of_chunk = seen[std::size_t(op->chunk)] = true;
  return plan;
}

PipelineCuda::PipelineCuda(comm::NcclCommunicator& pp, cudaStream_t stream,
                           std::span<const std::unique_ptr<model::CudaDecoder>> chunks,
                           const parallel::PipelineShape& shape)
    : stream_(stream), side_(stream), shape_(shape), plan_(plan_pipeline(shape, pp.rank())) {
  TB_REQUIRE(pp.size() == shape.pp, fmt::format("pipeline {}: the pipeline communicator has {} ranks", shape.str(),
                                                pp.size()));
  p2p_comm_ = pp.split_nccl(0, pp.rank());
  p2p_comm_->set_stream(side_.get());
  for (const PipelinePlan::Op& op : plan_.ops)
    if (op.kind == PipeAction::Kind::exchange) {
      done_.emplace_back();
      TB_CHECK(cudaEventCreateWithFlags(&done_.back(), cudaEventDisableTiming));
    }
  TB_REQUIRE(int(chunks.size()) == shape.vp,
             fmt::format("pipeline {}: rank {} has {} model chunks", shape.str(), pp.rank(), chunks.size()));
  for (int c = 0; c < shape.vp; ++c) {
    const model::CudaDecoder& net = *chunks[std::size_t(c)];
    const int stage = shape.stage_of(pp.rank(), c);
    const model::LayerRange want = model::pipeline_stage_layers(net.config().layers, shape.stages(), stage);
    TB_REQUIRE(net.dense_layout().first_layer == want.first && net.layers() == want.last - want.first,
               fmt::format("pipeline: rank {}'s chunk {} does not hold global stage {}'s layers [{}, {})", pp.rank(),
                           c, stage, want.first, want.last));
    chunks_.push_back(chunks[std::size_t(c)].get());
  }
}

PipelineCuda::~PipelineCuda() {
  cudaStreamSynchronize(side_.get());  // enqueued exchanges may still use the events
  for (cudaEvent_t e : done_) cudaEventDestroy(e);
}

void PipelineCuda::prepare() {
  const std::int64_t rows = chunks_[0]->boundary_rows();
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    TB_REQUIRE(chunks_[c]->slots() >= plan_.activation_sets[c],
               fmt::format("pipeline: chunk {}'s decoder has {} activation sets, the schedule needs {} (prepare it "
                           "first)", c, chunks_[c]->slots(), plan_.activation_sets[c]));
    TB_REQUIRE(chunks_[c]->boundary_rows() == rows, "pipeline: the chunks' decoders are prepared for different sizes");
  }
  const std::size_t elems = std::size_t(rows) * std::size_t(chunks_[0]->config().d_model);
  if (elems == elems_) return;
  TB_CHECK(cudaStreamSynchronize(stream_));  // the old buffers may still be in use
  buffers_.clear();
  for (int i = 0; i < plan_.buffers; ++i) buffers_.emplace_back(p2p_comm_->device(), elems * sizeof(__nv_bfloat16));
  elems_ = elems;
}

void PipelineCuda::wait_for_buffers(int a, int b) {
  bool waited = false;
  for (int buf : {a, b}) {
    if (buf < 0 || pending_[std::size_t(buf)] < 0) continue;
    TB_CHECK(cudaStreamWaitEvent(stream_, done_[std::size_t(pending_[std::size_t(buf)])], 0));
    pending_[std::size_t(buf)] = -1;
    waited = true;
  }
  if (waited && chunks_[0]->on_op) chunks_[0]->on_op("pp send/recv (waited)");
}

void PipelineCuda::enqueue(const std::int32_t* tokens, const std::int32_t* targets, std::size_t tokens_per_mb,
                           double grad_scale, float* losses, std::span<const model::PackedInputs> packed,
                           std::int64_t first_sequence, int micro_batch) {
  TB_REQUIRE(elems_ > 0, "pipeline: enqueue() before prepare()");
  pending_.assign(buffers_.size(), -1);
  int exchange = 0;
  for (const PipelinePlan::Op& op : plan_.ops) {
    const std::size_t at = std::size_t(op.mb) * tokens_per_mb;
    const model::PackedInputs* rows = packed.empty() ? nullptr : &packed[std::size_t(op.mb)];
    switch (op.kind) {
      case PipeAction::Kind::forward:
        wait_for_buffers(op.in, op.out);
        chunks_[std::size_t(op.chunk)]->forward(op.set, tokens + at, targets + at, buffer(op.in), buffer(op.out),
                                                grad_scale, losses + op.mb, rows,
                                                first_sequence + std::int64_t(op.mb) * micro_batch);
        break;
      case PipeAction::Kind::backward:
        wait_for_buffers(op.in, op.out);
        if (before_backward) before_backward(op.chunk, op.last_of_chunk);
        chunks_[std::size_t(op.chunk)]->backward(op.set, tokens + at, buffer(op.in), buffer(op.out), rows);
        break;
      case PipeAction::Kind::exchange:
        side_.fork();  // after the compute that produced the sends and last read the receive buffers
        p2p_.clear();
        for (const PipelinePlan::Transfer& t : op.transfers) {
          p2p_.push_back({t.send ? comm::P2P::Kind::send : comm::P2P::Kind::recv, buffer(t.buffer), elems_, t.peer});
          pending_[std::size_t(t.buffer)] = exchange;
        }
        p2p_comm_->exchange(p2p_, DType::bf16);
        TB_CHECK(cudaEventRecord(done_[std::size_t(exchange)], side_.get()));
        ++exchange;
        break;
    }
  }
  side_.join();  // the step ends with every exchange done (and a captured graph joined)
}

}  // namespace tb::train
