// micro/membw_kernels.h: streaming kernels over n floats with 16-byte accesses, 4 in flight per thread.
//   copy:  b[i] = a[i]              bytes = 2 n 4 (read + write); cudaMemcpyAsync device to device
//   read:  sum a[i] (kept alive)    bytes = n 4
//   write: b[i] = v                 bytes = n 4
//   triad: c[i] = a[i] + s b[i]     bytes = 3 n 4
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string_view>

namespace tb::micro {

enum class MemKernel { copy, read, write, triad };
double membw_bytes(MemKernel k, std::size_t n_floats);  // bytes moved per call, as above
void launch_membw(MemKernel k, float* a, float* b, float* c, std::size_t n_floats, int sms, cudaStream_t stream);
void fill_membw(float* p, std::size_t n_floats, float seed, cudaStream_t stream);  // non-zero values

}  // namespace tb::micro
