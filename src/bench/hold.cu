// bench/hold.cu: a kernel that holds a stream until the host sets a flag (or a timeout passes), so the
// work queued behind it starts back to back, free of CPU launch gaps.
#include "bench/hold.h"

#include <cuda_runtime.h>

#include "core/error.h"

namespace tb::bench {
namespace {
__global__ void hold_kernel(const volatile int* flag, unsigned long long timeout_ns) {
  unsigned long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  while (*flag == 0) {
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > timeout_ns) break;  // never deadlock if the launch queue fills before release
  }
}
}  // namespace

HostFlag::HostFlag() {
  TB_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host_), sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
  *host_ = 0;
  TB_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_), host_, 0));
}

HostFlag::~HostFlag() { cudaFreeHost(host_); }

void HostFlag::hold(cudaStream_t stream, double timeout_s) {
  *host_ = 0;
  hold_kernel<<<1, 1, 0, stream>>>(device_, static_cast<unsigned long long>(timeout_s * 1e9));
  TB_CHECK_LAUNCH();
}

void HostFlag::release() { reinterpret_cast<volatile int*>(host_)[0] = 1; }

}  // namespace tb::bench
