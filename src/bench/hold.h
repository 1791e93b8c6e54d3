// bench/hold.h: HostFlag::hold(stream) queues a spin kernel that waits until release() (or a timeout).
#pragma once

#include <cuda_runtime_api.h>

namespace tb::bench {

class HostFlag {
 public:
  HostFlag();
  ~HostFlag();
  HostFlag(const HostFlag&) = delete;
  HostFlag& operator=(const HostFlag&) = delete;
  void hold(cudaStream_t stream, double timeout_s = 2.0);  // resets the flag, then queues the spin kernel
  void release();

 private:
  int* host_ = nullptr;    // pinned, mapped
  int* device_ = nullptr;  // device view of host_
};

}  // namespace tb::bench
