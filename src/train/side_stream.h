// train/side_stream.h: a communication stream beside the compute stream, at the device's highest priority (NCCL's
// blocks go first when compute kernels free SMs), ordered against it by events in both directions; the order is
// captured when the compute stream is being captured into a CUDA graph (a captured graph must end with the side
// stream joined).
//   fork(): the side stream waits for the compute stream's work so far
//   join(): the compute stream waits for the side stream's work so far
#pragma once

#include <cuda_runtime_api.h>

namespace tb::train {

class SideStream {
 public:
  explicit SideStream(cudaStream_t compute);
  ~SideStream();
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;

  cudaStream_t get() const { return side_; }
  void fork();
  void join();

 private:
  cudaStream_t compute_, side_ = nullptr;
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
};

}  // namespace tb::train
