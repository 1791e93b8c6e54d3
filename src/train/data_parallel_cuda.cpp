// train/data_parallel_cuda.cpp: ZeRO-1 bucketed reduce-scatter / all-gather on a comm stream (data_parallel_cuda.h).
#include "train/data_parallel_cuda.h"

#include "core/error.h"

namespace tb::train {

DataParallelCuda::DataParallelCuda(comm::NcclCommunicator& dp, const parallel::ZeroLayout& z, cudaStream_t compute,
                                   __nv_bfloat16* params, float* grads)
    : dp_(dp), z_(z), st_(compute), params_(params), grads_(grads),
      shard_grads_(dp.device(), std::max<std::size_t>(z.shard_size, 1) * sizeof(float)) {
  TB_CHECK(cudaStreamCreateWithFlags(&cs_, cudaStreamNonBlocking));
  dp_.set_stream(cs_);
  auto event = [] {
    cudaEvent_t e = nullptr;
    TB_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  };
  for (std::size_t b = 0; b < z_.buckets.size(); ++b) gathered_.push_back(event()), ready_.push_back(event());
  fork_ = event();
  join_ = event();
  next_reduce_ = int(z_.buckets.size());
}

DataParallelCuda::~DataParallelCuda() {
  for (cudaEvent_t e : gathered_) cudaEventDestroy(e);
  for (cudaEvent_t e : ready_) cudaEventDestroy(e);
  cudaEventDestroy(fork_);
  cudaEventDestroy(join_);
  if (cs_) cudaStreamDestroy(cs_);
}

void DataParallelCuda::start_step() {
  TB_CHECK(cudaEventRecord(fork_, st_));
  TB_CHECK(cudaStreamWaitEvent(cs_, fork_, 0));
  for (std::size_t b = 0; b < z_.buckets.size(); ++b) {
    const parallel::ZeroBucket& k = z_.buckets[b];
    __nv_bfloat16* piece = params_ + z_.piece_begin(k);
    dp_.all_gather(piece, params_ + k.begin, z_.piece_size(k), DType::bf16);  // in place
    TB_CHECK(cudaEventRecord(gathered_[b], cs_));
  }
  next_gather_wait_ = 0;
  next_reduce_ = int(z_.buckets.size());
}

void DataParallelCuda::params_needed(std::size_t end) {
  while (next_gather_wait_ < int(z_.buckets.size()) && z_.buckets[std::size_t(next_gather_wait_)].begin < end)
    TB_CHECK(cudaStreamWaitEvent(st_, gathered_[std::size_t(next_gather_wait_++)], 0));
}

void DataParallelCuda::grads_ready(std::size_t from) {
  while (next_reduce_ > 0 && z_.buckets[std::size_t(next_reduce_ - 1)].begin >= from) {
    const std::size_t b = std::size_t(--next_reduce_);
    const parallel::ZeroBucket& k = z_.buckets[b];
    TB_CHECK(cudaEventRecord(ready_[b], st_));
    TB_CHECK(cudaStreamWaitEvent(cs_, ready_[b], 0));
    dp_.reduce_scatter(grads_ + k.begin, shard_grads() + k.shard_offset, z_.piece_size(k), DType::f32);
  }
}

void DataParallelCuda::finish_grads() {
  grads_ready(0);  // anything not yet reduced (a backward that never reported)
  TB_CHECK(cudaEventRecord(join_, cs_));
  TB_CHECK(cudaStreamWaitEvent(st_, join_, 0));
  params_needed(z_.padded_total);  // (no-op after a forward) keeps the all-gather joined into st
}

void DataParallelCuda::all_reduce(void* buf, std::size_t count, DType t) {
  TB_CHECK(cudaEventRecord(fork_, st_));
  TB_CHECK(cudaStreamWaitEvent(cs_, fork_, 0));
  dp_.all_reduce(buf, buf, count, t);
  TB_CHECK(cudaEventRecord(join_, cs_));
  TB_CHECK(cudaStreamWaitEvent(st_, join_, 0));
}

}  // namespace tb::train
