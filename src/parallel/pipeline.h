// parallel/pipeline.h: runs one pipeline rank's schedule (parallel/pipeline_schedule.h) over its model chunks.
// The model side is a PipelineStage: forward and backward of one micro-batch through one of this rank's chunks
// (chunk c = global stage c·pp + rank, e.g. layers [a, b) of a decoder; the first global stage reads its
// micro-batch from the data (embedding), the last one ends in the loss). The executor owns the activations and
// gradients in flight between stages and moves them with Communicator::exchange over the pipeline group:
// activations to rank (r+1)%pp, gradients to rank (r−1+pp)%pp. Each exchange action's sends and receives are
// issued together, paired as Megatron pairs them (send_forward_recv_backward, send_backward_recv_forward, ...:
// see pipeline_schedule.h), which is what keeps blocking transfers from deadlocking: the peers of every exchange
// reach the exchange holding the other side of its transfers without first waiting on this one. Messages carry
// no tag; they match in posting order, which the schedules keep the same on both sides of every link (pp = 2:
// activations before gradients in each exchange). tests/parallel/pipeline_schedule_test.cpp checks both with an
// event simulation in which a send waits for its receive to be posted. Host buffers: MPI or one-rank communicator.
#pragma once

#include <cstddef>
#include <span>

#include "comm/communicator.h"
#include "parallel/pipeline_schedule.h"

namespace tb::parallel {

template <class T>
class PipelineStage {
 public:
  virtual ~PipelineStage() = default;
  // Elements of the activation passed from a stage to the next for micro-batch mb; its gradient has the same size
  // (a decoder: micro_batch·seq·d_model, or / tp with sequence parallel).
  virtual std::size_t activation_size(int mb) const = 0;
  // Forward of micro-batch mb through this rank's chunk `chunk`. in: the previous stage's output (empty on the
  // first global stage, which reads its micro-batch itself); out: activation_size(mb) elements to fill (empty on
  // the last global stage). Returns the micro-batch's loss on the last global stage (ignored elsewhere). Keep
  // what backward needs: `in` is released when forward returns.
  virtual double forward(int mb, int chunk, std::span<const T> in, std::span<T> out) = 0;
  // Backward of the same pass. dout: dloss/dout (empty on the last global stage, which starts from its loss);
  // din: dloss/din to fill (empty on the first global stage). Parameter gradients accumulate over micro-batches.
  virtual void backward(int mb, int chunk, std::span<const T> dout, std::span<T> din) = 0;
};

struct PipelineRun {
  double loss = 0;  // sum of the micro-batch losses on the rank holding the last global stage, 0 elsewhere
  int forwards = 0, backwards = 0;
  int peak_buffers = 0;  // most activations / gradients the executor held at once (received or waiting to be sent)
};

// Runs shape's schedule for rank pp_group.rank() (pp_group.size() == shape.pp); collective over pp_group.
template <class T>
PipelineRun run_pipeline(const PipelineShape& shape, comm::Communicator& pp_group, PipelineStage<T>& stage);

extern template PipelineRun run_pipeline<float>(const PipelineShape&, comm::Communicator&, PipelineStage<float>&);
extern template PipelineRun run_pipeline<double>(const PipelineShape&, comm::Communicator&, PipelineStage<double>&);

}  // namespace tb::parallel
