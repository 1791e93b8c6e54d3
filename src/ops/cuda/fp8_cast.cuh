// ops/cuda/fp8_cast.cuh: the FP8 cast + transpose kernels of ops/cuda/fp8.h over any source of values (include from
// .cu only). A source maps an element (row, col) of a [rows, cols] matrix to a float:
//   src.at(r, c)              one value (32 x 32 tiles: any shape)
// and, for the vector kernel (rows multiples of 32, cols of 64), 8 values at a time in two steps, so that a thread can
// hold the raw reads of several rows (few registers) while they are in flight and compute their values afterwards:
//   src.fetch(r, c)           a Src::Raw: the reads of values (r, c + k), k < 8; c a multiple of 8
//   src.values(raw, c, f)     f[k] = value (r, c + k) from raw = src.fetch(r, c)
// A source whose columns come in two halves computed from the same reads (SwiGLU's backward: dg and du from one read of
// gate, up and dy) declares kHalves = 2 and gives both from one fetch, the vector kernel's blocks then covering the
// same columns of each half:
//   src.half()                      the column offset of the second half (cols / 2)
//   src.values2(raw, c, f, g)       f = values (r, c + k), g = values (r, half + c + k), c < half
// Bf16Source reads a bf16 matrix (fp8_cast); the LM head's FP8 backward reads softmax - onehot computed on the fly
// from its logits (ops/cuda/cross_entropy.cu); NormSource recomputes a norm's output from its input and statistics
// (ops/cuda/norm_fp8.cu). Per element: q = fp8(v * scale) (round to nearest even, saturating; or stochastically, below),
// written to q[r, c] (if q) and qt[c, r]; scale = fp8_max / *amax_in / 2^margin (current scaling, written to *scale)
// or *scale (delayed), *scale_inv = 1 / scale; amax_out (if set) = max(*amax_out, max |v|), NaN propagating.
// OutMax / record_block_amax also give the bf16 kernels (activations, norms) their fused amax.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <string>

#include "core/error.h"
#include "ops/cuda/fp8.h"
#include "ops/cuda/kernel_common.cuh"

namespace tb::ops::detail {

inline constexpr int kCastThreads = 256;
inline constexpr int kCastTile = 32, kCastRowsPerPass = 8;  // kCastTile x kCastRowsPerPass = kCastThreads

struct Bf16Source {
  const __nv_bfloat16* x;
  std::int64_t cols;
  __device__ __forceinline__ float at(std::int64_t r, std::int64_t c) const { return __bfloat162float(x[r * cols + c]); }
  using Raw = uint4;
  __device__ __forceinline__ Raw fetch(std::int64_t r, std::int64_t c) const {
    return __ldg(reinterpret_cast<const uint4*>(x + r * cols + c));
  }
  __device__ __forceinline__ void values(Raw raw, std::int64_t, float (&f)[8]) const { unpack8(raw, f); }
};

struct CastTarget {
  std::int64_t rows, cols;
  std::uint8_t* q;  // [rows, cols] or null
  std::uint8_t* qt;  // [cols, rows]
  const float* amax_in;
  float* scale;
  float* scale_inv;
  float* amax_out;
  float max_finite;
  int margin;
  bool stochastic = false;  // stochastic rounding (Fp8CastArgs::stochastic)
};

// The kernels' view of a cast's arguments (unchecked).
inline CastTarget cast_target(const Fp8CastArgs& a) {
  return {a.rows, a.cols, static_cast<std::uint8_t*>(a.q), static_cast<std::uint8_t*>(a.qt), a.amax_in,
          a.scale, a.scale_inv, a.amax_out, fp8_max(a.type), a.margin, a.stochastic};
}

// The target of an op that writes its own output [rows, cols] as FP8 (norm_forward_fp8, activation_forward_fp8: delayed
// scaling). Checks that `cast` describes that output (x null), has an fp8 type, qt, scale and scale_inv, a known scale
// (no amax_in) and a margin in [0, 64); raises Error{config} naming `what` before the caller launches anything.
inline CastTarget fused_cast_target(const Fp8CastArgs& cast, std::int64_t rows, std::int64_t cols,
                                    const std::string& what) {
  TB_REQUIRE(cast.x == nullptr && cast.rows == rows && cast.cols == cols,
             str(what, ": cast must describe the output [", rows, ", ", cols, "] with x = null, got [", cast.rows, ", ",
                 cast.cols, "]"));
  TB_REQUIRE(cast.amax_in == nullptr,
             what +
                 ": cast.amax_in (current scaling) is refused: the scale must be known before the pass (delayed "
                 "scaling, *cast.scale); for current scaling run the bf16 op with amax, then fp8_cast");
  TB_REQUIRE(is_fp8(cast.type) && cast.qt && cast.scale && cast.scale_inv,
             what + ": needs an fp8 type, qt, scale and scale_inv");
  TB_REQUIRE(cast.margin >= 0 && cast.margin < 64, what + ": margin must be in [0, 64)");
  TB_REQUIRE(ceil_div(rows, kCastTile) < 65536, str(what, ": at most ", 65535 * kCastTile, " rows"));
  return cast_target(cast);
}

__device__ __forceinline__ void atomic_max_nonneg(float* p, float v) {
  atomicMax(reinterpret_cast<int*>(p), __float_as_int(v));
}

// Called by every thread of a block of at most 1024 threads, a multiple of 32 (any shape): *amax =
// max(*amax, the block's largest m), or NaN when a thread saw one (fmaxf drops NaN, so it is carried as a flag).
__device__ __forceinline__ void record_block_amax(float m, bool nan, float* amax) {
  __shared__ float warp_max[32];  // one per warp of the largest block
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  const int any_nan = __syncthreads_or(nan);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(~0u, m, o));
  if (t % 32 == 0) warp_max[t / 32] = m;
  __syncthreads();
  if (t == 0) {
    float bm = 0.0f;
    for (int w = 0; w < int(blockDim.x * blockDim.y) / 32; ++w) bm = fmaxf(bm, warp_max[w]);
    atomic_max_nonneg(amax, any_nan ? __int_as_float(0x7fc00000) : bm);
  }
}

