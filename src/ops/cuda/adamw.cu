// ops/cuda/adamw.cu: see adamw.h. Three kernels over the group's chunk table (one block per chunk): the gradient
// norm partials, a one-block finaliser (norm, clip scale), and the AdamW update (moments, master, bf16 model copy);
// a tensor with FP8 copies is updated instead by adamw_fp8_copy_kernel (or, in shapes it does not take, by the FP8
// cast kernels reading it through AdamWSource).
#include "ops/cuda/adamw.h"

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "ops/cuda/fp8_cast.cuh"
#include "ops/cuda/kernel_common.cuh"
#include "ops/cuda/master_split.h"

namespace tb::ops {
namespace {
using detail::str;

constexpr int kThreads = 256;          // per chunk block (kAdamWChunk / (4 * kThreads) = 32 iterations)
constexpr int kFinalThreads = 1024;    // the one-block finaliser


// Kernel-side records, built on the host at AdamWGroup construction.
struct TensorRec {
  float* p;
  const void* g;     // fp32 or bf16 (the group's gradient type)
  void* m;
  void* v;
  __nv_bfloat16* w;  // null: no bf16 copy
  std::int16_t* lo;  // split master (master_split.h): the master is (w, lo), p is null
  std::int64_t n;
  int phase;    // element i of every pointer is vector-aligned when (phase + i) % 4 == 0; -1: pointers disagree
  int phase_g;  // the same for the gradient alone (the norm reads only it)
  int decay;    // 1: weight decay applies
  int pad;
};

struct ChunkRec {
  std::int32_t tensor;
  std::int32_t pad;
  std::int64_t begin, end;  // element range within the tensor
};

// fp32: 16-byte vectors (4 elements); bf16: 8-byte vectors (4 elements).
int vec_phase(const void* ptr, std::size_t elem_bytes) {
  return int((reinterpret_cast<std::uintptr_t>(ptr) / elem_bytes) % 4);
}

__device__ __forceinline__ float bf16_lo(unsigned u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf16_hi(unsigned u) { return __uint_as_float(u & 0xffff0000u); }
__device__ __forceinline__ unsigned pack2(float a, float b) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);  // a in the low half
  unsigned u;
  memcpy(&u, &h, sizeof(u));
  return u;
}

__device__ __forceinline__ float load1(const float* p) { return *p; }
__device__ __forceinline__ float load1(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void store1(float* p, float x) { *p = x; }
__device__ __forceinline__ void store1(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }

__device__ __forceinline__ void load4(const float* p, float (&f)[4]) {
  const float4 v = *reinterpret_cast<const float4*>(p);
  f[0] = v.x, f[1] = v.y, f[2] = v.z, f[3] = v.w;
}
__device__ __forceinline__ void load4(const __nv_bfloat16* p, float (&f)[4]) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  f[0] = bf16_lo(u.x), f[1] = bf16_hi(u.x), f[2] = bf16_lo(u.y), f[3] = bf16_hi(u.y);
}
__device__ __forceinline__ void store4(float* p, const float (&f)[4]) {
  *reinterpret_cast<float4*>(p) = make_float4(f[0], f[1], f[2], f[3]);
}
__device__ __forceinline__ void store4(__nv_bfloat16* p, const float (&f)[4]) {
  *reinterpret_cast<uint2*>(p) = make_uint2(pack2(f[0], f[1]), pack2(f[2], f[3]));
}

template <int kN>
__device__ __forceinline__ double block_sum(double s) {
  __shared__ double warp_sum[kN / 32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(~0u, s, o);
  if (threadIdx.x % 32 == 0) warp_sum[threadIdx.x / 32] = s;
  __syncthreads();
  s = threadIdx.x < kN / 32 ? warp_sum[threadIdx.x] : 0.0;
  if (threadIdx.x < 32) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(~0u, s, o);
  }
  return s;  // valid in thread 0
}

// partials[chunk] = sum of g^2 over the chunk, in double; G: the gradients' type.
template <class G>
__global__ void __launch_bounds__(kThreads)
    norm_partials_kernel(const TensorRec* __restrict__ tensors, const ChunkRec* __restrict__ chunks,
                         double* __restrict__ partials) {
  const ChunkRec ch = chunks[blockIdx.x];
  const G* g = static_cast<const G*>(tensors[ch.tensor].g);
  const int phase = tensors[ch.tensor].phase_g;
  const std::int64_t b = ch.begin, e = ch.end;
  const std::int64_t i0 = min(e, b + (4 - (phase + b) % 4) % 4);
  const std::int64_t nv = (e - i0) / 4, i1 = i0 + 4 * nv;
  double s = 0;
  for (std::int64_t i = b + threadIdx.x; i < i0; i += kThreads) s += double(load1(g + i)) * double(load1(g + i));
  for (std::int64_t i = i1 + threadIdx.x; i < e; i += kThreads) s += double(load1(g + i)) * double(load1(g + i));
  for (std::int64_t j = threadIdx.x; j < nv; j += kThreads) {
    float f[4];
    load4(g + i0 + 4 * j, f);
#pragma unroll
    for (int k = 0; k < 4; ++k) s += double(f[k]) * double(f[k]);
  }
  s = block_sum<kThreads>(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__device__ __forceinline__ void set_norm(GradNormResult* r, double norm_sq, float max_norm) {
  const double norm = sqrt(norm_sq);
  r->norm_sq = norm_sq;
  r->norm = float(norm);
  r->clip_scale = isfinite(norm) && norm > double(max_norm) ? float(double(max_norm) / (norm + 1e-6)) : 1.0f;
}

__global__ void __launch_bounds__(kFinalThreads)
    norm_final_kernel(const double* __restrict__ partials, std::int64_t n, float max_norm, GradNormResult* out) {
  double s = 0;
  for (std::int64_t i = threadIdx.x; i < n; i += kFinalThreads) s += partials[i];
  s = block_sum<kFinalThreads>(s);
  if (threadIdx.x == 0) set_norm(out, s, max_norm);
}

__global__ void clip_kernel(GradNormResult* r, float max_norm) { set_norm(r, r->norm_sq, max_norm); }

struct HostConsts {  // from AdamWConfig, rounded once
  double beta1, beta2, weight_decay;
  float b1, one_minus_b1, b2, one_minus_b2, eps;
};

struct StepConsts {  // from the device scalars: per block (update kernel) or once per step (FP8 copies)
  float clip, b1, omb1, b2, omb2, eps, lr_wd, step_size, inv_sqrt_bc2;
  bool valid;
};

__device__ __forceinline__ StepConsts make_step_consts(const AdamWStepScalars* scalars, const GradNormResult* clip,
                                                       const HostConsts& hc, bool decay) {
  StepConsts sc;
  const float lr = scalars->lr;
  const std::int64_t step = scalars->step;
  const double bc1 = 1.0 - pow(hc.beta1, double(step));
  const double bc2 = 1.0 - pow(hc.beta2, double(step));
  sc.valid = step >= 1;
  sc.clip = clip ? clip->clip_scale : 1.0f;
  sc.b1 = hc.b1, sc.omb1 = hc.one_minus_b1, sc.b2 = hc.b2, sc.omb2 = hc.one_minus_b2, sc.eps = hc.eps;
  sc.lr_wd = decay ? float(double(lr) * hc.weight_decay) : 0.0f;
  sc.step_size = float(double(lr) / bc1);
  sc.inv_sqrt_bc2 = float(1.0 / sqrt(bc2));
  return sc;
}

__device__ __forceinline__ void update(float& p, float g, float& m, float& v, const StepConsts& c) {
  g *= c.clip;
  m = fmaf(c.b1, m, c.omb1 * g);
  v = fmaf(c.b2, v, c.omb2 * g * g);
  const float denom = sqrtf(v) * c.inv_sqrt_bc2 + c.eps;
  p -= fmaf(c.lr_wd, p, c.step_size * (m / denom));  // the decay uses p before this step
}

__device__ __forceinline__ float rounded_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// Element i of t updated; returns the model weight as written (bf16, widened; the master without a model copy).
// M: the moments' type, G: the gradients' (float or bf16).
template <class M, class G>
__device__ __forceinline__ float update1(const TensorRec& t, std::int64_t i, const StepConsts& c) {
  M* m = static_cast<M*>(t.m);
  M* v = static_cast<M*>(t.v);
  auto* wbits = reinterpret_cast<std::uint16_t*>(t.w);
  float pi = t.lo ? join_master(wbits[i], t.lo[i]) : t.p ? t.p[i] : __uint_as_float(std::uint32_t(wbits[i]) << 16);
  float mi = load1(m + i), vi = load1(v + i);
  update(pi, load1(static_cast<const G*>(t.g) + i), mi, vi, c);
  float model = pi;
  if (t.lo) {
    const MasterHalves h = split_master(pi);
    wbits[i] = h.hi, t.lo[i] = h.lo;
    model = __uint_as_float(std::uint32_t(h.hi) << 16);
  } else if (!t.p) {  // no master: the bf16 weight itself, rounded to nearest even
    t.w[i] = __float2bfloat16_rn(pi), model = rounded_bf16(pi);
  } else {
    t.p[i] = pi;
    if (t.w) t.w[i] = __float2bfloat16_rn(pi), model = rounded_bf16(pi);
  }
  store1(m + i, mi);
  store1(v + i, vi);
  return model;
}

// Elements i..i+3 (every pointer vector-aligned there) updated; model[k] as update1 returns them.
template <class M, class G>
__device__ __forceinline__ void update4(const TensorRec& t, std::int64_t i, const StepConsts& c, float* model) {
  M* m = static_cast<M*>(t.m);
  M* v = static_cast<M*>(t.v);
  auto* wbits = reinterpret_cast<std::uint16_t*>(t.w);
  float pf[4], gf[4], mf[4], vf[4];
  union Pack4 {
    uint2 u;
    std::uint16_t h[4];
    std::int16_t s[4];
  } hi, lo4;
  if (t.lo) {
    hi.u = *reinterpret_cast<const uint2*>(wbits + i);
    lo4.u = *reinterpret_cast<const uint2*>(t.lo + i);
#pragma unroll
    for (int k = 0; k < 4; ++k) pf[k] = join_master(hi.h[k], lo4.s[k]);
  } else if (!t.p) {
    load4(t.w + i, pf);
  } else {
    load4(t.p + i, pf);
  }
  load4(static_cast<const G*>(t.g) + i, gf);
  load4(m + i, mf);
  load4(v + i, vf);
#pragma unroll
  for (int k = 0; k < 4; ++k) update(pf[k], gf[k], mf[k], vf[k], c);
  if (t.lo) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const MasterHalves h = split_master(pf[k]);
      hi.h[k] = h.hi, lo4.s[k] = h.lo;
      model[k] = __uint_as_float(std::uint32_t(h.hi) << 16);
    }
    *reinterpret_cast<uint2*>(wbits + i) = hi.u;
    *reinterpret_cast<uint2*>(t.lo + i) = lo4.u;
  } else if (!t.p) {
#pragma unroll
    for (int k = 0; k < 4; ++k) model[k] = rounded_bf16(pf[k]);
    store4(t.w + i, pf);
  } else {
    store4(t.p + i, pf);
#pragma unroll
    for (int k = 0; k < 4; ++k) model[k] = t.w ? rounded_bf16(pf[k]) : pf[k];
    if (t.w) store4(t.w + i, pf);
  }
  store4(m + i, mf);
  store4(v + i, vf);
}

template <class M, class G>
__global__ void __launch_bounds__(kThreads)
    adamw_kernel(const TensorRec* __restrict__ tensors, const ChunkRec* __restrict__ chunks,
                 const AdamWStepScalars* __restrict__ scalars, const GradNormResult* __restrict__ clip, HostConsts hc) {
  __shared__ StepConsts sc;
  const ChunkRec ch = chunks[blockIdx.x];
  const TensorRec t = tensors[ch.tensor];
  if (threadIdx.x == 0) sc = make_step_consts(scalars, clip, hc, t.decay);
  __syncthreads();
  const StepConsts c = sc;
  if (!c.valid) return;
  const std::int64_t b = ch.begin, e = ch.end;
  if (t.phase < 0) {  // pointers of different alignment phases: scalar accesses
    for (std::int64_t i = b + threadIdx.x; i < e; i += kThreads) update1<M, G>(t, i, c);
    return;
  }
  const std::int64_t i0 = min(e, b + (4 - (t.phase + b) % 4) % 4);
  const std::int64_t nv = (e - i0) / 4, i1 = i0 + 4 * nv;
  for (std::int64_t i = b + threadIdx.x; i < i0; i += kThreads) update1<M, G>(t, i, c);
  for (std::int64_t i = i1 + threadIdx.x; i < e; i += kThreads) update1<M, G>(t, i, c);
  float unused[4];
  for (std::int64_t j = threadIdx.x; j < nv; j += kThreads) update4<M, G>(t, i0 + 4 * j, c, unused);
}

__global__ void step_consts_kernel(const AdamWStepScalars* scalars, const GradNormResult* clip, HostConsts hc,
                                   StepConsts* out) {
  out[threadIdx.x] = make_step_consts(scalars, clip, hc, threadIdx.x == 1);
}

// A tensor with FP8 copies, [rows, cols] with rows % kCopyRows == 0, cols % kCopyCols == 0 and vector-aligned
// pointers: one kCopyRows x kCopyCols tile per block of kThreads. Pass k: warp w updates row k * 8 + w of the tile,
// 4 consecutive elements per lane (update4: each access of a warp one contiguous run, as in adamw_kernel), writes
// their codes to q (4 bytes per lane) and to the tile in shared memory; then each qt row (a column of the tile) gets
// its kCopyRows codes from two lanes, 16 bytes each. The codes, scale_inv and amax as the cast kernels make them.
constexpr int kCopyRows = 32, kCopyCols = 128;
static_assert(kCopyCols == 4 * 32 && kThreads == 8 * 32 && kCopyRows % 8 == 0 && 2 * kCopyCols == kThreads);

// 5 blocks per SM (at most 51 registers instead of 61-63): bench/lab/adamw_lab over 1745 M weights on an H200, fp32
// moments 13.11 ms (13.27 at 4 blocks), bf16 moments 11.61 (12.24); plain AdamW 12.06 / 8.86.
template <__nv_fp8_interpretation_t Kind, class M, class G>
__global__ void __launch_bounds__(kThreads, 5)
    adamw_fp8_copy_kernel(TensorRec t, const StepConsts* __restrict__ consts, detail::CastTarget p) {
  __shared__ __align__(16) std::uint8_t tile[kCopyRows][kCopyCols + 4];
  const float s = detail::cast_scale(p);
  const detail::Rounding rnd = detail::cast_rounding(p, s);
  const StepConsts c = consts[t.decay];
  const std::int64_t r0 = std::int64_t(blockIdx.y) * kCopyRows, c0 = std::int64_t(blockIdx.x) * kCopyCols;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float m = 0.0f;
  bool nan = false;
  for (int r = warp; r < kCopyRows; r += 8) {
    const std::int64_t i = (r0 + r) * p.cols + c0 + 4 * lane;
    float f[4];
    if (c.valid)
      update4<M, G>(t, i, c, f);
    else
      load4(t.w + i, f);
    union {
      std::uint32_t u;
      std::uint8_t b[4];
    } q;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      m = fmaxf(m, detail::abs_or_nan(f[k], nan));
      q.b[k] = rnd.to<Kind>(f[k] * s, std::uint64_t(i + k));
    }
    if (p.q) *reinterpret_cast<std::uint32_t*>(p.q + i) = q.u;
    *reinterpret_cast<std::uint32_t*>(&tile[r][4 * lane]) = q.u;
  }
  __syncthreads();
  const int col = threadIdx.x / 2, half = threadIdx.x % 2;  // qt row c0 + col, tile rows 16 half .. 16 half + 15
  union {
    uint4 v;
    std::uint8_t b[16];
  } out;
#pragma unroll
  for (int k = 0; k < 16; ++k) out.b[k] = tile[16 * half + k][col];
  *reinterpret_cast<uint4*>(p.qt + (c0 + col) * p.rows + r0 + 16 * half) = out.v;
  if (p.amax_out) detail::record_block_amax(m, nan, p.amax_out);
}

