// train/data_parallel_cuda.h: data parallelism with the distributed optimizer (ZeRO-1, parallel/zero.h) for the CUDA
// trainer, communication on its own high-priority stream overlapped with compute. Per step, in stream order
// (st: compute, cs: comm; "st -> cs" = an event recorded on st that cs waits for):
//   start_step:      st -> cs; all-gather in place, ascending, the bf16 parameters of the buckets from `early` up
//                    (each rank contributes the piece its optimizer updated), one event per bucket
//   params_needed:   st waits for the all-gather of the buckets below `end` (the forward overlaps the later ones)
//   grads_ready:     (last micro-batch only) for every bucket now complete: st -> cs, reduce-scatter its fp32
//                    gradients into this rank's shard (the backward overlaps the earlier layers)
//   embedding_rows:  (untied embeddings, every micro-batch) st -> cs, all-gather this rank's dnext [n, d] and tokens,
//                    cs -> st: every rank accumulates every rank's rows into its full embedding gradient, so bucket 0
//                    (the embedding) needs no reduce-scatter: dp n (2 d + 4) bytes gathered instead of 4 vocab d
//                    reduced, and nothing left for after the backward. Its optimizer reads the full gradient buffer.
//   finish_grads:    cs -> st (every shard gradient summed)
//   all_reduce(x):   st -> cs -> st: a small sum (or max) over the dp ranks (the gradient norm squared, the losses,
//                    FP8 amaxes)
//   gather_early:    after the optimizer updated buckets [0, early): st -> cs, all-gather them (overlapping the
//                    optimizer of the other buckets) — the next forward starts with them, so they cannot wait for it
//   finish_step:     cs -> st (the step's graph ends with every stream joined)
// Gradients are averaged by the caller's grad_scale (1 / (accumulation · dp)), so a sum is the mean. Combined with
// tensor parallel (dp x tp), `before_reduce` orders each reduce-scatter after the tp all-reduces of the replicated
// slots' gradients in the same bytes (the reduce-scatter must read the tp-summed values).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "comm/nccl_comm.h"
#include "model/decoder_cuda.h"
#include "ops/cuda/context.h"
#include "parallel/zero.h"
#include "train/embedding_rows_cuda.h"
#include "train/side_stream.h"

namespace tb::train {

class DataParallelCuda {
 public:
  // dp: the NCCL communicator over the data-parallel ranks (its stream is replaced by this object's comm stream, so
  // two DataParallelCuda objects cannot share one: split one per object).
  // sparse_embedding_rows: tokens per micro-batch when the embedding gradient is exchanged as rows (untied
  // embeddings), else 0. early: buckets all-gathered at the end of the step (clamped to the bucket count).
  DataParallelCuda(comm::NcclCommunicator& dp, const parallel::ZeroLayout& z, cudaStream_t compute,
                   __nv_bfloat16* params, float* grads, const model::ModelConfig& m, std::int64_t sparse_embedding_rows,
                   int early = 2);
  ~DataParallelCuda();
  DataParallelCuda(const DataParallelCuda&) = delete;
  DataParallelCuda& operator=(const DataParallelCuda&) = delete;

  const parallel::ZeroLayout& layout() const { return z_; }
  int early() const { return early_; }
  bool sparse_embedding() const { return rows_ != nullptr; }
  // The gradient the optimizer reads for one of this rank's segments: the reduced shard, or (bucket 0 with the
  // sparse embedding exchange) the full gradient buffer.
  const float* segment_grads(const parallel::ZeroSegment& s) const;

  void start_step();
  void params_needed(std::size_t end);
  void grads_ready(std::size_t from);
  model::CudaDecoder::EmbeddingRows embedding_rows(const __nv_bfloat16* dnext, const std::int32_t* tokens,
                                                   std::int64_t rows);
  void finish_grads();
  void set_grads(float* grads) { grads_ = grads; }  // the decoder moved them (into its arena: shared gradients)
  void all_reduce(void* buf, std::size_t count, DType t, comm::ReduceOp op = comm::ReduceOp::sum);
  void gather_early();
  void finish_step();
  // Called with the comm stream before grads_ready() enqueues reduce-scatters (dp x tp: waits for the tp all-reduces).
  std::function<void(cudaStream_t)> before_reduce;

 private:
  void gather(std::size_t b);
  comm::NcclCommunicator& dp_;
  parallel::ZeroLayout z_;
  cudaStream_t st_;
  SideStream cs_;
  __nv_bfloat16* params_;
  float* grads_;
  int early_;
  ops::DeviceBuffer shard_grads_;
  std::unique_ptr<EmbeddingRowsGather> rows_;
  std::vector<cudaEvent_t> gathered_;
  std::vector<cudaEvent_t> ready_;
  std::size_t next_gather_wait_ = 0;  // buckets below this index: st already waits for their all-gather
  std::size_t next_reduce_ = 0;       // buckets at and above this index: reduce-scatter enqueued
};

}  // namespace tb::train
