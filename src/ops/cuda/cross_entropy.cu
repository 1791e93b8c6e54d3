// ops/cuda/cross_entropy.cu: see cross_entropy.h. Three cuBLASLt GEMMs per chunk around one softmax
// cross-entropy kernel (one block per row: online max/sum in fp32 over 16-byte loads, then softmax - onehot
// written in place as bf16), and a final one-block mean of the per-token losses.
#include "ops/cuda/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>
#include <string>

#include "core/error.h"
#include "ops/cuda/fp8_cast.cuh"
#include "ops/cuda/kernel_common.cuh"

namespace tb::ops {
namespace {
using namespace detail;

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kUnroll = 4;  // 16-byte loads in flight per thread before the first use
constexpr std::size_t kAlign = 256;



// Running (max, sum of exp(z - max)) of a set of values; the empty set is (-inf, 0).
struct MaxSum {
  float m, s;
};

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return a;  // both empty
  return {m, a.s * exp2f((a.m - m) * kLog2e) + b.s * exp2f((b.m - m) * kLog2e)};
}

__device__ __forceinline__ MaxSum add1(MaxSum st, float z) { return merge(st, MaxSum{z, 1.0f}); }

__device__ __forceinline__ MaxSum add8(MaxSum st, const uint4& u) {
  float f[kVec];
  unpack8(u, f);
  float vm = f[0];
#pragma unroll
  for (int k = 1; k < kVec; ++k) vm = fmaxf(vm, f[k]);
  const float m = fmaxf(st.m, vm);
  if (m == -INFINITY) return st;
  float s = st.s * exp2f((st.m - m) * kLog2e);
#pragma unroll
  for (int k = 0; k < kVec; ++k) s += exp2f((f[k] - m) * kLog2e);
  return {m, s};
}

__device__ __forceinline__ MaxSum warp_merge(MaxSum st) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) st = merge(st, MaxSum{__shfl_xor_sync(~0u, st.m, o), __shfl_xor_sync(~0u, st.s, o)});
  return st;
}

// The gradient of one logit: (softmax - onehot) * scale, with lse2 = lse * log2(e) (the form both FP8 passes use).
__device__ __forceinline__ float softmax_grad(float z, float lse2, bool is_target, float scale) {
  return (exp2f(fmaf(z, kLog2e, -lse2)) - (is_target ? 1.f : 0.f)) * scale;
}

// FP8 pass-1 outputs: lse2[row] = lse * log2(e), and *grad_amax = max(*grad_amax, max_v |dlogits[row, v]|).
struct Fp8Stats {
  float* lse2;
  float* grad_amax;
};

