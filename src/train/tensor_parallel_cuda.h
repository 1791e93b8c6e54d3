// train/tensor_parallel_cuda.h: the communication of tensor parallelism with sequence parallelism for the CUDA
// trainer (model/decoder_cuda.h TensorParallelOps is the decoder's side). Two NCCL communicators over the tp group:
//   `act`   on the compute stream: the activations' all-gathers and reduce-scatters (on the critical path), the
//           embedding rows (embedding_rows_cuda.h: every tp rank ends with the whole micro-batch's embedding
//           gradient) and the small sums (gradient norm, losses)
//   `grads` on its own high-priority stream: the trainable replicated parameters' gradients (LM head, final norm, the
//           norms: partial sums over this rank's token rows; LoRA's whole factors: partial sums over the tp ranks'
//           columns) all-reduced as the backward finishes them (grads_ready, last
//           micro-batch only; the LM head, whose optimizer is split over the ranks, reduce-scattered), overlapped with
//           the earlier layers' backward; finish_grads() joins the stream.
//   `act_async` on a second side stream: the backward's input-gradient reduce-scatters, each overlapping the weight
//           gradient GEMM that follows it (TensorParallelOps::reduce_scatter_async), and the forward's all-gathers
//           and (tp 2) partial-sum exchanges, each overlapping a part of the GEMM beside it (all_gather_async,
//           exchange_async)
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "comm/nccl_comm.h"
#include "model/decoder_cuda.h"
#include "model/param_layout.h"
#include "train/embedding_rows_cuda.h"
#include "train/side_stream.h"

namespace tb::train {

class TensorParallelCuda {
 public:
  // local: this rank's layout (parallel/tensor_shard.h); grads: the decoder's gradient buffer; rows_per_rank: the
  // tokens of a micro-batch on this rank (n / tp).
  TensorParallelCuda(comm::Communicator& tp_group, cudaStream_t compute, const model::ModelConfig& local_cfg,
                     const model::DenseLayout& local, float* grads, std::int64_t rows_per_rank);
  TensorParallelCuda(const TensorParallelCuda&) = delete;
  TensorParallelCuda& operator=(const TensorParallelCuda&) = delete;

  model::TensorParallelOps ops();
  int size() const { return act_->size(); }
  int rank() const { return act_->rank(); }
  comm::NcclCommunicator& act() { return *act_; }

  void start_step() { next_ = replicated_.size(); }
  // Replicated slots each rank updates a 1/tp part of (offset, size): their gradients are reduce-scattered (in place:
  // rank r's part summed) instead of all-reduced, half the traffic. Before the first step.
  void set_split_slots(std::vector<std::pair<std::size_t, std::size_t>> slots) { split_ = std::move(slots); }
  void grads_ready(std::size_t from);  // all-reduce the replicated slots at and above gradient offset `from`
  model::CudaDecoder::EmbeddingRows embedding_rows(const __nv_bfloat16* dnext, const std::int32_t* tokens,
                                                   std::int64_t rows);
  void finish_grads();
  void set_grads(float* grads) { grads_ = grads; }  // the decoder moved them (into its arena: shared gradients)
  // After each rank updated its 1/tp part of these replicated slots ((offset, size) in the flat buffer): all-gather
  // them in place on the side stream (overlapping the rest of the optimizer); finish_step() joins it.
  void gather_parts(__nv_bfloat16* params, const std::vector<std::pair<std::size_t, std::size_t>>& slots);
  void finish_step();
  void all_reduce(void* buf, std::size_t count, DType t, comm::ReduceOp op = comm::ReduceOp::sum) {
    act_->all_reduce(buf, buf, count, t, op);
  }
  // `s` waits for the gradient all-reduces enqueued so far (dp x tp: the dp reduce-scatter reads their results).
  void order_after_grads(cudaStream_t s);
  ~TensorParallelCuda();

 private:
  cudaStream_t st_;
  SideStream gs_, as_;  // declared before the communicators that use them: destroyed after them
  std::unique_ptr<comm::NcclCommunicator> act_, grads_comm_, act_async_;
  float* grads_;
  std::vector<const model::Slot*> replicated_;  // trainable, ascending offsets; untied: embedding and positions left
                                                // out (rows)
  std::size_t next_ = 0;                        // replicated_[next_..] already reduced this step
  std::vector<std::pair<std::size_t, std::size_t>> split_;
  std::unique_ptr<EmbeddingRowsGather> rows_;
  cudaEvent_t grads_done_ = nullptr;
};

}  // namespace tb::train
