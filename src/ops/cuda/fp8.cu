// ops/cuda/fp8.cu: see fp8.h. amax: grid-stride max of |x| with 16-byte loads, a block reduction and one atomicMax
// per block (non-negative floats order like their bit patterns, so an integer atomicMax works; NaN's pattern is above
// inf's, so NaN propagates). Cast: without the transpose, grid-stride over 8-element vectors; with it, 64 x 64 tiles
// with 16-byte loads and 8-byte stores when the shape allows (multiples of 64), else 32 x 32 tiles with byte
// accesses, through shared memory (q written row by row, qt from the transposed tile).
#include "ops/cuda/fp8.h"

#include <cuda_fp8.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "ops/cuda/kernel_common.cuh"

namespace tb::ops {
namespace {
using detail::str;

constexpr int kThreads = 256;
constexpr int kTile = 32, kRowsPerPass = 8;  // kTile x kRowsPerPass = kThreads

__device__ __forceinline__ void atomic_max_nonneg(float* p, float v) {
  atomicMax(reinterpret_cast<int*>(p), __float_as_int(v));
}

// Called by every thread of a block of kThreads threads (any shape): *amax = max(*amax, the block's largest m), or
// NaN when a thread saw one (fmaxf drops NaN, so it is carried as a flag).
__device__ __forceinline__ void record_block_amax(float m, bool nan, float* amax) {
  __shared__ float warp_max[kThreads / 32];
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  const int any_nan = __syncthreads_or(nan);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(~0u, m, o));
  if (t % 32 == 0) warp_max[t / 32] = m;
  __syncthreads();
  if (t == 0) {
    float bm = 0.0f;
    for (int w = 0; w < kThreads / 32; ++w) bm = fmaxf(bm, warp_max[w]);
    atomic_max_nonneg(amax, any_nan ? __int_as_float(0x7fc00000) : bm);
  }
}

__device__ __forceinline__ float abs_or_nan(float x, bool& nan) {
  nan = nan || isnan(x);
  return fabsf(x);
}

__global__ void __launch_bounds__(kThreads) amax_kernel(const __nv_bfloat16* __restrict__ x, std::size_t n, float* amax) {
  float m = 0.0f;
  bool nan = false;
  const std::size_t nv = n / 8, stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < nv; i += stride) {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(x) + i);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = __bfloat1622float2(h[k]);
      m = fmaxf(m, fmaxf(abs_or_nan(f.x, nan), abs_or_nan(f.y, nan)));
    }
  }
  for (std::size_t i = nv * 8 + std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    m = fmaxf(m, abs_or_nan(__bfloat162float(x[i]), nan));
  record_block_amax(m, nan, amax);
}

template <__nv_fp8_interpretation_t Kind>
__device__ __forceinline__ std::uint8_t to_fp8(float v) {
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, Kind);
}

struct CastParams {
  const __nv_bfloat16* x;
  std::int64_t rows, cols;
  std::uint8_t* q;
  std::uint8_t* qt;
  const float* amax_in;
  float* scale;
  float* scale_inv;
  float* amax_out;
  float max_finite;
  int margin;
};

__device__ __forceinline__ float block_scale(const CastParams& p) {
  const float s = p.amax_in ? fp8_scale_for(*p.amax_in, p.max_finite, p.margin) : *p.scale;
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0) {
    if (p.amax_in) *p.scale = s;
    *p.scale_inv = 1.0f / s;
  }
  return s;
}

template <__nv_fp8_interpretation_t Kind>
__global__ void __launch_bounds__(kThreads) cast_kernel(CastParams p) {
  const float s = block_scale(p);
  const std::size_t n = std::size_t(p.rows) * std::size_t(p.cols), nv = n / 8;
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  float m = 0.0f;
  bool nan = false;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < nv; i += stride) {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(p.x) + i);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
    union {
      uint2 v;
      std::uint8_t b[8];
    } out;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = __bfloat1622float2(h[k]);
      m = fmaxf(m, fmaxf(abs_or_nan(f.x, nan), abs_or_nan(f.y, nan)));
      out.b[2 * k] = to_fp8<Kind>(f.x * s);
      out.b[2 * k + 1] = to_fp8<Kind>(f.y * s);
    }
    reinterpret_cast<uint2*>(p.q)[i] = out.v;
  }
  for (std::size_t i = nv * 8 + std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float f = __bfloat162float(p.x[i]);
    m = fmaxf(m, abs_or_nan(f, nan));
    p.q[i] = to_fp8<Kind>(f * s);
  }
  if (p.amax_out) record_block_amax(m, nan, p.amax_out);
}