// The FP8 cast kernels' source (ops/cuda/fp8_cast.cuh) for a tensor with FP8 copies of other shapes: each element
// it reads is updated, once (every tile kernel reads each element once), and the value cast is the model weight as
// written. A step < 1 updates nothing: the copies are then those of the weights as they are.
template <class M, class G>
struct AdamWSource {
  TensorRec t;
  const StepConsts* consts;  // [no decay, decay]
  std::int64_t cols;
  __device__ __forceinline__ float at(std::int64_t r, std::int64_t c) const {
    const std::int64_t i = r * cols + c;
    const StepConsts k = consts[t.decay];
    return k.valid ? update1<M, G>(t, i, k) : __bfloat162float(t.w[i]);
  }
  struct Raw {  // the update happens in fetch (it writes the weights): the values themselves
    float f[8];
  };
  __device__ __forceinline__ Raw fetch(std::int64_t r, std::int64_t c) const {
    const std::int64_t i = r * cols + c;
    const StepConsts k = consts[t.decay];
    Raw raw;
    if (k.valid) {
      update4<M, G>(t, i, k, raw.f);
      update4<M, G>(t, i + 4, k, raw.f + 4);
    } else {
      load4(t.w + i, reinterpret_cast<float(&)[4]>(raw.f[0]));
      load4(t.w + i + 4, reinterpret_cast<float(&)[4]>(raw.f[4]));
    }
    return raw;
  }
  __device__ __forceinline__ void values(const Raw& raw, std::int64_t, float (&f)[8]) const {
#pragma unroll
    for (int k = 0; k < 8; ++k) f[k] = raw.f[k];
  }
};