__device__ __forceinline__ float abs_or_nan(float x, bool& nan) {
  nan = nan || isnan(x);
  return fabsf(x);
}

// The largest |value| of the bf16 outputs a thread wrote (as rounded), NaN carried as a flag; one atomic per block
// (the fused amax of the activations and norms).
struct OutMax {
  float m = 0.f;
  bool nan = false;
  __device__ __forceinline__ void add(uint4 packed) {
    float f[8];
    unpack8(packed, f);
#pragma unroll
    for (int k = 0; k < 8; ++k) m = fmaxf(m, abs_or_nan(f[k], nan));
  }
  __device__ __forceinline__ void record(float* amax) const {  // every thread of the block; amax uniform
    if (amax) record_block_amax(m, nan, amax);
  }
};

template <__nv_fp8_interpretation_t Kind>
__device__ __forceinline__ std::uint8_t to_fp8(float v) {
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, Kind);
}

// A 32-bit integer hash (bijective, well mixed: xorshift-multiply, Wellons' "lowbias32" constants).
__host__ __device__ __forceinline__ std::uint32_t hash32(std::uint32_t x) {
  x ^= x >> 16, x *= 0x7feb352du, x ^= x >> 15, x *= 0x846ca68bu, x ^= x >> 16;
  return x;
}

// Stochastic rounding to FP8: with lo <= |u| < lo + d the two neighbouring FP8 magnitudes (d: the spacing of u's
// binade, or of the subnormals below the smallest normal), |u| rounds to lo + d with probability (|u| - lo) / d, so
// E[result] = u. bits: 32 uniform random bits (24 used). Every step is exact in fp32 (scaling by powers of two,
// floor), so the result is an FP8 value and the final conversion only saturates; NaN and inf go as nearest rounding.
template <__nv_fp8_interpretation_t Kind>
__device__ __forceinline__ std::uint8_t to_fp8_stochastic(float u, std::uint32_t bits) {
  constexpr int kMant = Kind == __NV_E4M3 ? 3 : 2, kEmin = Kind == __NV_E4M3 ? -6 : -14;
  if (!isfinite(u)) return to_fp8<Kind>(u);
  const float a = fabsf(u);
  const int e = max(int((__float_as_uint(a) >> 23) & 0xff) - 127, kEmin);  // the binade (subnormals: kEmin's spacing)
  const float steps = a * __uint_as_float(std::uint32_t(127 + kMant - e) << 23);  // a / d, d = 2^(e - kMant)
  const float lo = floorf(steps);
  const float up = float(bits >> 8) * 0x1p-24f < steps - lo ? 1.0f : 0.0f;
  return to_fp8<Kind>(copysignf((lo + up) * __uint_as_float(std::uint32_t(127 - kMant + e) << 23), u));
}

// One cast's rounding: nearest even, or stochastic (CastTarget::stochastic) with draws hashed from the element's index
// r * cols + c and a seed from the scale's bits (the same inputs give the same codes; q and qt the same code).
struct Rounding {
  bool stochastic;
  std::uint32_t seed;
  template <__nv_fp8_interpretation_t Kind>
  __device__ __forceinline__ std::uint8_t to(float u, std::uint64_t index) const {
    return stochastic ? to_fp8_stochastic<Kind>(u, hash32(std::uint32_t(index) ^ seed ^ std::uint32_t(index >> 32)))
                      : to_fp8<Kind>(u);
  }
};
__device__ __forceinline__ Rounding cast_rounding(const CastTarget& p, float s) {
  return {p.stochastic, p.stochastic ? hash32(__float_as_uint(s)) : 0u};
}