// One 32 x 32 tile per block of 32 x 8 threads; rows, cols multiples of 32 handled by the grid, edges masked.
template <__nv_fp8_interpretation_t Kind>
__global__ void __launch_bounds__(kTile* kRowsPerPass) cast_transpose_kernel(CastParams p) {
  __shared__ std::uint8_t tile[kTile][kTile + 4];
  const float s = block_scale(p);
  const std::int64_t r0 = std::int64_t(blockIdx.y) * kTile, c0 = std::int64_t(blockIdx.x) * kTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  float m = 0.0f;
  bool nan = false;
  for (int r = ty; r < kTile; r += kRowsPerPass) {
    const std::int64_t row = r0 + r, col = c0 + tx;
    std::uint8_t b = 0;
    if (row < p.rows && col < p.cols) {
      const float f = __bfloat162float(p.x[row * p.cols + col]);
      m = fmaxf(m, abs_or_nan(f, nan));
      b = to_fp8<Kind>(f * s);
      if (p.q) p.q[row * p.cols + col] = b;
    }
    tile[r][tx] = b;
  }
  __syncthreads();
  for (int r = ty; r < kTile; r += kRowsPerPass) {  // qt[c0 + r][r0 + tx] = q[r0 + tx][c0 + r]
    const std::int64_t qrow = c0 + r, qcol = r0 + tx;
    if (qrow < p.cols && qcol < p.rows) p.qt[qrow * p.rows + qcol] = tile[tx][r];
  }
  if (p.amax_out) record_block_amax(m, nan, p.amax_out);
}

// 64 x 64 tiles, 256 threads, rows and cols multiples of 64: 16-byte loads of x (8 bf16), 8-byte stores of q and
// of qt (8 consecutive rows of one column, gathered from the tile in shared memory).
constexpr int kBig = 64;
template <__nv_fp8_interpretation_t Kind>
__global__ void __launch_bounds__(kThreads) cast_transpose64_kernel(CastParams p) {
  __shared__ std::uint8_t tile[kBig][kBig + 8];
  const float s = block_scale(p);
  const std::int64_t r0 = std::int64_t(blockIdx.y) * kBig, c0 = std::int64_t(blockIdx.x) * kBig;
  const int t = threadIdx.x;
  float m = 0.0f;
  bool nan = false;
#pragma unroll
  for (int pass = 0; pass < 2; ++pass) {  // 512 vectors of 8: row = v / 8, column group = v % 8
    const int v = pass * 256 + t, r = v / 8, cg = (v % 8) * 8;
    const std::int64_t row = r0 + r;
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(p.x + row * p.cols + c0 + cg));
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
    union {
      uint2 v2;
      std::uint8_t b[8];
    } out;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = __bfloat1622float2(h[k]);
      m = fmaxf(m, fmaxf(abs_or_nan(f.x, nan), abs_or_nan(f.y, nan)));
      out.b[2 * k] = to_fp8<Kind>(f.x * s);
      out.b[2 * k + 1] = to_fp8<Kind>(f.y * s);
    }
    if (p.q) *reinterpret_cast<uint2*>(p.q + row * p.cols + c0 + cg) = out.v2;
    *reinterpret_cast<uint2*>(&tile[r][cg]) = out.v2;
  }
  __syncthreads();
#pragma unroll
  for (int pass = 0; pass < 2; ++pass) {  // qt row c (a column of the tile), 8 rows of x per store
    const int v = pass * 256 + t, c = v / 8, rg = (v % 8) * 8;
    union {
      uint2 v2;
      std::uint8_t b[8];
    } out;
#pragma unroll
    for (int k = 0; k < 8; ++k) out.b[k] = tile[rg + k][c];
    *reinterpret_cast<uint2*>(p.qt + (c0 + c) * p.rows + r0 + rg) = out.v2;
  }
  if (p.amax_out) record_block_amax(m, nan, p.amax_out);
}

__global__ void update_kernel(float* base, std::size_t stride, int n, int h, float max_finite, int algo, int margin) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n) return;
  float* slot = base + std::size_t(t) * stride;
  float* amax = slot;
  float* scale = slot + Fp8Scales::kSlotFloats;
  float* scale_inv = slot + 2 * Fp8Scales::kSlotFloats;
  float* hist = slot + 3 * Fp8Scales::kSlotFloats;
  for (int i = h - 1; i > 0; --i) hist[i] = hist[i - 1];
  hist[0] = *amax;
  *amax = 0.0f;
  float ref = hist[0];
  if (algo == 0)
    for (int i = 1; i < h; ++i) ref = isnan(hist[i]) || isnan(ref) ? __int_as_float(0x7fc00000) : fmaxf(ref, hist[i]);
  if (ref > 0.0f && ref <= 3.4028234e38f) {
    *scale = fp8_scale_for(ref, max_finite, margin);
    *scale_inv = 1.0f / *scale;
  }
}

unsigned grid_for(std::size_t work, int threads) {
  return unsigned(std::clamp<std::size_t>((work + threads - 1) / threads, 1, 4096));
}

}  // namespace

float fp8_max(DType t) {
  TB_REQUIRE(is_fp8(t), str("fp8_max: ", dtype_name(t), " is not an fp8 type"));
  return t == DType::e4m3 ? 448.0f : 57344.0f;
}

