// ops/cuda/kernel_common.cuh: what the memory-bound kernels of ops/cuda/*.cu share (include from .cu only).
// defines: bf16; kVec (8 bf16 = one 16-byte access); load/store of 8 bf16 as one uint4 with fp32 unpacking, round_bf16;
//          warp_sum / block_sum (fp32, identical result in every thread, so row statistics agree everywhere);
//          ordered_sum of strided fp32 partials, write_or_add into a gradient;
//          host checks for views (2-D bf16 rows that allow 16-byte accesses, 1-D fp32 vectors), ceil_div,
//          row_launch, str (stream-built messages), sm_count, and ScratchBuffer (a caller's Workspace, or
//          stream-ordered memory when none was given).
// Column layout used by the row kernels: thread t of a T-thread block owns the 8-column vectors
// c = t, t + T, ..., t + (V-1) T of a row (V compile-time), so a warp's accesses are 512 contiguous bytes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <sstream>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/tensor.h"
#include "ops/cuda/gemm.h"  // ops::Workspace

namespace tb::ops {

using bf16 = __nv_bfloat16;
inline constexpr int kVec = 8;  // bf16 per 16-byte access

namespace detail {

// ---- device side ----

__device__ __forceinline__ uint4 load8(const bf16* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }
// For buffers this kernel also writes (rope in place): an ordinary coherent load.
__device__ __forceinline__ uint4 load8_rw(const bf16* p) { return *reinterpret_cast<const uint4*>(p); }
__device__ __forceinline__ void store8(bf16* p, uint4 v) { *reinterpret_cast<uint4*>(p) = v; }

// bf16 -> fp32 is exact: the bf16 bits are the top half of the float's.
__device__ __forceinline__ void unpack8(uint4 v, float (&f)[8]) {
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    f[2 * k] = __uint_as_float(w[k] << 16);
    f[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
  }
}
// fp32 -> bf16, round to nearest even (one packed conversion per pair).
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  unsigned u;
  memcpy(&u, &h, sizeof u);
  return u;
}
__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
  return make_uint4(pack2(f[0], f[1]), pack2(f[2], f[3]), pack2(f[4], f[5]), pack2(f[6], f[7]));
}