// Eight values times s to FP8 (one 8-byte store), their largest |value| into m (NaN carried as the flag): what every
// cast kernel does per vector. index: the first value's element index (stochastic rounding's draws).
template <__nv_fp8_interpretation_t Kind>
__device__ __forceinline__ uint2 cast8(const float (&f)[8], float s, float& m, bool& nan, Rounding rnd = {false, 0},
                                       std::uint64_t index = 0) {
  union {
    uint2 v;
    std::uint8_t b[8];
  } out;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    m = fmaxf(m, abs_or_nan(f[k], nan));
    out.b[k] = rnd.to<Kind>(f[k] * s, index + k);
  }
  return out.v;
}

// The scale every block uses; block (0, 0)'s first thread writes it back.
__device__ __forceinline__ float cast_scale(const CastTarget& p) {
  const float s = p.amax_in ? fp8_scale_for(*p.amax_in, p.max_finite, p.margin) : *p.scale;
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0) {
    if (p.amax_in) *p.scale = s;
    *p.scale_inv = 1.0f / s;
  }
  return s;
}

// One 32 x 32 tile per block of 32 x 8 threads; edges masked.
template <__nv_fp8_interpretation_t Kind, class Src>
__global__ void __launch_bounds__(kCastTile* kCastRowsPerPass) cast_transpose32_kernel(Src src, CastTarget p) {
  __shared__ std::uint8_t tile[kCastTile][kCastTile + 4];
  const float s = cast_scale(p);
  const Rounding rnd = cast_rounding(p, s);
  const std::int64_t r0 = std::int64_t(blockIdx.y) * kCastTile, c0 = std::int64_t(blockIdx.x) * kCastTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  float m = 0.0f;
  bool nan = false;
  for (int r = ty; r < kCastTile; r += kCastRowsPerPass) {
    const std::int64_t row = r0 + r, col = c0 + tx;
    std::uint8_t b = 0;
    if (row < p.rows && col < p.cols) {
      const float f = src.at(row, col);
      m = fmaxf(m, abs_or_nan(f, nan));
      b = rnd.to<Kind>(f * s, std::uint64_t(row * p.cols + col));
      if (p.q) p.q[row * p.cols + col] = b;
    }
    tile[r][tx] = b;
  }
  __syncthreads();
  for (int r = ty; r < kCastTile; r += kCastRowsPerPass) {  // qt[c0 + r][r0 + tx] = q[r0 + tx][c0 + r]
    const std::int64_t qrow = c0 + r, qcol = r0 + tx;
    if (qrow < p.cols && qcol < p.rows) p.qt[qrow * p.rows + qcol] = tile[tx][r];
  }
  if (p.amax_out) record_block_amax(m, nan, p.amax_out);
}

template <class Src>
__host__ __device__ constexpr int source_halves() {
  if constexpr (requires { Src::kHalves; })
    return Src::kHalves;
  else
    return 1;
}