Fp8Scales::Fp8Scales(int device, int tensors, int history_len, cudaStream_t stream) : n_(tensors), h_(history_len) {
  TB_REQUIRE(tensors >= 1 && history_len >= 1 && history_len <= 1024,
             str("Fp8Scales: need tensors >= 1 and 1 <= history_len <= 1024, got ", tensors, " and ", history_len));
  const std::size_t hist_slots = (std::size_t(history_len) + kSlotFloats - 1) / kSlotFloats;
  stride_ = (3 + hist_slots) * kSlotFloats;
  buf_ = DeviceBuffer(device, stride_ * std::size_t(tensors) * sizeof(float));
  std::vector<float> host(stride_ * std::size_t(tensors), 0.0f);
  for (int t = 0; t < tensors; ++t) {
    host[std::size_t(t) * stride_ + kSlotFloats] = 1.0f;
    host[std::size_t(t) * stride_ + 2 * kSlotFloats] = 1.0f;
  }
  TB_CHECK(cudaMemcpyAsync(buf_.get(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
  TB_CHECK(cudaStreamSynchronize(stream));  // host is freed on return
}

Fp8Meta Fp8Scales::meta(int i) const {
  TB_REQUIRE(i >= 0 && i < n_, str("Fp8Scales: tensor ", i, " out of ", n_));
  float* slot = buf_.as<float>() + std::size_t(i) * stride_;
  return {slot, slot + kSlotFloats, slot + 2 * kSlotFloats, slot + 3 * kSlotFloats};
}

void fp8_amax(const __nv_bfloat16* x, std::size_t n, float* amax, cudaStream_t stream) {
  TB_REQUIRE(x && amax, "fp8_amax: x and amax must be device pointers");
  TB_REQUIRE(reinterpret_cast<std::uintptr_t>(x) % 16 == 0, "fp8_amax: x must be 16-byte aligned");
  if (n == 0) return;
  amax_kernel<<<grid_for(n / 8 + 1, kThreads), kThreads, 0, stream>>>(x, n, amax);
  TB_CHECK_LAUNCH();
}

void fp8_cast(const Fp8CastArgs& a, cudaStream_t stream) {
  const std::string what = str("fp8_cast(", dtype_name(a.type), " [", a.rows, ", ", a.cols, "])");
  TB_REQUIRE(is_fp8(a.type), what + ": the type must be e4m3 or e5m2");
  TB_REQUIRE(a.x && (a.q || a.qt) && a.scale && a.scale_inv, what + ": needs x, q or qt, scale and scale_inv");
  TB_REQUIRE(a.rows >= 1 && a.cols >= 1, what + ": empty tensor");
  TB_REQUIRE(a.margin >= 0 && a.margin < 64, what + ": margin must be in [0, 64)");
  CastParams p{a.x, a.rows, a.cols, static_cast<std::uint8_t*>(a.q), static_cast<std::uint8_t*>(a.qt), a.amax_in,
               a.scale, a.scale_inv, a.amax_out, fp8_max(a.type), a.margin};
  const bool e4 = a.type == DType::e4m3;
  const bool aligned = reinterpret_cast<std::uintptr_t>(a.x) % 16 == 0 &&
                       reinterpret_cast<std::uintptr_t>(a.q) % 8 == 0 && reinterpret_cast<std::uintptr_t>(a.qt) % 8 == 0;
  if (a.qt && a.rows % kBig == 0 && a.cols % kBig == 0 && aligned && a.rows / kBig < 65536) {
    const dim3 grid(unsigned(a.cols / kBig), unsigned(a.rows / kBig));
    if (e4)
      cast_transpose64_kernel<__NV_E4M3><<<grid, 256, 0, stream>>>(p);
    else
      cast_transpose64_kernel<__NV_E5M2><<<grid, 256, 0, stream>>>(p);
  } else if (a.qt) {
    const dim3 grid(unsigned((a.cols + kTile - 1) / kTile), unsigned((a.rows + kTile - 1) / kTile));
    TB_REQUIRE(grid.y < 65536, what + ": too many rows for one launch");
    const dim3 block(kTile, kRowsPerPass);
    if (e4)
      cast_transpose_kernel<__NV_E4M3><<<grid, block, 0, stream>>>(p);
    else
      cast_transpose_kernel<__NV_E5M2><<<grid, block, 0, stream>>>(p);
  } else {
    TB_REQUIRE(reinterpret_cast<std::uintptr_t>(a.x) % 16 == 0 && reinterpret_cast<std::uintptr_t>(a.q) % 8 == 0,
               what + ": x must be 16-byte and q 8-byte aligned");
    const std::size_t n = std::size_t(a.rows) * std::size_t(a.cols);
    if (e4)
      cast_kernel<__NV_E4M3><<<grid_for(n / 8 + 1, kThreads), kThreads, 0, stream>>>(p);
    else
      cast_kernel<__NV_E5M2><<<grid_for(n / 8 + 1, kThreads), kThreads, 0, stream>>>(p);
  }
  TB_CHECK_LAUNCH();
}

void fp8_update_scales(const Fp8Scales& scales, DType type, AmaxAlgo algo, int margin, cudaStream_t stream) {
  update_kernel<<<grid_for(std::size_t(scales.tensors()), 128), 128, 0, stream>>>(
      scales.base(), scales.slot_stride(), scales.tensors(), scales.history_len(), fp8_max(type),
      algo == AmaxAlgo::max ? 0 : 1, margin);
  TB_CHECK_LAUNCH();
}

}  // namespace tb::ops
