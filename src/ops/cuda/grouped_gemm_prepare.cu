// ops/cuda/grouped_gemm_prepare.cu: the kernel that turns the device start / count arrays into a grouped GEMM's
// per-group arguments (grouped_gemm_kernels.h), on the stream before the GEMM:
//   m_g = clamp(count_g, 0, rows - start_g);  shape_g = {M, N, K} with m_g in place `vary` (all 0 when m_g = 0:
//   the group has no tiles);  A_g = a + start_g · a_step (or a_groups);  B_g = b + start_g · b_step or b_groups[g];
//   D_g = C_g = d + start_g · d_step or d_groups[g];  alpha_g = a_scale[g · sa] · b_scale[g · sb];  beta = accumulate
// Block 0 writes the arguments; with zero_bytes > 0 every block then zeroes a share of D_g for each group with m_g = 0
// (a weight gradient overwritten by an expert without tokens: the GEMM does not visit it).
#include <cstdint>

#include "core/error.h"
#include "ops/cuda/grouped_gemm_kernels.h"

namespace tb::ops::grouped {
namespace {

__device__ __forceinline__ std::int64_t group_rows(const Prepare& p, int g) {
  const std::int64_t start = p.start[g];
  const std::int64_t room = p.rows - start;
  const std::int64_t m = p.count[g];
  return m < 0 || room < 0 ? 0 : (m < room ? m : room);
}

__global__ void prepare_kernel(Prepare p, Arrays x) {
  if (blockIdx.x == 0) {
    for (int g = threadIdx.x; g < p.groups; g += blockDim.x) {
      const std::int64_t m = group_rows(p, g);
      const std::int64_t start = p.start[g];
      int* shape = x.shapes + 3 * g;
      for (int i = 0; i < 3; ++i) shape[i] = m == 0 ? 0 : i == p.vary ? int(m) : p.fixed[i];
      x.a[g] = p.a + start * p.a_step;
      x.b[g] = p.b_groups ? p.b_groups[g] : p.b + start * p.b_step;
      void* d = p.d_groups ? p.d_groups[g] : p.d + start * p.d_step;
      x.d[g] = d;
      x.c[g] = d;
      const float sa = p.a_scale ? p.a_scale[g * p.a_scale_stride] : 1.0f;
      const float sb = p.b_scale ? p.b_scale[g * p.b_scale_stride] : 1.0f;
      x.alpha_values[g] = sa * sb;
    }
    if (threadIdx.x == 0) *x.beta = p.accumulate ? 1.0f : 0.0f;
  }
  if (p.zero_bytes == 0) return;
  const std::int64_t vectors = p.zero_bytes / 16;  // D_g is 16-byte aligned and zero_bytes a multiple of 16
  for (int g = 0; g < p.groups; ++g) {
    if (group_rows(p, g) != 0) continue;
    uint4* d = static_cast<uint4*>(p.d_groups[g]);
    for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < vectors;
         i += std::int64_t(gridDim.x) * blockDim.x)
      d[i] = make_uint4(0, 0, 0, 0);
  }
}

}  // namespace

void prepare(const Prepare& p, const Arrays& arrays, int blocks, cudaStream_t stream) {
  prepare_kernel<<<p.zero_bytes > 0 ? blocks : 1, 256, 0, stream>>>(p, arrays);
  TB_CHECK_LAUNCH();
}

}  // namespace tb::ops::grouped
