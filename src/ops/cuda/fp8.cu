// ops/cuda/fp8.cu: see fp8.h. amax: grid-stride max of |x| with 16-byte loads, a block reduction and one atomicMax
// per block (non-negative floats order like their bit patterns, so an integer atomicMax works; NaN's pattern is above
// inf's, so NaN propagates). Cast: without the transpose, grid-stride over 8-element vectors; with it, the tile
// kernels of ops/cuda/fp8_cast.cuh (8 x 8 blocks per thread with 16-byte loads when the shape allows, else 32 x 32
// tiles).
// Dequantise: grid-stride over 8-element vectors (8-byte loads, 16-byte stores), fp8 -> half (exact) -> fp32.
#include "ops/cuda/fp8.h"

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "ops/cuda/fp8_cast.cuh"
#include "ops/cuda/kernel_common.cuh"

namespace tb::ops {
namespace {
using detail::str;
using detail::abs_or_nan;
using detail::record_block_amax;
using detail::to_fp8;
using detail::unpack8;
constexpr int kThreads = detail::kCastThreads;

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
__global__ void __launch_bounds__(kThreads) cast_kernel(const __nv_bfloat16* __restrict__ x, detail::CastTarget p) {
  const float s = detail::cast_scale(p);
  const detail::Rounding rnd = detail::cast_rounding(p, s);
  const std::size_t n = std::size_t(p.rows) * std::size_t(p.cols), nv = n / 8;
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  float m = 0.0f;
  bool nan = false;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < nv; i += stride) {
    float f[8];
    unpack8(__ldg(reinterpret_cast<const uint4*>(x) + i), f);
    reinterpret_cast<uint2*>(p.q)[i] = detail::cast8<Kind>(f, s, m, nan, rnd, i * 8);
  }
  for (std::size_t i = nv * 8 + std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float f = __bfloat162float(x[i]);
    m = fmaxf(m, abs_or_nan(f, nan));
    p.q[i] = rnd.to<Kind>(f * s, i);
  }
  if (p.amax_out) record_block_amax(m, nan, p.amax_out);
}

template <__nv_fp8_interpretation_t Kind>
__global__ void __launch_bounds__(kThreads) dequant_kernel(Fp8DequantArgs a) {
  const float s = *a.scale_inv;
  const std::int64_t per_row = a.cols / 8, nv = a.rows * per_row;
  const auto* q = static_cast<const std::uint8_t*>(a.q);
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < nv;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / per_row, c = (i % per_row) * 8;
    union {
      uint2 v;
      __nv_fp8x2_storage_t p[4];
    } in;
    in.v = __ldg(reinterpret_cast<const uint2*>(q + r * a.ld_q + c));
    float f[8];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 h = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(in.p[k], Kind)));
      f[2 * k] = h.x * s, f[2 * k + 1] = h.y * s;
    }
    detail::store8(a.y + r * a.ld_y + c, detail::pack8(f));
  }
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
  const detail::CastTarget p = detail::cast_target(a);
  const bool e4 = a.type == DType::e4m3;
  if (a.qt) {
    detail::launch_cast_transpose(detail::Bf16Source{a.x, a.cols}, p, e4,
                                  reinterpret_cast<std::uintptr_t>(a.x) % 16 == 0, what, stream);
    return;
  }
  TB_REQUIRE(reinterpret_cast<std::uintptr_t>(a.x) % 16 == 0 && reinterpret_cast<std::uintptr_t>(a.q) % 8 == 0,
             what + ": x must be 16-byte and q 8-byte aligned");
  const std::size_t n = std::size_t(a.rows) * std::size_t(a.cols);
  if (e4)
    cast_kernel<__NV_E4M3><<<grid_for(n / 8 + 1, kThreads), kThreads, 0, stream>>>(a.x, p);
  else
    cast_kernel<__NV_E5M2><<<grid_for(n / 8 + 1, kThreads), kThreads, 0, stream>>>(a.x, p);
  TB_CHECK_LAUNCH();
}

void fp8_dequantize(const Fp8DequantArgs& a, cudaStream_t stream) {
  const std::string what = str("fp8_dequantize(", dtype_name(a.type), " [", a.rows, ", ", a.cols, "])");
  TB_REQUIRE(is_fp8(a.type), what + ": the type must be e4m3 or e5m2");
  TB_REQUIRE(a.q && a.y && a.scale_inv, what + ": needs q, y and scale_inv");
  TB_REQUIRE(a.rows >= 1 && a.cols >= 1 && a.cols % 8 == 0 && a.ld_q >= a.cols && a.ld_q % 8 == 0 &&
                 a.ld_y >= a.cols && a.ld_y % 8 == 0,
             str(what, ": cols and the row strides (", a.ld_q, ", ", a.ld_y, ") must be multiples of 8, strides >= "
                       "cols"));
  TB_REQUIRE(reinterpret_cast<std::uintptr_t>(a.q) % 8 == 0 && reinterpret_cast<std::uintptr_t>(a.y) % 16 == 0,
             what + ": q must be 8-byte and y 16-byte aligned");
  const std::size_t nv = std::size_t(a.rows) * std::size_t(a.cols / 8);
  if (a.type == DType::e4m3)
    dequant_kernel<__NV_E4M3><<<grid_for(nv, kThreads), kThreads, 0, stream>>>(a);
  else
    dequant_kernel<__NV_E5M2><<<grid_for(nv, kThreads), kThreads, 0, stream>>>(a);
  TB_CHECK_LAUNCH();
}

void fp8_update_scales(const Fp8Scales& scales, DType type, AmaxAlgo algo, int margin, cudaStream_t stream) {
  update_kernel<<<grid_for(std::size_t(scales.tensors()), 128), 128, 0, stream>>>(
      scales.base(), scales.slot_stride(), scales.tensors(), scales.history_len(), fp8_max(type),
      algo == AmaxAlgo::max ? 0 : 1, margin);
  TB_CHECK_LAUNCH();
}

}  // namespace tb::ops
