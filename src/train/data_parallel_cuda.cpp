// train/data_parallel_cuda.cpp: ZeRO-1 bucketed reduce-scatter / all-gather on a comm stream (data_parallel_cuda.h).
#include "train/data_parallel_cuda.h"

#include <algorithm>

#include "core/error.h"

namespace tb::train {

DataParallelCuda::DataParallelCuda(comm::NcclCommunicator& dp, const parallel::ZeroLayout& z, cudaStream_t compute,
                                   __nv_bfloat16* params, float* grads, const model::ModelConfig& m,
                                   std::int64_t sparse_embedding_rows, int early)
    : dp_(dp), z_(z), st_(compute), cs_(compute), params_(params), grads_(grads),
      early_(std::clamp(early, 0, int(z.buckets.size()))),
      shard_grads_(dp.device(), std::max<std::size_t>(z.shard_size, 1) * sizeof(float)) {
  dp_.set_stream(cs_.get());
  auto event = [] {
    cudaEvent_t e = nullptr;
    TB_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  };
  for (std::size_t b = 0; b < z_.buckets.size(); ++b) gathered_.push_back(event()), ready_.push_back(event());
  next_reduce_ = z_.buckets.size();
  if (sparse_embedding_rows > 0)
    rows_ = std::make_unique<EmbeddingRowsGather>(dp.device(), m, sparse_embedding_rows, dp.size());
}

DataParallelCuda::~DataParallelCuda() {
  for (cudaEvent_t e : gathered_) cudaEventDestroy(e);
  for (cudaEvent_t e : ready_) cudaEventDestroy(e);
}

const float* DataParallelCuda::segment_grads(const parallel::ZeroSegment& s) const {
  const bool in_embedding = s.flat < z_.buckets.front().end;
  return sparse_embedding() && in_embedding ? grads_ + s.flat : shard_grads_.as<float>() + s.shard;
}

void DataParallelCuda::gather(std::size_t b) {
  const parallel::ZeroBucket& k = z_.buckets[b];
  dp_.all_gather(params_ + z_.piece_begin(k), params_ + k.begin, z_.piece_size(k), DType::bf16);  // in place
  TB_CHECK(cudaEventRecord(gathered_[b], cs_.get()));
}

void DataParallelCuda::start_step() {
  cs_.fork();
  for (std::size_t b = std::size_t(early_); b < z_.buckets.size(); ++b) gather(b);
  next_gather_wait_ = std::size_t(early_);
  next_reduce_ = z_.buckets.size();
}

void DataParallelCuda::params_needed(std::size_t end) {
  while (next_gather_wait_ < z_.buckets.size() && z_.buckets[next_gather_wait_].begin < end)
    TB_CHECK(cudaStreamWaitEvent(st_, gathered_[next_gather_wait_++], 0));
}

void DataParallelCuda::grads_ready(std::size_t from) {
  bool ordered = false;  // before_reduce called for this call's reduce-scatters
  while (next_reduce_ > 0 && z_.buckets[next_reduce_ - 1].begin >= from) {
    const std::size_t b = --next_reduce_;
    if (b == 0 && sparse_embedding()) break;  // the embedding's rows were exchanged by embedding_rows()
    const parallel::ZeroBucket& k = z_.buckets[b];
    TB_CHECK(cudaEventRecord(ready_[b], st_));
    TB_CHECK(cudaStreamWaitEvent(cs_.get(), ready_[b], 0));
    if (before_reduce && !ordered) {  // (the comm stream runs in order: once covers this call's buckets)
      before_reduce(cs_.get());
      ordered = true;
    }
    dp_.reduce_scatter(grads_ + k.begin, shard_grads_.as<float>() + k.shard_offset, z_.piece_size(k), DType::f32);
  }
}

model::CudaDecoder::EmbeddingRows DataParallelCuda::embedding_rows(const __nv_bfloat16* dnext,
                                                                   const std::int32_t* tokens, std::int64_t rows) {
  cs_.fork();
  const model::CudaDecoder::EmbeddingRows out = rows_->gather(dp_, dnext, tokens, rows);
  cs_.join();
  return out;
}

void DataParallelCuda::finish_grads() {
  grads_ready(0);  // anything not yet reduced (a backward that never reported)
  cs_.join();
  params_needed(z_.padded_total);  // (no-op after a forward) keeps every all-gather joined into st
}

void DataParallelCuda::all_reduce(void* buf, std::size_t count, DType t, comm::ReduceOp op) {
  cs_.fork();
  dp_.all_reduce(buf, buf, count, t, op);
  cs_.join();
}

void DataParallelCuda::gather_early() {
  cs_.fork();
  for (std::size_t b = 0; b < std::size_t(early_); ++b) gather(b);
}

void DataParallelCuda::finish_step() { cs_.join(); }

}  // namespace tb::train
