// train/data_parallel_cuda.h: data parallelism with the distributed optimizer (ZeRO-1, parallel/zero.h) for the CUDA
// trainer, communication on its own stream overlapped with compute. Per step, in stream order (st: compute, cs: comm):
//   start_step:      cs waits for st; all-gather every bucket's bf16 parameters in place, ascending (each rank
//                    contributes the piece its optimizer updated), one event per bucket
//   params_needed:   st waits for the all-gather of the buckets below `end` (the forward overlaps the later ones)
//   grads_ready:     (last micro-batch only) for every bucket now complete: st records, cs waits, reduce-scatter
//                    its fp32 gradients into this rank's shard (the backward overlaps the earlier layers)
//   finish_grads:    st waits for cs (every shard gradient summed)
//   all_reduce(x):   st -> cs -> st: a small sum over the dp ranks (the gradient norm squared, the losses)
// Gradients are averaged by the caller's grad_scale (1 / (accumulation · dp)), so a sum is the mean.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "comm/nccl_comm.h"
#include "ops/cuda/context.h"
#include "parallel/zero.h"

namespace tb::train {

class DataParallelCuda {
 public:
  // dp: the NCCL communicator over the data-parallel ranks (its stream is replaced by this object's comm stream).
  DataParallelCuda(comm::NcclCommunicator& dp, const parallel::ZeroLayout& z, cudaStream_t compute,
                   __nv_bfloat16* params, float* grads);
  ~DataParallelCuda();
  DataParallelCuda(const DataParallelCuda&) = delete;
  DataParallelCuda& operator=(const DataParallelCuda&) = delete;

  const parallel::ZeroLayout& layout() const { return z_; }
  float* shard_grads() const { return shard_grads_.as<float>(); }

  void start_step();
  void params_needed(std::size_t end);
  void grads_ready(std::size_t from);
  void finish_grads();
  void all_reduce(void* buf, std::size_t count, DType t);
  int buckets_reduced() const { return next_reduce_; }  // this step's, counting down from buckets().size()

 private:
  comm::NcclCommunicator& dp_;
  parallel::ZeroLayout z_;
  cudaStream_t st_, cs_ = nullptr;
  __nv_bfloat16* params_;
  float* grads_;
  ops::DeviceBuffer shard_grads_;
  std::vector<cudaEvent_t> gathered_, ready_;
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  int next_gather_wait_ = 0;  // buckets below this index: st already waits for their all-gather
  int next_reduce_ = 0;       // buckets at and above this index: reduce-scatter enqueued
};

}  // namespace tb::train