// One block per row of the chunk's logits [rows, vocab] (row-major, bf16). Writes the row's loss to token_loss[row]
// and, when write_grad, (softmax - onehot) * scale over the row in place. kFp8: writes nothing over the row; the
// row's lse2 and its gradients' amax (from the target's logit and the largest other one) go to fp8.
template <int kThreads, bool kFp8 = false>
__global__ void __launch_bounds__(kThreads)
    softmax_xent_kernel(__nv_bfloat16* __restrict__ logits, std::int64_t vocab,
                        const std::int32_t* __restrict__ targets, float* __restrict__ token_loss, float scale,
                        bool write_grad, Fp8Stats fp8 = {}, const float* __restrict__ weights = nullptr) {
  constexpr int kWarps = kThreads / 32;
  __shared__ MaxSum warp_st[kWarps];
  __shared__ float warp_other[kWarps];
  __shared__ float row_lse;
  const std::int64_t row = blockIdx.x;
  const int tid = threadIdx.x;
  auto* z = reinterpret_cast<unsigned short*>(logits + row * vocab);
  const std::int32_t target = targets[row];
  const bool target_ok = target >= 0 && target < vocab;
  if (weights) scale *= weights[row];  // the row's loss weight (0: a zero gradient row)

  // z is 2-byte aligned: `head` scalars reach a 16-byte boundary, then nvec 16-byte vectors, then < 8 scalars.
  const auto addr = reinterpret_cast<std::uintptr_t>(z);
  const std::int64_t head = std::min<std::int64_t>(vocab, std::int64_t(((16 - (addr & 15)) & 15) / 2));
  const std::int64_t nvec = (vocab - head) / kVec;
  const std::int64_t tail_begin = head + nvec * kVec;
  auto* zv = reinterpret_cast<uint4*>(z + head);
  const auto scalar = [&](std::int64_t i) { return __uint_as_float(unsigned(z[i]) << 16); };

  float z_target = 0.f;
  if (tid == 0 && target_ok) z_target = scalar(target);  // read before any thread overwrites the row

  // Pass 1: max and sum of exp over the row (FP8: also the largest logit other than the target's).
  MaxSum st{-INFINITY, 0.f};
  float other = -INFINITY;
  const auto other1 = [&](std::int64_t i) {
    if constexpr (kFp8)
      if (i != target) other = fmaxf(other, scalar(i));
  };
  if (tid < head) st = add1(st, scalar(tid)), other1(tid);
  if (tid < vocab - tail_begin) st = add1(st, scalar(tail_begin + tid)), other1(tail_begin + tid);
  for (std::int64_t i = tid; i < nvec; i += std::int64_t(kThreads) * kUnroll) {
    uint4 buf[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (i + u * kThreads < nvec) buf[u] = zv[i + u * kThreads];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::int64_t j = i + u * kThreads;
      if (j >= nvec) continue;
      st = add8(st, buf[u]);
      if constexpr (kFp8) {
        float f[kVec];
        unpack8(buf[u], f);
        const std::int64_t e = head + j * kVec;
#pragma unroll
        for (int k = 0; k < kVec; ++k)
          if (e + k != target) other = fmaxf(other, f[k]);
      }
    }
  }
  st = warp_merge(st);
  if constexpr (kFp8)
    for (int o = 16; o > 0; o >>= 1) other = fmaxf(other, __shfl_xor_sync(~0u, other, o));
  if (tid % 32 == 0) warp_st[tid / 32] = st, warp_other[tid / 32] = other;
  __syncthreads();
  if (tid < 32) {
    st = tid < kWarps ? warp_st[tid] : MaxSum{-INFINITY, 0.f};
    st = warp_merge(st);
    if constexpr (kFp8) {
      other = tid < kWarps ? warp_other[tid] : -INFINITY;
      for (int o = 16; o > 0; o >>= 1) other = fmaxf(other, __shfl_xor_sync(~0u, other, o));
    }
    if (tid == 0) {
      const float lse = st.m + logf(st.s);
      row_lse = lse;
      token_loss[row] = target_ok ? lse - z_target : __int_as_float(0x7fc00000);  // NaN: bad target
      if constexpr (kFp8) {
        const float lse2 = lse * kLog2e;
        fp8.lse2[row] = lse2;
        // The row's largest |gradient|: the target's, or the largest other logit's (the map z -> g is monotone).
        const float gt = target_ok ? fabsf(softmax_grad(z_target, lse2, true, scale)) : 0.f;
        const float go = other == -INFINITY ? 0.f : fabsf(softmax_grad(other, lse2, false, scale));
        const float a = isnan(gt) || isnan(go) ? __int_as_float(0x7fc00000) : fmaxf(gt, go);
        atomicMax(reinterpret_cast<int*>(fp8.grad_amax), __float_as_int(a));  // non-negative: orders as int
      }
    }
  }
  __syncthreads();
  if (kFp8 || !write_grad) return;

  // Pass 2: dlogits = (exp(z - lse) - onehot) * scale, over the same elements (now mostly in L2).
  const float lse2 = row_lse * kLog2e;
  const auto grad = [&](float zf, std::int64_t i) { return softmax_grad(zf, lse2, i == target, scale); };
  const auto store1 = [&](std::int64_t i) {
    z[i] = __bfloat16_as_ushort(__float2bfloat16_rn(grad(scalar(i), i)));
  };
  if (tid < head) store1(tid);
  if (tid < vocab - tail_begin) store1(tail_begin + tid);
  for (std::int64_t i = tid; i < nvec; i += std::int64_t(kThreads) * kUnroll) {
    uint4 buf[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (i + u * kThreads < nvec) buf[u] = zv[i + u * kThreads];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::int64_t j = i + u * kThreads;
      if (j >= nvec) continue;
      float f[kVec];
      unpack8(buf[u], f);
      const std::int64_t e = head + j * kVec;  // element index of f[0]
      uint4 out;
      out.x = pack2(grad(f[0], e + 0), grad(f[1], e + 1));
      out.y = pack2(grad(f[2], e + 2), grad(f[3], e + 3));
      out.z = pack2(grad(f[4], e + 4), grad(f[5], e + 5));
      out.w = pack2(grad(f[6], e + 6), grad(f[7], e + 7));
      zv[j] = out;
    }
  }
}

