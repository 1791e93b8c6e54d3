// train/pipeline_cuda.h: pipeline parallelism (1F1B, parallel/pipeline_schedule.h) for the CUDA trainer. One pipeline
// rank = one CudaDecoder stage (layers model::pipeline_stage_layers(L, pp, rank)); everything is enqueued on the
// decoder's stream, which is also the NCCL communicator's, so a step is one stream and capturable in a CUDA graph.
// Data flow of one step on rank r, in the schedule's order:
//   forward  (mb): net.forward(set, tokens[mb], targets[mb], in = recv'd h or none, out = h to send or none,
//                  grad_scale, &losses[mb])          (first stage embeds, last stage ends in the loss)
//   backward (mb): net.backward(set, tokens[mb], dout = recv'd dh or none, din = dh to send or none)
//   exchange:      one grouped ncclSend / ncclRecv of the action's transfers (activations h to rank r+1, gradients
//                  dh to rank r-1), each [boundary_rows, d_model] bf16
// plan_pipeline() maps the schedule onto storage once, on the host: each micro-batch in flight gets one of the
// decoder's activation sets (forward -> its backward), each boundary tensor one of a pool of device buffers
// (received -> consumed, produced -> sent), both from free lists in schedule order. Reuse is safe because every
// action runs in order on the one stream. 1F1B needs min(pp - r, m) activation sets on rank r.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/nccl_comm.h"
#include "model/decoder_cuda.h"
#include "ops/cuda/context.h"
#include "parallel/pipeline_schedule.h"

namespace tb::train {

// The schedule of one rank with its storage assigned (pure host code; vp = 1 only).
struct PipelinePlan {
  struct Transfer {
    bool send;
    int buffer;  // index into the boundary buffer pool
    int peer;    // pipeline rank
  };
  struct Op {
    parallel::PipeAction::Kind kind;
    int mb = -1;
    int set = -1;                     // forward / backward: the decoder's activation set
    int in = -1, out = -1;            // forward: h received / h to send; backward: dh received / dh to send (-1: none)
    std::vector<Transfer> transfers;  // exchange
  };
  std::vector<Op> ops;
  int activation_sets = 0;  // decoder activation sets the schedule needs at once
  int buffers = 0;          // boundary buffers in the pool
};

// Raises Error{config} for vp > 1 (interleaved) or a bad shape / rank.
PipelinePlan plan_pipeline(const parallel::PipelineShape& shape, int rank);

class PipelineCuda {
 public:
  // pp: the NCCL communicator over the pipeline ranks (rank = pipeline rank), enqueuing on `stream`, the decoder's.
  // net: this rank's stage. Both must outlive this object.
  PipelineCuda(comm::NcclCommunicator& pp, cudaStream_t stream, model::CudaDecoder& net,
               const parallel::PipelineShape& shape);

  int activation_sets() const { return plan_.activation_sets; }
  const PipelinePlan& plan() const { return plan_; }
  // After net.prepare(batch, seq, activation_sets()): allocates the boundary buffers (synchronizing) when their size
  // changed.
  void prepare();
  // Enqueues one step: micro-batch a reads tokens / targets + a * tokens_per_mb (device), and on the last stage writes
  // losses[a] (device; other ranks leave it). No allocation, host sync or host read: capturable.
  void enqueue(const std::int32_t* tokens, const std::int32_t* targets, std::size_t tokens_per_mb, double grad_scale,
               float* losses);

 private:
  comm::NcclCommunicator& pp_;
  cudaStream_t stream_;
  model::CudaDecoder& net_;
  parallel::PipelineShape shape_;
  PipelinePlan plan_;
  std::size_t elems_ = 0;  // per boundary buffer
  std::vector<ops::DeviceBuffer> buffers_;
  std::vector<comm::P2P> p2p_;  // reused by every exchange
  __nv_bfloat16* buffer(int i) const { return i < 0 ? nullptr : buffers_[std::size_t(i)].as<__nv_bfloat16>(); }
};

}  // namespace tb::train
