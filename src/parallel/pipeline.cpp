// parallel/pipeline.cpp: the pipeline executor (parallel/pipeline.h). Buffers live in host memory, keyed by
// (slot, micro-batch, chunk): the received input of a forward, the output waiting to be sent, the received output
// gradient of a backward, the input gradient waiting to be sent. Each is freed once consumed or sent.
#include "parallel/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "core/error.h"

namespace tb::parallel {
namespace {

enum class Slot { input, output, output_grad, input_grad };
using Key = std::tuple<Slot, int, int>;  // slot, micro-batch, chunk

template <class T>
class Buffers {
 public:
  std::vector<T>& make(Slot s, int mb, int chunk, std::size_t n) {
    auto [it, fresh] = bufs_.try_emplace(Key{s, mb, chunk}, n);
    if (!fresh) raise_error(Error::Kind::internal, fmt::format("pipeline: buffer {}.{} made twice", mb, chunk));
    peak_ = std::max(peak_, int(bufs_.size()));
    return it->second;
  }
  std::vector<T>& at(Slot s, int mb, int chunk) {
    auto it = bufs_.find(Key{s, mb, chunk});
    if (it == bufs_.end())
      raise_error(Error::Kind::internal,
                  fmt::format("pipeline: no {} buffer for micro-batch {} chunk {} (schedule out of order)",
                              s == Slot::input || s == Slot::output ? "activation" : "gradient", mb, chunk));
    return it->second;
  }
  void drop(Slot s, int mb, int chunk) { bufs_.erase(Key{s, mb, chunk}); }
  int peak() const { return peak_; }
  std::size_t live() const { return bufs_.size(); }

 private:
  std::map<Key, std::vector<T>> bufs_;  // map nodes do not move: spans into them stay valid across inserts
  int peak_ = 0;
};

}  // namespace

template <class T>
PipelineRun run_pipeline(const PipelineShape& shape, comm::Communicator& pp_group, PipelineStage<T>& stage) {
  TB_REQUIRE(pp_group.size() == shape.pp,
             fmt::format("pipeline {}: the pipeline group has {} ranks, not pp = {}", shape.str(), pp_group.size(),
                         shape.pp));
  TB_REQUIRE(pp_group.backend() != "nccl",
             "run_pipeline moves host buffers: use the MPI or one-rank communicator (device buffers for NCCL are not "
             "supported yet)");
  const int r = pp_group.rank();
  const std::vector<PipeAction> schedule = pipeline_schedule(shape, r);
  Buffers<T> bufs;
  PipelineRun run;
  std::vector<comm::P2P> ops;
  using Dir = PipeTransfer::Dir;
  using What = PipeTransfer::What;

  for (const PipeAction& a : schedule) {
    switch (a.kind) {
      case PipeAction::Kind::forward: {
        const bool first = shape.first_stage(r, a.chunk), last = shape.last_stage(r, a.chunk);
        std::span<const T> in;
        if (!first) in = bufs.at(Slot::input, a.mb, a.chunk);
        std::span<T> out;
        if (!last) out = bufs.make(Slot::output, a.mb, a.chunk, stage.activation_size(a.mb));
        const double loss = stage.forward(a.mb, a.chunk, in, out);
        if (last) run.loss += loss;
        bufs.drop(Slot::input, a.mb, a.chunk);
        ++run.forwards;
        break;
      }
      case PipeAction::Kind::backward: {
        const bool first = shape.first_stage(r, a.chunk), last = shape.last_stage(r, a.chunk);
        std::span<const T> dout;
        if (!last) dout = bufs.at(Slot::output_grad, a.mb, a.chunk);
        std::span<T> din;
        if (!first) din = bufs.make(Slot::input_grad, a.mb, a.chunk, stage.activation_size(a.mb));
        stage.backward(a.mb, a.chunk, dout, din);
        bufs.drop(Slot::output_grad, a.mb, a.chunk);
        ++run.backwards;
        break;
      }
      case PipeAction::Kind::exchange: {
        ops.clear();
        for (const PipeTransfer& t : a.transfers) {
          const bool act = t.what == What::activation;
          std::vector<T>& buf =
              t.dir == Dir::send
                  ? bufs.at(act ? Slot::output : Slot::input_grad, t.mb, t.chunk)
                  : bufs.make(act ? Slot::input : Slot::output_grad, t.mb, t.chunk, stage.activation_size(t.mb));
          ops.push_back({t.dir == Dir::send ? comm::P2P::Kind::send : comm::P2P::Kind::recv, buf.data(), buf.size(),
                         t.peer});
        }
        pp_group.exchange(ops, dtype_of<T>());
        for (const PipeTransfer& t : a.transfers)
          if (t.dir == Dir::send)
            bufs.drop(t.what == What::activation ? Slot::output : Slot::input_grad, t.mb, t.chunk);
        break;
      }
    }
  }
  if (bufs.live() != 0)
    raise_error(Error::Kind::internal, fmt::format("pipeline {} rank {}: {} buffers left after the schedule",
                                                   shape.str(), r, bufs.live()));
  run.peak_buffers = bufs.peak();
  return run;
}

template PipelineRun run_pipeline<float>(const PipelineShape&, comm::Communicator&, PipelineStage<float>&);
template PipelineRun run_pipeline<double>(const PipelineShape&, comm::Communicator&, PipelineStage<double>&);

}  // namespace tb::parallel
