// train/embedding_rows_cuda.h: the embedding gradient exchanged as rows. The embedding backward of a micro-batch
// touches only the rows of its tokens, so ranks that hold the same embedding table (data-parallel or tensor-parallel
// replicas) all-gather each other's input gradients dnext [rows, d] and tokens [rows] and every rank accumulates all
// of them: ranks · rows · (2 d + 4) bytes moved instead of an all-reduce of the vocab x d fp32 gradient, and every
// replica ends with the same summed gradient.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "comm/nccl_comm.h"
#include "model/decoder_cuda.h"
#include "ops/cuda/context.h"

namespace tb::train {

class EmbeddingRowsGather {
 public:
  // rows_per_rank: the rows each rank contributes per micro-batch; ranks: the group's size.
  EmbeddingRowsGather(int device, const model::ModelConfig& m, std::int64_t rows_per_rank, int ranks);
  // The device bytes such a gather holds (the memory estimate).
  static std::size_t bytes(const model::ModelConfig& m, std::int64_t rows_per_rank, int ranks);
  // Enqueues the two all-gathers on group's stream; the decoder's embedding backward then reads the result (the
  // caller orders the streams when group's stream is not the decoder's).
  model::CudaDecoder::EmbeddingRows gather(comm::NcclCommunicator& group, const __nv_bfloat16* dnext,
                                           const std::int32_t* tokens, std::int64_t rows);

 private:
  struct Sizes {
    std::size_t dnext, tokens, workspace;  // bytes: the gathered rows, their tokens, the backward's workspace
  };
  static Sizes sizes(const model::ModelConfig& m, std::int64_t rows_per_rank, int ranks);
  std::int64_t rows_per_rank_;
  int d_model_;
  ops::DeviceBuffer dnext_, tokens_, ws_;
  std::size_t ws_bytes_ = 0;
};

}  // namespace tb::train