// *out = (1/t) sum token_loss, or with loss weights sum w token_loss (rows of weight 0 skipped: their loss may be NaN),
// summed in double by one block in a fixed order (deterministic).
constexpr int kMeanThreads = 1024;
__global__ void __launch_bounds__(kMeanThreads)
    mean_loss_kernel(const float* __restrict__ token_loss, std::int64_t t, float* __restrict__ out,
                     const float* __restrict__ weights = nullptr) {
  __shared__ double warp_sum[kMeanThreads / 32];
  double s = 0;
  for (std::int64_t i = threadIdx.x; i < t; i += kMeanThreads)
    if (!weights)
      s += double(token_loss[i]);
    else if (weights[i] != 0.f)
      s += double(weights[i]) * double(token_loss[i]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(~0u, s, o);
  if (threadIdx.x % 32 == 0) warp_sum[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x < 32) {
    s = warp_sum[threadIdx.x];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(~0u, s, o);
    if (threadIdx.x == 0) *out = float(weights ? s : s / double(t));
  }
}

template <bool kFp8 = false>
void launch_softmax_xent(__nv_bfloat16* logits, std::int64_t rows, std::int64_t vocab, const std::int32_t* targets,
                         float* token_loss, float scale, bool write_grad, cudaStream_t stream, Fp8Stats fp8 = {},
                         const float* weights = nullptr) {
  const auto grid = unsigned(rows);
  if (vocab >= 32768)
    softmax_xent_kernel<1024, kFp8>
        <<<grid, 1024, 0, stream>>>(logits, vocab, targets, token_loss, scale, write_grad, fp8, weights);
  else if (vocab >= 4096)
    softmax_xent_kernel<512, kFp8>
        <<<grid, 512, 0, stream>>>(logits, vocab, targets, token_loss, scale, write_grad, fp8, weights);
  else
    softmax_xent_kernel<128, kFp8>
        <<<grid, 128, 0, stream>>>(logits, vocab, targets, token_loss, scale, write_grad, fp8, weights);
  TB_CHECK_LAUNCH();
}

// The FP8 backward's source for the cast tiles (ops/cuda/fp8_cast.cuh): dlogits[r, v] recomputed from the chunk's
// bf16 logits and its rows' lse2, exactly as pass 1 bounded them.
struct SoftmaxGradSource {
  const __nv_bfloat16* logits;
  std::int64_t vocab;
  const float* lse2;
  const std::int32_t* targets;
  float scale;
  __device__ __forceinline__ float at(std::int64_t r, std::int64_t c) const {
    return softmax_grad(__bfloat162float(logits[r * vocab + c]), lse2[r], c == targets[r], scale);
  }
  struct Raw {
    uint4 z;
    float l2;
    std::int32_t t;
  };
  __device__ __forceinline__ Raw fetch(std::int64_t r, std::int64_t c) const {
    return {__ldg(reinterpret_cast<const uint4*>(logits + r * vocab + c)), lse2[r], targets[r]};
  }
  __device__ __forceinline__ void values(const Raw& raw, std::int64_t c, float (&f)[8]) const {
    unpack8(raw.z, f);
#pragma unroll
    for (int k = 0; k < kVec; ++k) f[k] = softmax_grad(f[k], raw.l2, c + k == raw.t, scale);
  }
};

bool aligned(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % kAlign == 0; }

template <class T>
void require_dense(const TensorView<T>& v, std::int64_t rows, std::int64_t cols, const char* what) {
  TB_REQUIRE(v.rank() == 2 && v.size(0) == rows && v.size(1) == cols && v.is_contiguous(),
             str("lm_head_cross_entropy: ", what, " must be a contiguous [", rows, ", ", cols, "] view, got ",
                 v.shape_str(), v.rank() == 2 && !v.is_contiguous() ? " (strided)" : ""));
  TB_REQUIRE(aligned(v.data()),
             str("lm_head_cross_entropy: ", what,
                 " must be 256-byte aligned (cudaMalloc'ed): the cuBLASLt plans assume it"));
}

}  // namespace

