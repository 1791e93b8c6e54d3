// train/embedding_rows_cuda.cpp: the row exchange of embedding gradients (embedding_rows_cuda.h).
#include "train/embedding_rows_cuda.h"

#include "core/error.h"
#include "ops/cuda/embedding.h"

namespace tb::train {

EmbeddingRowsGather::EmbeddingRowsGather(int device, const model::ModelConfig& m, std::int64_t rows_per_rank,
                                         int ranks)
    : rows_per_rank_(rows_per_rank), d_model_(m.d_model) {
  const Sizes z = sizes(m, rows_per_rank, ranks);
  dnext_ = ops::DeviceBuffer(device, z.dnext);
  tokens_ = ops::DeviceBuffer(device, z.tokens);
  ws_bytes_ = z.workspace;
  ws_ = ops::DeviceBuffer(device, ws_bytes_);
}

EmbeddingRowsGather::Sizes EmbeddingRowsGather::sizes(const model::ModelConfig& m, std::int64_t rows_per_rank,
                                                      int ranks) {
  const std::int64_t all = rows_per_rank * ranks;
  return {std::size_t(all) * std::size_t(m.d_model) * sizeof(__nv_bfloat16), std::size_t(all) * sizeof(std::int32_t),
          ops::embedding_backward_workspace_bytes(all, m.vocab, m.d_model)};
}

std::size_t EmbeddingRowsGather::bytes(const model::ModelConfig& m, std::int64_t rows_per_rank, int ranks) {
  const Sizes z = sizes(m, rows_per_rank, ranks);
  return z.dnext + z.tokens + z.workspace;
}

model::CudaDecoder::EmbeddingRows EmbeddingRowsGather::gather(comm::NcclCommunicator& group,
                                                              const __nv_bfloat16* dnext, const std::int32_t* tokens,
                                                              std::int64_t rows) {
  TB_REQUIRE(rows == rows_per_rank_, "embedding rows: the rows per micro-batch changed");
  group.all_gather(dnext, dnext_.get(), std::size_t(rows) * std::size_t(d_model_), DType::bf16);
  group.all_gather(tokens, tokens_.get(), std::size_t(rows), DType::i32);
  return {dnext_.as<__nv_bfloat16>(), tokens_.as<std::int32_t>(), rows * group.size(), ws_.get(), ws_bytes_};
}

}  // namespace tb::train
