// train/side_stream.cpp: the event-ordered side stream (side_stream.h).
#include "train/side_stream.h"

#include "core/error.h"

namespace tb::train {

SideStream::SideStream(cudaStream_t compute) : compute_(compute) {
  int lowest = 0, highest = 0;
  TB_CHECK(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
  TB_CHECK(cudaStreamCreateWithPriority(&side_, cudaStreamNonBlocking, highest));
  TB_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
  TB_CHECK(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
}

SideStream::~SideStream() {
  cudaEventDestroy(fork_);
  cudaEventDestroy(join_);
  if (side_) cudaStreamDestroy(side_);
}

void SideStream::fork() {
  TB_CHECK(cudaEventRecord(fork_, compute_));
  TB_CHECK(cudaStreamWaitEvent(side_, fork_, 0));
}

void SideStream::join() {
  TB_CHECK(cudaEventRecord(join_, side_));
  TB_CHECK(cudaStreamWaitEvent(compute_, join_, 0));
}

}  // namespace tb::train