LmHeadCeScratch lm_head_ce_scratch(std::int64_t tokens, std::int64_t vocab, std::int64_t hidden, int chunk,
                                   bool fp8) {
  TB_REQUIRE(tokens >= 1 && vocab >= 1 && hidden >= 1,
             str("lm_head_cross_entropy: tokens, vocab and hidden must be >= 1, got ", tokens, ", ", vocab, ", ",
                 hidden));
  TB_REQUIRE(chunk >= 1, str("lm_head_cross_entropy: chunk must be >= 1 token, got ", chunk));
  TB_REQUIRE(tokens <= std::int64_t(INT32_MAX) && vocab <= std::int64_t(INT32_MAX),
             str("lm_head_cross_entropy: tokens ", tokens, " or vocab ", vocab, " exceed 2^31 - 1"));
  // Rows of h bf16 start 256-byte aligned every q rows.
  const std::int64_t q = 128 / std::gcd<std::int64_t>(hidden, 128);
  const std::int64_t step = fp8 ? std::lcm<std::int64_t>(q, 64) : q;  // FP8: 64-row chunks (the vector cast: 32)
  LmHeadCeScratch s;
  s.chunk = std::min(tokens, (std::int64_t(std::min<std::int64_t>(chunk, tokens)) + step - 1) / step * step);
  const std::size_t c = std::size_t(s.chunk), v = std::size_t(vocab), hh = std::size_t(hidden);
  s.logits_bytes = c * v * sizeof(__nv_bfloat16);
  std::size_t end = round_up256(s.logits_bytes);
  const auto take = [&](std::size_t bytes) {
    const std::size_t at = end;
    end = round_up256(end + bytes);
    return at;
  };
  s.token_loss_offset = take(std::size_t(tokens) * sizeof(float));
  if (fp8) {
    s.dlq_offset = take(c * v);
    s.dlqt_offset = take(c * v);
    s.xq_offset = take(c * hh);
    s.xqt_offset = take(c * hh);
    s.lse_offset = take(c * sizeof(float));
  }
  s.bytes = end;
  return s;
}

