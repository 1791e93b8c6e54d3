// ops/cuda/mma_sync.cuh: warp-level bf16 tensor-core pieces of the hand-written kernels (include from .cu only):
//   mma             d[16 x 8] += a[16 x 16] b[16 x 8]   (mma.sync m16n8k16, bf16 inputs, fp32 sums)
//   ldmatrix_x4     four 8 x 8 bf16 matrices from shared memory, lane l giving row l % 8 of matrix l / 8
//   ldmatrix_x4_t   the same, each matrix transposed
// Fragment layouts (PTX ISA, m16n8k16 with g = lane / 4, q = lane % 4; each 32-bit register two bf16):
//   A [16 x 16] row-major:  a0 (g, 2q..2q+1)  a1 (g + 8, 2q..)  a2 (g, 2q + 8..)  a3 (g + 8, 2q + 8..)
//   B [16 x 8]  col-major:  b0 (2q..2q+1, g)  b1 (2q + 8.., g)
//   C [16 x 8]  fp32:       c0 c1 (g, 2q and 2q + 1)  c2 c3 (g + 8, 2q and 2q + 1)
// ldmatrix gives each lane (g, 2q..2q+1) of every matrix (transposed: (2q..2q+1, g)): an A fragment from matrices
// (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) of a row-major tile.
#pragma once

#include <cstdint>

namespace tb::ops::detail {

__device__ __forceinline__ void mma(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* row) {
  const auto p = static_cast<std::uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(p));
}

__device__ __forceinline__ void ldmatrix_x4_t(std::uint32_t (&r)[4], const void* row) {
  const auto p = static_cast<std::uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(p));
}

}  // namespace tb::ops::detail
