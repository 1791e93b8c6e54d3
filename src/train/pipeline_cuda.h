// train/pipeline_cuda.h: pipeline parallelism (1F1B and interleaved, parallel/pipeline_schedule.h) for the CUDA
// trainer. Pipeline rank r holds vp model chunks, each one CudaDecoder: chunk c is global stage s = c·pp + r of pp·vp
// (layers model::pipeline_stage_layers(L, pp·vp, s); vp = 1: the rank's one stage). Compute is enqueued on the
// decoders' stream, the point-to-point exchanges on a stream of their own (a high-priority side stream with its own
// NCCL communicator), ordered by events: an exchange starts after the compute enqueued before it, and a compute
// action waits only for the exchanges that received into, or still send from, a buffer it reads or writes; the step
// ends with the side stream joined, so it stays capturable in a CUDA graph.
// Data flow of one step on rank r, in the schedule's order (net = the action's chunk's decoder):
//   forward  (mb, c): net.forward(set, tokens[mb], targets[mb], in = recv'd h or none, out = h to send or none,
//                     grad_scale, &losses[mb])     (global stage 0 embeds, the last global stage ends in the loss)
//   backward (mb, c): net.backward(set, tokens[mb], dout = recv'd dh or none, din = dh to send or none)
//   exchange:         one grouped ncclSend / ncclRecv of the action's transfers (activations h to rank (r+1)%pp,
//                     gradients dh to rank (r-1+pp)%pp: the last rank's chunk c feeds rank 0's chunk c+1), each
//                     [boundary_rows, d_model] bf16
// plan_pipeline() maps the schedule onto storage once, on the host: each chunk pass in flight gets one of its chunk's
// activation sets (forward -> its backward), each boundary tensor one of a pool of device buffers shared by the
// chunks (received -> consumed, produced -> sent), both from free lists in schedule order. Reuse is safe because
// compute runs in schedule order on its stream, exchanges in schedule order on theirs, and each buffer's last
// exchange is waited for before compute touches the buffer again. Chunk c needs as many activation sets as the
// schedule has passes of it in flight at once (1F1B: min(pp - r, m) on rank r).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "comm/nccl_comm.h"
#include "model/decoder_cuda.h"
#include "ops/cuda/context.h"
#include "parallel/pipeline_schedule.h"
#include "train/side_stream.h"

namespace tb::train {

// The schedule of one rank with its storage assigned (pure host code).
struct PipelinePlan {
  struct Transfer {
    bool send;
    int buffer;  // index into the boundary buffer pool
    int peer;    // pipeline rank
  };
  struct Op {
    parallel::PipeAction::Kind kind;
    int mb = -1, chunk = -1;
    int set = -1;                     // forward / backward: the activation set in chunk `chunk`'s decoder
    int in = -1, out = -1;            // forward: h received / h to send; backward: dh received / dh to send (-1: none)
    std::vector<Transfer> transfers;  // exchange
    bool last_of_chunk = false;       // backward: the chunk's last of the step (its gradients are final after it)
  };
  std::vector<Op> ops;               // one per action of parallel::pipeline_schedule(shape, rank), in its order
  std::vector<int> activation_sets;  // per chunk: the activation sets its decoder needs at once
  int buffers = 0;                   // boundary buffers in the pool
};

// Raises Error{config} for a bad shape (parallel::pipeline_problems) or rank.
PipelinePlan plan_pipeline(const parallel::PipelineShape& shape, int rank);

class PipelineCuda {
 public:
  // pp: the NCCL communicator over the pipeline ranks (rank = pipeline rank; split here into the exchanges' own);
  // stream: the decoders'. chunks: this rank's shape.vp decoders, chunk c holding global stage c·pp + rank. All must
  // outlive this object. Collective over the pipeline ranks (the communicator split).
  PipelineCuda(comm::NcclCommunicator& pp, cudaStream_t stream,
               std::span<const std::unique_ptr<model::CudaDecoder>> chunks, const parallel::PipelineShape& shape);
  ~PipelineCuda();
  PipelineCuda(const PipelineCuda&) = delete;
  PipelineCuda& operator=(const PipelineCuda&) = delete;

  int activation_sets(int chunk) const { return plan_.activation_sets[std::size_t(chunk)]; }
  // Called (while enqueueing) before each backward, with its chunk and whether it is that chunk's last of the step:
  // from then on the chunk's gradients become final as its backward goes (the caller's reductions can start).
  std::function<void(int chunk, bool last)> before_backward;
  const PipelinePlan& plan() const { return plan_; }
  // After chunk c's prepare(batch, seq, activation_sets(c)) for every c (the same batch and seq): allocates the
  // boundary buffers (synchronizing) when their size changed.
  void prepare();
  // Enqueues one step: micro-batch a reads tokens / targets + a * tokens_per_mb (device), and on the last global stage
  // writes losses[a] (device; other ranks leave it); packed data: packed[a] its rows (model::PackedInputs). Micro-batch
  // a holds sequences first_sequence + a · micro_batch, ... of the step's batch (LoRA's dropout masks). No allocation,
  // host sync or host read: capturable.
  void enqueue(const std::int32_t* tokens, const std::int32_t* targets, std::size_t tokens_per_mb, double grad_scale,
               float* losses, std::span<const model::PackedInputs> packed = {}, std::int64_t first_sequence = 0,
               int micro_batch = 1);

 private:
  cudaStream_t stream_;
  SideStream side_;                              // the exchanges' stream; declared before their communicator
  std::unique_ptr<comm::NcclCommunicator> p2p_comm_;
  std::vector<cudaEvent_t> done_;                // per exchange of the plan: recorded on side_ after it
  std::vector<int> pending_;                     // per buffer: the exchange compute must wait for first, or -1
  std::vector<model::CudaDecoder*> chunks_;
  parallel::PipelineShape shape_;
  PipelinePlan plan_;
  std::size_t elems_ = 0;  // per boundary buffer
  std::vector<ops::DeviceBuffer> buffers_;
  std::vector<comm::P2P> p2p_;  // reused by every exchange
  __nv_bfloat16* buffer(int i) const { return i < 0 ? nullptr : buffers_[std::size_t(i)].as<__nv_bfloat16>(); }
  void wait_for_buffers(int a, int b);  // compute waits for the pending exchanges of buffers a, b (-1: none)
};

}  // namespace tb::train