namespace {

// The bf16 head's three GEMMs on one chunk of c tokens (lm_head_cross_entropy; the FP8 head's GEMMs that run in BF16
// call the same, so with none in FP8 it is the bf16 head bit for bit): logits = x_c W^T; dx_c = dlogits W;
// dW (+)= dlogits^T x_c (fp32 or bf16; accumulate false: written).
struct Bf16HeadGemms {
  DeviceContext& dc;
  const __nv_bfloat16* w;
  std::int64_t vocab, h;
  void logits(std::int64_t c, __nv_bfloat16* out, const __nv_bfloat16* x_c) const {
    dc.gemm(GemmShape{c, vocab, h, DType::bf16, DType::bf16, DType::bf16}, out, x_c, w);
  }
  void dx(std::int64_t c, __nv_bfloat16* dx_c, const __nv_bfloat16* dlogits) const {
    dc.gemm(GemmShape{c, h, vocab, DType::bf16, DType::bf16, DType::bf16, false, GemmLayout::ab}, dx_c, dlogits, w);
  }
  template <class G>
  void dw(std::int64_t c, G* dw, const __nv_bfloat16* dlogits, const __nv_bfloat16* x_c, bool accumulate) const {
    dc.gemm(GemmShape{vocab, h, c, DType::bf16, DType::bf16, dtype_of<G>(), false, GemmLayout::atb, accumulate}, dw,
            dlogits, x_c);
  }
};

// The checks both variants share (x, dx, dW, targets, loss, scale, scratch); W is checked by the caller.
template <class G>
void check_call(TensorView<__nv_bfloat16> dx, TensorView<G> dw, TensorView<const __nv_bfloat16> x,
                std::int64_t vocab, const std::int32_t* targets, float grad_scale, float* loss_out,
                Workspace scratch, const LmHeadCeScratch& layout) {
  const std::int64_t t = x.size(0), h = x.size(1);
  require_dense(x, t, h, "x");
  if (dx.data()) require_dense(dx, t, h, "dx");
  if (dw.data()) require_dense(dw, vocab, h, "dW");
  TB_REQUIRE(targets != nullptr && loss_out != nullptr,
             "lm_head_cross_entropy: targets and loss_out must be device pointers, got null");
  TB_REQUIRE(scratch.ptr != nullptr && aligned(scratch.ptr) && scratch.bytes >= layout.bytes,
             str("lm_head_cross_entropy: scratch must be ", layout.bytes,
                 " bytes, 256-byte aligned (lm_head_ce_scratch), got ", scratch.bytes, " bytes at ", scratch.ptr));
  TB_REQUIRE(std::isfinite(grad_scale),
             str("lm_head_cross_entropy: grad_scale must be finite, got ", grad_scale));
}

}  // namespace

template <class G>
void lm_head_cross_entropy(DeviceContext& dc, TensorView<__nv_bfloat16> dx, TensorView<G> dw,
                           TensorView<const __nv_bfloat16> x, TensorView<const __nv_bfloat16> w,
                           const std::int32_t* targets, int chunk, float grad_scale, float* loss_out,
                           Workspace scratch, bool dw_overwrite, const float* weights) {
  TB_REQUIRE(x.rank() == 2 && w.rank() == 2,
             str("lm_head_cross_entropy: x [t, h] and W [V, h] must be 2-D, got ", x.shape_str(), " and ",
                 w.shape_str()));
  const std::int64_t t = x.size(0), h = x.size(1), vocab = w.size(0);
  TB_REQUIRE(w.size(1) == h, str("lm_head_cross_entropy: x ", x.shape_str(), " and W ", w.shape_str(),
                                 " disagree on the hidden size (W is [vocab, hidden])"));
  const LmHeadCeScratch layout = lm_head_ce_scratch(t, vocab, h, chunk);
  require_dense(w, vocab, h, "W");
  check_call(dx, dw, x, vocab, targets, grad_scale, loss_out, scratch, layout);
  const bool want_dx = dx.data() != nullptr, want_dw = dw.data() != nullptr;

  auto* logits = static_cast<__nv_bfloat16*>(scratch.ptr);
  auto* token_loss = reinterpret_cast<float*>(static_cast<unsigned char*>(scratch.ptr) + layout.token_loss_offset);
  const bool backward = want_dx || want_dw;
  const float scale = weights ? grad_scale : float(double(grad_scale) / double(t));  // times the row's weight
  const Bf16HeadGemms gemm{dc, w.data(), vocab, h};
  dc.activate();
  for (std::int64_t r0 = 0; r0 < t; r0 += layout.chunk) {
    const std::int64_t c = std::min(layout.chunk, t - r0);
    const __nv_bfloat16* x_c = x.data() + r0 * h;
    gemm.logits(c, logits, x_c);
    launch_softmax_xent(logits, c, vocab, targets + r0, token_loss + r0, scale, backward, dc.stream(), {},
                        weights ? weights + r0 : nullptr);
    if (want_dx) gemm.dx(c, dx.data() + r0 * h, logits);
    if (want_dw) gemm.dw(c, dw.data(), logits, x_c, !(dw_overwrite && r0 == 0));
  }
  mean_loss_kernel<<<1, kMeanThreads, 0, dc.stream()>>>(token_loss, t, loss_out, weights);
  TB_CHECK_LAUNCH();
}