// The vector kernel: each thread casts an 8 x 8 block of the source (of each half, with two halves): 8 rows of 8
// values, all fetched before any code is written and held raw (8 loads of 16 bytes in flight per thread for a bf16
// matrix; two halves: 4 rows at a time), then writes q as 8 row vectors and qt as the block's 8 columns, transposed in
// registers (8-byte stores; no shared memory, no barrier but the amax's). A warp covers kCastWarpRows x kCastWarpCols
// (lanes: 4 row groups x 8 column groups: each load reads 4 rows of 128 bytes of a bf16 matrix, each qt store writes
// 8 runs of 32 bytes); warp w of all runs warp tile w, row-major over rows / 32 x (cols / halves) / 64 tiles; warps
// past the last tile only join the amax. Measured (bench/lab/cast_lab, H200): 3.3-3.7 TB/s of a bf16 matrix's 4
// bytes per element, against 2.8-3.3 for 64 x 64 tiles staged through shared memory (whose transposed reads gathered
// bytes with bank conflicts).
inline constexpr int kCastWarpRows = 32, kCastWarpCols = 64;
template <__nv_fp8_interpretation_t Kind, class Src>
__global__ void __launch_bounds__(kCastThreads) cast_transpose_blocks_kernel(Src src, CastTarget p,
                                                                               std::int64_t tile_cols) {
  constexpr int H = source_halves<Src>();
  std::int64_t half = 0;  // column offset of half h: h * half
  if constexpr (H == 2) half = src.half();
  const float s = cast_scale(p);
  const Rounding rnd = cast_rounding(p, s);
  const int lane = threadIdx.x % 32;
  const std::int64_t w = std::int64_t(blockIdx.x) * (kCastThreads / 32) + threadIdx.x / 32;
  const std::int64_t tiles_c = tile_cols / kCastWarpCols;
  float m = 0.0f;
  bool nan = false;
  if (w < p.rows / kCastWarpRows * tiles_c) {
    const std::int64_t r0 = w / tiles_c * kCastWarpRows + lane % 4 * 8, c0 = w % tiles_c * kCastWarpCols + lane / 4 * 8;
    union Bytes8 {
      uint2 v;
      std::uint8_t b[8];
    } rows[H][8];
    constexpr int kRowsInFlight = 8 / H;  // rows read before any of their codes is written (two halves: 4 at a time)
#pragma unroll
    for (int g = 0; g < 8; g += kRowsInFlight) {
      typename Src::Raw raw[kRowsInFlight];
#pragma unroll
      for (int k = 0; k < kRowsInFlight; ++k) raw[k] = src.fetch(r0 + g + k, c0);  // no store between the reads
#pragma unroll
      for (int k = 0; k < kRowsInFlight; ++k) {
        const std::int64_t r = r0 + g + k;
        float f[H][8];
        if constexpr (H == 2)
          src.values2(raw[k], c0, f[0], f[1]);
        else
          src.values(raw[k], c0, f[0]);
#pragma unroll
        for (int h = 0; h < H; ++h) {
          const std::int64_t c = h * half + c0;
          rows[h][g + k].v = cast8<Kind>(f[h], s, m, nan, rnd, std::uint64_t(r * p.cols + c));
          if (p.q) *reinterpret_cast<uint2*>(p.q + r * p.cols + c) = rows[h][g + k].v;
        }
      }
    }
#pragma unroll
    for (int h = 0; h < H; ++h) {
      const std::int64_t c = h * half + c0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {  // column j of the block: qt[c + j][r0 .. r0 + 8)
        Bytes8 col;
#pragma unroll
        for (int k = 0; k < 8; ++k) col.b[k] = rows[h][k].b[j];
        *reinterpret_cast<uint2*>(p.qt + (c + j) * p.rows + r0) = col.v;
      }
    }
  }
  if (p.amax_out) record_block_amax(m, nan, p.amax_out);
}

// Launches the cast + transpose of src into p.qt (and p.q): the vector kernel when `vector_ok` (the source's 8-value
// loads aligned), rows a multiple of 32 and cols / halves of 64, q and qt 8-byte aligned; else 32 x 32 tiles (src.at:
// each half on its own). `what` names the caller in errors.
template <class Src>
void launch_cast_transpose(const Src& src, const CastTarget& p, bool e4m3, bool vector_ok, const std::string& what,
                           cudaStream_t stream) {
  constexpr int H = source_halves<Src>();
  const std::int64_t tile_cols = p.cols / H;  // the columns the warp tiles cover (each: a block of each half)
  if constexpr (H == 2) TB_REQUIRE(src.half() * 2 == p.cols, what + ": the source's halves must split the columns");
  const bool vector = vector_ok && p.rows % kCastWarpRows == 0 && tile_cols % kCastWarpCols == 0 &&
                      reinterpret_cast<std::uintptr_t>(p.q) % 8 == 0 && reinterpret_cast<std::uintptr_t>(p.qt) % 8 == 0;
  if (vector) {
    const std::int64_t warps = p.rows / kCastWarpRows * (tile_cols / kCastWarpCols);
    const std::int64_t blocks = ceil_div(warps, std::int64_t(kCastThreads / 32));
    TB_REQUIRE(blocks < (std::int64_t(1) << 31), what + ": too many elements for one launch");
    if (e4m3)
      cast_transpose_blocks_kernel<__NV_E4M3><<<unsigned(blocks), kCastThreads, 0, stream>>>(src, p, tile_cols);
    else
      cast_transpose_blocks_kernel<__NV_E5M2><<<unsigned(blocks), kCastThreads, 0, stream>>>(src, p, tile_cols);
  } else {
    const dim3 grid(unsigned((p.cols + kCastTile - 1) / kCastTile), unsigned((p.rows + kCastTile - 1) / kCastTile));
    TB_REQUIRE(grid.y < 65536, what + ": too many rows for one launch");
    const dim3 block(kCastTile, kCastRowsPerPass);
    if (e4m3)
      cast_transpose32_kernel<__NV_E4M3><<<grid, block, 0, stream>>>(src, p);
    else
      cast_transpose32_kernel<__NV_E5M2><<<grid, block, 0, stream>>>(src, p);
  }
  TB_CHECK_LAUNCH();
}

}  // namespace tb::ops::detail