// fp32 -> the bf16 value, as a float (what pack8 stores, one element).
__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// Σ_c w[c · stride] over c < n, in order (fp32 partial sums of split work: the same result every run).
__device__ __forceinline__ float ordered_sum(const float* w, std::int64_t n, std::int64_t stride) {
  float s = 0;
  for (std::int64_t c = 0; c < n; ++c) s += w[c * stride];
  return s;
}
// *d = v, or *d += v (fp32 or bf16 gradients).
template <class G>
__device__ __forceinline__ void write_or_add(G* d, float v, bool overwrite) {
  *d = G(v + (overwrite ? 0.f : float(*d)));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sums each v[k] over a 1-D block (blockDim.x a multiple of 32, at most 1024); every thread gets the same
// sums. smem: N * 32 floats. Ends with a barrier, so smem can be reused at once.
template <int N>
__device__ __forceinline__ void block_sum(float (&v)[N], float* smem) {
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31, warps = int(blockDim.x) >> 5;
#pragma unroll
  for (int k = 0; k < N; ++k) v[k] = warp_sum(v[k]);
  if (lane == 0) {
#pragma unroll
    for (int k = 0; k < N; ++k) smem[k * 32 + warp] = v[k];
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < N; ++k) v[k] = warp_sum(lane < warps ? smem[k * 32 + lane] : 0.f);
  __syncthreads();
}

// ---- host side ----

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Launch shape of the 2-D row kernels: min(threads, vectors rounded up to 32) threads along a row of nv
// 8-bf16 vectors, the rest of the block along rows; grid.y capped at 65535 (kernels stride over rows).
struct RowLaunch {
  dim3 grid, block;
};
inline RowLaunch row_launch(std::int64_t rows, int nv, int threads) {
  const int bx = int(std::min<std::int64_t>(threads, ceil_div(nv, 32) * 32));
  const int by = threads / bx;
  const std::int64_t gy = std::min<std::int64_t>(ceil_div(rows, by), 65535);
  return {dim3(unsigned(ceil_div(nv, bx)), unsigned(gy)), dim3(unsigned(bx), unsigned(by))};
}

// Error messages in .cu files are built with streams (fmt's compile-time format strings do not compile
// under nvcc).
template <class... A>
std::string str(const A&... a) {
  std::ostringstream o;
  (o << ... << a);
  return o.str();
}

inline bool aligned_to(const void* p, std::uintptr_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }
inline bool aligned16(const void* p) { return aligned_to(p, 16); }

inline int sm_count() {
  int device = 0, sms = 0;
  TB_CHECK(cudaGetDevice(&device));
  TB_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

// A 2-D view whose rows can be read 8 elements (16 bytes) at a time: contiguous rows, a row stride that is a
// multiple of 8 elements, a 16-byte aligned start. `cols` < 0: any width (checked by the caller).
template <class T>
void require_rows16(const TensorView<T>& v, std::int64_t rows, std::int64_t cols, std::string_view what) {
  constexpr std::int64_t per16 = 16 / sizeof(T);
  TB_REQUIRE(v.data() != nullptr, std::string(what) + " is required (got an empty view)");
  TB_REQUIRE(v.rank() == 2 && v.size(0) == rows && (cols < 0 || v.size(1) == cols),
             std::string(what) + " must be [" + std::to_string(rows) + ", " +
                 (cols < 0 ? std::string("n") : std::to_string(cols)) + "], got " + v.shape_str());
  TB_REQUIRE(v.stride(1) == 1 || v.size(1) <= 1,
             std::string(what) + " must have contiguous rows (stride 1 along dim 1)");
  TB_REQUIRE(v.size(1) % per16 == 0 && (v.stride(0) % per16 == 0 || v.size(0) <= 1) && aligned16(v.data()),
             std::string(what) + ": 16-byte accesses need a width and a row stride that are multiples of " +
                 std::to_string(per16) + " elements and a 16-byte aligned start (got " + v.shape_str() +
                 ", row stride " + std::to_string(v.stride(0)) + ")");
}

// A 1-D contiguous vector of n elements; align16: its start must be 16-byte aligned (vector accesses).
template <class T>
void require_vec(const TensorView<T>& v, std::int64_t n, bool align16, std::string_view what) {
  TB_REQUIRE(v.data() != nullptr, std::string(what) + " is required (got an empty view)");
  TB_REQUIRE(v.rank() == 1 && v.size(0) == n && (v.stride(0) == 1 || n <= 1),
             std::string(what) + " must be a contiguous [" + std::to_string(n) + "], got " + v.shape_str());
  TB_REQUIRE(!align16 || aligned16(v.data()), std::string(what) + " must start 16-byte aligned");
}

// Scratch memory for one call: the caller's Workspace when it has one (it must be large enough), otherwise
// stream-ordered memory (cudaMallocAsync, freed with cudaFreeAsync on the same stream; both can be captured
// in a CUDA graph).
class ScratchBuffer {
 public:
  ScratchBuffer(Workspace ws, std::size_t bytes, cudaStream_t stream, std::string_view what) : stream_(stream) {
    if (bytes == 0) return;
    if (ws.ptr) {
      TB_REQUIRE(ws.bytes >= bytes && aligned16(ws.ptr),
                 std::string(what) + ": the workspace must be 16-byte aligned and hold " + std::to_string(bytes) +
                     " bytes, got " + std::to_string(ws.bytes));
      p_ = ws.ptr;
    } else {
      TB_CHECK(cudaMallocAsync(&p_, bytes, stream));
      owned_ = true;
    }
  }
  ~ScratchBuffer() {
    if (owned_) cudaFreeAsync(p_, stream_);  // error ignored: nothing useful can be done in a destructor
  }
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  template <class T>
  T* as(std::size_t byte_offset = 0) const {
    return reinterpret_cast<T*>(static_cast<char*>(p_) + byte_offset);
  }

 private:
  void* p_ = nullptr;
  cudaStream_t stream_;
  bool owned_ = false;
};

inline std::size_t round_up256(std::size_t b) { return (b + 255) / 256 * 256; }

}  // namespace detail
}  // namespace tb::ops