template <class G>
void lm_head_cross_entropy_fp8(DeviceContext& dc, TensorView<__nv_bfloat16> dx, TensorView<G> dw,
                               TensorView<const __nv_bfloat16> x, const LmHeadFp8& w, std::int64_t vocab,
                               const std::int32_t* targets, int chunk, float grad_scale, float* loss_out,
                               Workspace scratch, bool dw_overwrite) {
  TB_REQUIRE(x.rank() == 2, str("lm_head_cross_entropy_fp8: x must be [t, h], got ", x.shape_str()));
  const std::int64_t t = x.size(0), h = x.size(1);
  TB_REQUIRE(t % 16 == 0 && h % 16 == 0 && vocab % 16 == 0,
             str("lm_head_cross_entropy_fp8: tokens ", t, ", hidden ", h, " and vocab ", vocab,
                 " must be multiples of 16 (FP8 GEMMs); use the bf16 LM head"));
  TB_REQUIRE(w.wq && w.wqt && w.w_scale_inv && w.x.amax && w.x.scale && w.x.scale_inv && w.dlogits.amax &&
                 w.dlogits.scale && w.dlogits.scale_inv,
             "lm_head_cross_entropy_fp8: the FP8 weights, W's scale_inv and the x / dlogits scaling slots are needed");
  TB_REQUIRE(w.grad == DType::e5m2 || w.grad == DType::e4m3,
             str("lm_head_cross_entropy_fp8: the logit gradients' format must be e5m2 or e4m3, got ",
                 dtype_name(w.grad)));
  TB_REQUIRE(w.fp8_gemms <= kHeadAllGemms && (w.fp8_gemms == kHeadAllGemms || w.w_bf16),
             str("lm_head_cross_entropy_fp8: fp8_gemms must be a set of LmHeadGemm bits (got ", w.fp8_gemms,
                 "), and the GEMMs not in it need W in bf16 (w_bf16)"));
  const LmHeadCeScratch layout = lm_head_ce_scratch(t, vocab, h, chunk, true);
  check_call(dx, dw, x, vocab, targets, grad_scale, loss_out, scratch, layout);
  const bool want_dx = dx.data() != nullptr, want_dw = dw.data() != nullptr;
  const bool fp8_fwd = w.fp8_gemms & kHeadForward, fp8_dx = want_dx && (w.fp8_gemms & kHeadDgrad),
             fp8_dw = want_dw && (w.fp8_gemms & kHeadWgrad);
  const bool fp8_grad = fp8_dx || fp8_dw, bf16_grad = (want_dx && !fp8_dx) || (want_dw && !fp8_dw);

  auto* base = static_cast<unsigned char*>(scratch.ptr);
  auto* logits = reinterpret_cast<__nv_bfloat16*>(base);
  auto* token_loss = reinterpret_cast<float*>(base + layout.token_loss_offset);
  std::uint8_t *dlq = base + layout.dlq_offset, *dlqt = base + layout.dlqt_offset;
  std::uint8_t *xq = base + layout.xq_offset, *xqt = base + layout.xqt_offset;
  auto* lse2 = reinterpret_cast<float*>(base + layout.lse_offset);
  const float scale = float(double(grad_scale) / double(t));
  const Bf16HeadGemms bf16{dc, w.w_bf16, vocab, h};  // the GEMMs not in fp8_gemms
  cudaStream_t st = dc.stream();
  dc.activate();
  if (fp8_fwd || fp8_dw) {
    TB_CHECK(cudaMemsetAsync(w.x.amax, 0, sizeof(float), st));
    fp8_amax(x.data(), std::size_t(t) * std::size_t(h), w.x.amax, st);
  }
  for (std::int64_t r0 = 0; r0 < t; r0 += layout.chunk) {
    const std::int64_t c = std::min(layout.chunk, t - r0);
    const __nv_bfloat16* x_c = x.data() + r0 * h;
    if (fp8_fwd || fp8_dw) {
      Fp8CastArgs xa;  // every chunk with the whole x's scale
      xa.x = x_c, xa.rows = c, xa.cols = h, xa.q = fp8_fwd ? xq : nullptr, xa.qt = fp8_dw ? xqt : nullptr;
      xa.type = DType::e4m3, xa.amax_in = w.x.amax, xa.scale = w.x.scale, xa.scale_inv = w.x.scale_inv;
      xa.margin = w.margin;
      fp8_cast(xa, st);
    }
    if (fp8_fwd)
      dc.gemm(GemmShape{c, vocab, h, DType::e4m3, DType::e4m3, DType::bf16, true}, logits, xq, w.wq,
              {w.x.scale_inv, w.w_scale_inv});
    else
      bf16.logits(c, logits, x_c);
    if (fp8_grad) {  // pass 1 (lse, loss, the gradients' amax), then the FP8 copies of the gradients
      TB_CHECK(cudaMemsetAsync(w.dlogits.amax, 0, sizeof(float), st));
      launch_softmax_xent<true>(logits, c, vocab, targets + r0, token_loss + r0, scale, false, st,
                                Fp8Stats{lse2, w.dlogits.amax});
      const detail::CastTarget gt{c, vocab, fp8_dx ? dlq : nullptr, dlqt, w.dlogits.amax, w.dlogits.scale,
                                  w.dlogits.scale_inv, nullptr, fp8_max(w.grad), w.margin, w.stochastic};
      detail::launch_cast_transpose(SoftmaxGradSource{logits, vocab, lse2, targets + r0, scale}, gt,
                                    w.grad == DType::e4m3,
                                    vocab % kVec == 0, "lm_head_cross_entropy_fp8 (dlogits)", st);
    }
    if (!fp8_grad || bf16_grad)  // the loss (forward only), or bf16 dlogits over the logits as the bf16 head writes
      launch_softmax_xent(logits, c, vocab, targets + r0, token_loss + r0, scale, bf16_grad, st);
    if (fp8_dx)
      dc.gemm(GemmShape{c, h, vocab, w.grad, DType::e4m3, DType::bf16}, dx.data() + r0 * h, dlq, w.wqt,
              {w.dlogits.scale_inv, w.w_scale_inv});
    else if (want_dx)
      bf16.dx(c, dx.data() + r0 * h, logits);
    const bool overwrite = dw_overwrite && r0 == 0;
    if (fp8_dw) {
      GemmShape gw{vocab, h, c, w.grad, DType::e4m3, dtype_of<G>()};
      gw.accumulate = !overwrite;
      dc.gemm(gw, dw.data(), dlqt, xqt, {w.dlogits.scale_inv, w.x.scale_inv});
    } else if (want_dw) {
      bf16.dw(c, dw.data(), logits, x_c, !overwrite);
    }
  }
  mean_loss_kernel<<<1, kMeanThreads, 0, st>>>(token_loss, t, loss_out);
  TB_CHECK_LAUNCH();
}

#define TB_LM_HEAD(G)                                                                                                 \
  template void lm_head_cross_entropy<G>(DeviceContext&, TensorView<__nv_bfloat16>, TensorView<G>,                 \
                                         TensorView<const __nv_bfloat16>, TensorView<const __nv_bfloat16>,          \
                                         const std::int32_t*, int, float, float*, Workspace, bool, const float*);   \
  template void lm_head_cross_entropy_fp8<G>(DeviceContext&, TensorView<__nv_bfloat16>, TensorView<G>,             \
                                             TensorView<const __nv_bfloat16>, const LmHeadFp8&, std::int64_t,       \
                                             const std::int32_t*, int, float, float*, Workspace, bool);
TB_LM_HEAD(float)
TB_LM_HEAD(__nv_bfloat16)
#undef TB_LM_HEAD

}  // namespace tb::ops