__global__ void split_kernel(const float* __restrict__ src, std::uint16_t* __restrict__ hi, std::int16_t* __restrict__ lo,
                             std::size_t n) {
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
    const MasterHalves h = split_master(src[i]);
    hi[i] = h.hi, lo[i] = h.lo;
  }
}

__global__ void join_kernel(float* __restrict__ dst, const std::uint16_t* __restrict__ hi,
                            const std::int16_t* __restrict__ lo, std::size_t n) {
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x)
    dst[i] = join_master(hi[i], lo[i]);
}

unsigned grid_for(std::size_t n) { return unsigned(std::min<std::size_t>((n + 255) / 256, 8192)); }

template <class T>
void upload(DeviceBuffer& buf, int device, const std::vector<T>& host) {
  buf = DeviceBuffer(device, host.size() * sizeof(T));
  TB_CHECK(cudaMemcpy(buf.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
}

bool aligned_to(const void* p, std::size_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; }

TensorRec make_rec(const AdamWTensor& t, std::size_t msize, std::size_t gsize) {
  TensorRec r{};
  r.p = t.master;
  r.g = t.grad;
  r.m = t.exp_avg;
  r.v = t.exp_avg_sq;
  r.w = t.model;
  r.lo = t.master_lo;
  r.n = t.numel;
  r.decay = t.decay ? 1 : 0;
  r.phase_g = vec_phase(t.grad, gsize);
  r.phase = t.master ? vec_phase(t.master, 4) : t.master_lo ? vec_phase(t.master_lo, 2) : vec_phase(t.model, 2);
  const bool same = r.phase == r.phase_g && r.phase == vec_phase(t.exp_avg, msize) &&
                    r.phase == vec_phase(t.exp_avg_sq, msize) && (!t.model || r.phase == vec_phase(t.model, 2)) &&
                    (!t.master_lo || r.phase == vec_phase(t.master_lo, 2));
  if (!same) r.phase = -1;
  return r;
}

void check_fp8_copy(const AdamWTensor& t, std::size_t k) {
  const Fp8CastArgs& c = t.fp8_copy;
  TB_REQUIRE(t.model, str("AdamWGroup: tensor ", k, " has FP8 copies but no bf16 model weight to cast; give model"));
  TB_REQUIRE(c.x == nullptr && c.rows >= 1 && c.cols >= 1 && c.rows * c.cols == t.numel,
             str("AdamWGroup: tensor ", k, "'s FP8 copy must describe the tensor as [rows, cols] with rows * cols = ",
                 t.numel, " and x = null, got [", c.rows, ", ", c.cols, "]"));
  TB_REQUIRE(c.amax_in == nullptr,
             str("AdamWGroup: tensor ", k, "'s FP8 copy has amax_in (current scaling): the scale must be known "
                 "before the update (delayed scaling); cast after the step instead"));
  TB_REQUIRE(is_fp8(c.type) && c.scale && c.scale_inv && c.margin >= 0 && c.margin < 64,
             str("AdamWGroup: tensor ", k, "'s FP8 copy needs an fp8 type, scale, scale_inv and a margin in [0, 64)"));
  TB_REQUIRE((c.rows + detail::kCastTile - 1) / detail::kCastTile < 65536,
             str("AdamWGroup: tensor ", k, "'s FP8 copy has too many rows (", c.rows, ") for one launch"));
}

// adamw_step's launches for moments M and gradients G: the update of the tensors without FP8 copies, then each
// tensor with copies (its own kernel where its shape allows, else the cast kernels through AdamWSource).
template <class M, class G>
void launch_step(const AdamWGroup& group, const AdamWStepScalars* scalars, const GradNormResult* clip,
                 const HostConsts& hc, cudaStream_t stream) {
  const auto* tensors = static_cast<const TensorRec*>(group.tensor_table());
  const auto* chunks = static_cast<const ChunkRec*>(group.update_chunk_table());
  if (const auto grid = unsigned(group.update_chunks()); grid > 0) {
    adamw_kernel<M, G><<<grid, kThreads, 0, stream>>>(tensors, chunks, scalars, clip, hc);
    TB_CHECK_LAUNCH();
  }
  if (group.fp8_copies().empty()) return;
  auto* consts = static_cast<StepConsts*>(group.step_consts());
  step_consts_kernel<<<1, 2, 0, stream>>>(scalars, clip, hc, consts);
  TB_CHECK_LAUNCH();
  for (const AdamWTensor& t : group.fp8_copies()) {
    const TensorRec rec = make_rec(t, sizeof(M), sizeof(G));
    const detail::CastTarget target = detail::cast_target(t.fp8_copy);
    const bool e4m3 = t.fp8_copy.type == DType::e4m3, vector_ok = rec.phase == 0;
    const std::int64_t rows = t.fp8_copy.rows, cols = t.fp8_copy.cols;
    if (vector_ok && rows % kCopyRows == 0 && cols % kCopyCols == 0 && rows / kCopyRows < 65536 &&
        reinterpret_cast<std::uintptr_t>(target.qt) % 16 == 0 && reinterpret_cast<std::uintptr_t>(target.q) % 4 == 0) {
      const dim3 grid(unsigned(cols / kCopyCols), unsigned(rows / kCopyRows));
      if (e4m3)
        adamw_fp8_copy_kernel<__NV_E4M3, M, G><<<grid, kThreads, 0, stream>>>(rec, consts, target);
      else
        adamw_fp8_copy_kernel<__NV_E5M2, M, G><<<grid, kThreads, 0, stream>>>(rec, consts, target);
      TB_CHECK_LAUNCH();
    } else {
      detail::launch_cast_transpose(AdamWSource<M, G>{rec, consts, cols}, target, e4m3, vector_ok,
                                    "adamw_step (FP8 copies)", stream);
    }
  }
}

}  // namespace

AdamWGroup::AdamWGroup(int device, std::span<const AdamWTensor> tensors, DType moments, DType grads)
    : device_(device), moments_(moments), grads_(grads) {
  TB_REQUIRE(!tensors.empty(), "AdamWGroup: no tensors; give at least one parameter tensor");
  TB_REQUIRE(moments == DType::f32 || moments == DType::bf16,
             str("AdamWGroup: moments must be f32 or bf16, got ", dtype_name(moments)));
  TB_REQUIRE(grads == DType::f32 || grads == DType::bf16,
             str("AdamWGroup: gradients must be f32 or bf16, got ", dtype_name(grads)));
  TB_REQUIRE(tensors.size() < std::size_t(INT32_MAX), "AdamWGroup: too many tensors");
  const std::size_t msize = dtype_size(moments), gsize = dtype_size(grads);
  std::vector<TensorRec> recs;
  std::vector<ChunkRec> chunks, update;
  for (std::size_t k = 0; k < tensors.size(); ++k) {
    const AdamWTensor& t = tensors[k];
    TB_REQUIRE(t.numel >= 1, str("AdamWGroup: tensor ", k, " has ", t.numel, " elements; give numel >= 1"));
    TB_REQUIRE((t.master || t.model) && t.grad && t.exp_avg && t.exp_avg_sq,
               str("AdamWGroup: tensor ", k,
                   " needs master or model (with master_lo, or alone: no master), grad, exp_avg and exp_avg_sq device "
                   "pointers"));
    TB_REQUIRE(!(t.master && t.master_lo),
               str("AdamWGroup: tensor ", k, ": give master (fp32) or master_lo (split master), not both"));
    TB_REQUIRE(aligned_to(t.master, 4) && aligned_to(t.grad, gsize) && aligned_to(t.exp_avg, msize) &&
                   aligned_to(t.exp_avg_sq, msize) && aligned_to(t.model, 2) && aligned_to(t.master_lo, 2),
               str("AdamWGroup: tensor ", k, ": pointers must be aligned to their element size"));
    const bool copy = t.fp8_copy.qt != nullptr;
    if (copy) check_fp8_copy(t, k), fp8_copies_.push_back(t);
    recs.push_back(make_rec(t, msize, gsize));
    for (std::int64_t b = 0; b < t.numel; b += kAdamWChunk) {
      chunks.push_back({std::int32_t(k), 0, b, std::min(t.numel, b + kAdamWChunk)});
      if (!copy) update.push_back(chunks.back());
    }
    numel_ += t.numel;
  }
  TB_REQUIRE(chunks.size() < std::size_t(INT32_MAX), "AdamWGroup: too many chunks for one launch");
  tensors_ = int(recs.size());
  chunks_ = std::int64_t(chunks.size());
  upload(table_, device, recs);
  upload(chunk_table_, device, chunks);
  partials_ = DeviceBuffer(device, chunks.size() * sizeof(double));
  if (!fp8_copies_.empty()) {
    update_chunks_ = std::int64_t(update.size());
    if (!update.empty()) upload(update_table_, device, update);
    consts_ = DeviceBuffer(device, 2 * sizeof(StepConsts));
  }
}

void master_split(const float* src, __nv_bfloat16* hi, std::int16_t* lo, std::size_t n, cudaStream_t stream) {
  if (n == 0) return;
  TB_REQUIRE(src && hi && lo, "master_split: src, hi and lo must be device pointers");
  split_kernel<<<grid_for(n), 256, 0, stream>>>(src, reinterpret_cast<std::uint16_t*>(hi), lo, n);
  TB_CHECK_LAUNCH();
}

void master_join(float* dst, const __nv_bfloat16* hi, const std::int16_t* lo, std::size_t n, cudaStream_t stream) {
  if (n == 0) return;
  TB_REQUIRE(dst && hi && lo, "master_join: dst, hi and lo must be device pointers");
  join_kernel<<<grid_for(n), 256, 0, stream>>>(dst, reinterpret_cast<const std::uint16_t*>(hi), lo, n);
  TB_CHECK_LAUNCH();
}

void grad_norm(const AdamWGroup& group, float max_norm, GradNormResult* out, cudaStream_t stream) {
  TB_REQUIRE(max_norm > 0, str("grad_norm: max_norm must be > 0 (+inf: never clip), got ", max_norm));
  TB_REQUIRE(out != nullptr, "grad_norm: out must be a device pointer to a GradNormResult, got null");
  TB_CHECK(cudaSetDevice(group.device()));
  with_float_type(group.grads(), [&]<class G>(std::type_identity<G>) {
    norm_partials_kernel<G><<<unsigned(group.chunks()), kThreads, 0, stream>>>(
        static_cast<const TensorRec*>(group.tensor_table()), static_cast<const ChunkRec*>(group.chunk_table()),
        group.partials());
  });
  TB_CHECK_LAUNCH();
  norm_final_kernel<<<1, kFinalThreads, 0, stream>>>(group.partials(), group.chunks(), max_norm, out);
  TB_CHECK_LAUNCH();
}

void clip_from_norm_sq(GradNormResult* r, float max_norm, cudaStream_t stream) {
  TB_REQUIRE(max_norm > 0,
             str("clip_from_norm_sq: max_norm must be > 0 (+inf: never clip), got ", max_norm));
  TB_REQUIRE(r != nullptr, "clip_from_norm_sq: r must be a device pointer to a GradNormResult, got null");
  clip_kernel<<<1, 1, 0, stream>>>(r, max_norm);
  TB_CHECK_LAUNCH();
}

void adamw_step(const AdamWGroup& group, const AdamWConfig& cfg, const AdamWStepScalars* scalars,
                const GradNormResult* clip, cudaStream_t stream) {
  TB_REQUIRE(cfg.beta1 >= 0 && cfg.beta1 < 1 && cfg.beta2 >= 0 && cfg.beta2 < 1,
             str("adamw: betas must lie in [0, 1), got beta1 ", cfg.beta1, " beta2 ", cfg.beta2,
                 "; typical 0.9 and 0.95..0.999"));
  TB_REQUIRE(cfg.eps > 0, str("adamw: eps must be > 0, got ", cfg.eps, "; typical 1e-8"));
  TB_REQUIRE(std::isfinite(cfg.weight_decay) && cfg.weight_decay >= 0,
             str("adamw: weight_decay must be finite and >= 0, got ", cfg.weight_decay, "; typical 0.01..0.1"));
  TB_REQUIRE(scalars != nullptr, "adamw: scalars must be a device pointer to AdamWStepScalars (lr, step), got null");
  HostConsts hc{};
  hc.beta1 = cfg.beta1;
  hc.beta2 = cfg.beta2;
  hc.weight_decay = cfg.weight_decay;
  hc.b1 = float(cfg.beta1);
  hc.one_minus_b1 = float(1.0 - cfg.beta1);
  hc.b2 = float(cfg.beta2);
  hc.one_minus_b2 = float(1.0 - cfg.beta2);
  hc.eps = float(cfg.eps);
  TB_CHECK(cudaSetDevice(group.device()));
  with_float_type(group.moments(), [&]<class M>(std::type_identity<M>) {
    with_float_type(group.grads(),
                    [&]<class G>(std::type_identity<G>) { launch_step<M, G>(group, scalars, clip, hc, stream); });
  });
}

}  // namespace tb::ops
