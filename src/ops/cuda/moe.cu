// ops/cuda/moe.cu: the MoE routing and dispatch kernels of ops/cuda/moe.h.
//   route, router backward: one warp per token, lane l holding experts l, l + 32, ... (at most 8 each)
//   dispatch: per chunk of kChunk pairs a histogram; one block turns them into each expert's aligned start and each
//   chunk's first row per expert; one warp per chunk then ranks its pairs in order (__match_any_sync groups the
//   lanes routed to one expert)
//   permute / unpermute and their backward: one warp per row (a pair or a token), 16-byte accesses
#include <cmath>

#include "ops/cuda/kernel_common.cuh"
#include "ops/cuda/moe.h"

namespace tb::ops {
namespace {

using detail::ceil_div;
using detail::load8;
using detail::pack8;
using detail::str;
using detail::unpack8;
using detail::warp_sum;

constexpr int kPer = kMoeMaxExperts / 32;  // experts per lane
constexpr int kChunk = 1024;               // pairs per dispatch chunk
constexpr int kWarps = 4;                  // warps per block of the per-token and per-row kernels

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// A token's scores s (invalid experts: -1, never chosen) and the logsumexp of its logits.
struct RowScores {
  float l[kPer], s[kPer], lse;
};

__device__ __forceinline__ void row_scores(const MoeRouting& r, const float* logits, int t, int lane, RowScores& x) {
  const int E = r.experts;
  float m = -INFINITY;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int e = lane + 32 * i;
    x.l[i] = e < E ? logits[std::int64_t(t) * E + e] : -INFINITY;
    m = fmaxf(m, x.l[i]);
  }
  m = warp_max(m);
  float sum = 0;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int e = lane + 32 * i;
    x.s[i] = e < E ? expf(x.l[i] - m) : 0.f;
    sum += x.s[i];
  }
  sum = warp_sum(sum);
  x.lse = m + logf(sum);
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int e = lane + 32 * i;
    if (e >= E)
      x.s[i] = -1.f;
    else
      x.s[i] = r.score == MoeScore::softmax ? x.s[i] / sum : 1.f / (1.f + expf(-x.l[i]));
  }
}

// s of expert e (uniform over the warp).
__device__ __forceinline__ float score_of(const RowScores& x, int e) {
  float v = 0;
#pragma unroll
  for (int i = 0; i < kPer; ++i)
    if (i == (e >> 5)) v = x.s[i];
  return __shfl_sync(0xffffffffu, v, e & 31);
}

__global__ void __launch_bounds__(32 * kWarps) route_kernel(const MoeRouting r, const float* logits, MoeRouteOut out) {
  const int t = int(blockIdx.x) * kWarps + int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
  if (t >= r.tokens) return;
  const int E = r.experts;
  RowScores x;
  row_scores(r, logits, t, lane, x);
  if (out.lse && lane == 0) out.lse[t] = x.lse;
  if (out.probs) {
    float sum = 1;
    if (r.score == MoeScore::sigmoid) {
      sum = 0;
#pragma unroll
      for (int i = 0; i < kPer; ++i) sum += fmaxf(x.s[i], 0.f);
      sum = warp_sum(sum);
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int e = lane + 32 * i;
      if (e < E) out.probs[std::int64_t(t) * E + e] = x.s[i] / sum;
    }
  }
  unsigned taken = 0;  // bit i: expert lane + 32 i chosen
  int my_e = 0;
  float my_s = 0, total = 0;
  for (int j = 0; j < r.k; ++j) {
    int best;
    float v;
    if (r.balanced) {
      best = int((std::int64_t(r.token0 + t) * r.k + j) % E);
      v = score_of(x, best);
    } else {  // the largest key s + b of the experts not taken (invalid experts: -inf)
      v = -INFINITY, best = 0x7fffffff;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int e = lane + 32 * i;
        const float key = e < E ? x.s[i] + (r.bias ? r.bias[e] : 0.f) : -INFINITY;
        if (!(taken >> i & 1u) && key > v) v = key, best = e;
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, best, o);
        if (ov > v || (ov == v && oi < best)) v = ov, best = oi;
      }
      if ((best & 31) == lane) taken |= 1u << (best >> 5);
      if (r.bias) v = score_of(x, best);  // the weight is the score itself
    }
    if (lane == j) my_e = best, my_s = v;
    total += v;
  }
  if (lane < r.k) {
    const std::int64_t p = std::int64_t(t) * r.k + lane;
    out.expert[p] = my_e;
    out.weight[p] = r.scale * my_s / (r.normalize ? total : 1.f);
    atomicAdd(&out.seq_counts[(t / r.seq) * E + my_e], 1);
  }
}

// The held expert pair p goes to, or -1 when it is dropped (keep null: none is).
__device__ __forceinline__ int held_expert(int E, const std::int32_t* expert, const std::int32_t* keep, std::int64_t p) {
  return keep && !keep[p] ? -1 : expert[p] % E;
}

__global__ void chunk_hist_kernel(const MoeRouting r, const std::int32_t* expert, const std::int32_t* keep,
                                  std::int32_t* hist) {
  __shared__ int h[kMoeMaxExperts];
  const int E = r.held_experts();
  for (int e = int(threadIdx.x); e < E; e += int(blockDim.x)) h[e] = 0;
  __syncthreads();
  const std::int64_t pairs = std::int64_t(r.tokens) * r.k, p0 = std::int64_t(blockIdx.x) * kChunk;
  const std::int64_t end = pairs < p0 + kChunk ? pairs : p0 + kChunk;
  for (std::int64_t p = p0 + threadIdx.x; p < end; p += blockDim.x) {
    const int e = held_expert(E, expert, keep, p);
    if (e >= 0) atomicAdd(&h[e], 1);
  }
  __syncthreads();
  for (int e = int(threadIdx.x); e < E; e += int(blockDim.x)) hist[std::int64_t(blockIdx.x) * E + e] = h[e];
}

// One block of kMoeMaxExperts threads: thread e turns its column of chunk counts into the chunks' first rows.
__global__ void dispatch_scan_kernel(const MoeRouting r, int chunks, std::int32_t* hist, std::int32_t* start,
                                     std::int32_t* count) {
  __shared__ int padded[kMoeMaxExperts + 1];
  const int E = r.held_experts(), e = int(threadIdx.x);
  int running = 0;
  if (e < E) {
    for (int c = 0; c < chunks; ++c) {
      const int v = hist[c * E + e];
      hist[c * E + e] = running;
      running += v;
    }
    count[e] = running;
    padded[e] = r.pad ? int(r.padded_rows()) : (running + kMoeRowAlign - 1) / kMoeRowAlign * kMoeRowAlign;
  }
  __syncthreads();
  if (e == 0) {  // E <= 256 values: a serial exclusive scan
    int acc = 0;
    for (int i = 0; i < E; ++i) {
      const int v = padded[i];
      padded[i] = acc;
      acc += v;
    }
    padded[E] = acc;
    start[E] = acc;
  }
  __syncthreads();
  if (e < E) {
    start[e] = padded[e];
    for (int c = 0; c < chunks; ++c) hist[c * E + e] += padded[e];
  }
}

__global__ void __launch_bounds__(32) dispatch_rank_kernel(const MoeRouting r, const std::int32_t* expert,
                                                           const std::int32_t* keep, const std::int32_t* first_row,
                                                           std::int32_t* row_of_pair) {
  __shared__ int next[kMoeMaxExperts];
  const int E = r.held_experts(), lane = int(threadIdx.x);
  for (int e = lane; e < E; e += 32) next[e] = first_row[std::int64_t(blockIdx.x) * E + e];
  __syncwarp();
  const std::int64_t pairs = std::int64_t(r.tokens) * r.k, p0 = std::int64_t(blockIdx.x) * kChunk;
  const std::int64_t end = pairs < p0 + kChunk ? pairs : p0 + kChunk;
  const unsigned below = (1u << lane) - 1u;
  for (std::int64_t g = p0; g < end; g += 32) {
    const std::int64_t p = g + lane;
    const int e = p < end ? held_expert(E, expert, keep, p) : -1;
    const unsigned same = __match_any_sync(0xffffffffu, e);
    const int base = e >= 0 ? next[e] : 0;
    __syncwarp();
    if (e >= 0) {
      row_of_pair[p] = base + __popc(same & below);
      if (lane == __ffs(same) - 1) next[e] = base + __popc(same);
    } else if (p < end) {
      row_of_pair[p] = -1;  // dropped
    }
    __syncwarp();
  }
}

// Capacity: the weight of each pair at its row of the first (by expert) dispatch.
__global__ void weight_at_row_kernel(const std::int32_t* row_of_pair, const float* weight, std::int64_t pairs,
                                     float* w_row) {
  const std::int64_t p = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p < pairs) w_row[row_of_pair[p]] = weight[p];
}

// Capacity: pair p is kept when fewer than C pairs of its expert rank above it: a larger weight, or the same weight
// at an earlier row (an earlier token: the rows are in token order within an expert). Dropped pairs are counted.
__global__ void capacity_keep_kernel(const MoeRouting r, const std::int32_t* expert, const std::int32_t* row_of_pair,
                                     const std::int32_t* start, const std::int32_t* count, const float* w_row,
                                     std::int32_t* keep, unsigned long long* dropped) {
  const std::int64_t p = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= std::int64_t(r.tokens) * r.k) return;
  const int e = expert[p], row = row_of_pair[p], s0 = start[e], s1 = start[e] + count[e];
  const float w = w_row[row];
  int above = 0;
  for (int j = s0; j < s1 && above < r.capacity; ++j) {
    const float v = w_row[j];
    above += v > w || (v == w && j < row);
  }
  keep[p] = above < r.capacity;
  if (above >= r.capacity) atomicAdd(dropped, 1ull);
}

__global__ void add_count_kernel(const unsigned long long* n, double* total) { *total += double(*n); }

// Rows [start_h + count_h, start_{h+1}) of buf = 0: block (h, i) takes every gridDim.y-th row from i.
__global__ void zero_padding_kernel(bf16* buf, const std::int32_t* start, const std::int32_t* count, int d) {
  const int h = int(blockIdx.x);
  const std::int64_t r1 = start[h + 1];
  for (std::int64_t r = start[h] + count[h] + blockIdx.y; r < r1; r += gridDim.y)
    for (int c = int(threadIdx.x) * kVec; c < d; c += int(blockDim.x) * kVec) detail::store8(buf + r * d + c, uint4{});
}

// One warp per pair: xp[row] = x[t].
__global__ void __launch_bounds__(32 * kWarps)
    permute_kernel(bf16* xp, const bf16* x, const std::int32_t* row_of_pair, std::int64_t pairs, int k, int d) {
  const std::int64_t p = std::int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (p >= pairs) return;
  if (row_of_pair[p] < 0) return;  // dropped
  const bf16* src = x + (p / k) * d;
  bf16* dst = xp + std::int64_t(row_of_pair[p]) * d;
  for (int c = int(threadIdx.x & 31) * kVec; c < d; c += 32 * kVec) detail::store8(dst + c, load8(src + c));
}

// One warp per token: y[t] (+)= sum_j w_j o[row_j]  (or, backward with weight null: dx[t] (+)= sum_j dxp[row_j]).
__global__ void __launch_bounds__(32 * kWarps)
    gather_sum_kernel(bf16* y, const bf16* o, const std::int32_t* row_of_pair, const float* weight, int n, int k, int d,
                      bool accumulate) {
  const int t = int(blockIdx.x) * kWarps + int(threadIdx.x >> 5);
  if (t >= n) return;
  for (int c = int(threadIdx.x & 31) * kVec; c < d; c += 32 * kVec) {
    float acc[8] = {};
    if (accumulate) unpack8(detail::load8_rw(y + std::int64_t(t) * d + c), acc);
    for (int j = 0; j < k; ++j) {
      const std::int64_t p = std::int64_t(t) * k + j;
      if (row_of_pair[p] < 0) continue;  // dropped
      const float w = weight ? weight[p] : 1.f;
      float v[8];
      unpack8(load8(o + std::int64_t(row_of_pair[p]) * d + c), v);
#pragma unroll
      for (int q = 0; q < 8; ++q) acc[q] += w * v[q];
    }
    detail::store8(y + std::int64_t(t) * d + c, pack8(acc));
  }
}

// One warp per pair: dw = dy[t] · o[row], then dop[row] = w dy[t] (over o: every lane has read its part of o before
// the warp's sum completes).
__global__ void __launch_bounds__(32 * kWarps)
    unpermute_backward_kernel(bf16* dop, float* dweight, const bf16* dy, const bf16* o, const std::int32_t* row_of_pair,
                              const float* weight, std::int64_t pairs, int k, int d) {
  const std::int64_t p = std::int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (p >= pairs) return;
  const int lane = int(threadIdx.x & 31);
  const bf16* g = dy + (p / k) * d;
  const std::int64_t row = row_of_pair[p];
  if (row < 0) {  // dropped: no gradient through its weight
    if ((threadIdx.x & 31) == 0) dweight[p] = 0;
    return;
  }
  float dot = 0;
  for (int c = lane * kVec; c < d; c += 32 * kVec) {
    float a[8], b[8];
    unpack8(load8(g + c), a);
    unpack8(detail::load8_rw(o + row * d + c), b);
#pragma unroll
    for (int q = 0; q < 8; ++q) dot += a[q] * b[q];
  }
  dot = warp_sum(dot);
  if (lane == 0) dweight[p] = dot;
  const float w = weight[p];
  for (int c = lane * kVec; c < d; c += 32 * kVec) {
    float a[8];
    unpack8(load8(g + c), a);
#pragma unroll
    for (int q = 0; q < 8; ++q) a[q] *= w;
    detail::store8(dop + row * d + c, pack8(a));
  }
}

__global__ void __launch_bounds__(32 * kWarps)
    router_backward_kernel(const MoeRouting r, bf16* dlogits, const float* logits, const std::int32_t* expert,
                           const float* dweight, const std::int32_t* seq_counts, MoeLossCoeffs c) {
  const int t = int(blockIdx.x) * kWarps + int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
  if (t >= r.tokens) return;
  const int E = r.experts, k = r.k, b = t / r.seq;
  RowScores x;
  row_scores(r, logits, t, lane, x);
  float ds[kPer] = {};
  // weights' backward: w_j = scale s_j / S (normalize) or scale s_j
  float S = 0, D = 0;
  for (int j = 0; j < k; ++j) {
    const int e = expert[std::int64_t(t) * k + j];
    const float s = score_of(x, e), dw = dweight[std::int64_t(t) * k + j];
    S += s, D += dw * s;
  }
  for (int j = 0; j < k; ++j) {
    const int e = expert[std::int64_t(t) * k + j];
    const float dw = dweight[std::int64_t(t) * k + j];
    const float v = r.normalize ? r.scale * (dw - D / S) / S : r.scale * dw;
#pragma unroll
    for (int i = 0; i < kPer; ++i)
      if (lane + 32 * i == e) ds[i] += v;
  }
  // the load-balancing losses over p
  if (c.aux != 0 || c.seq != 0) {
    float dp[kPer], ssum = 0, dot = 0;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int e = lane + 32 * i;
      dp[i] = 0;
      if (e >= E) continue;
      int total = 0;
      for (int q = 0; q < (r.tokens / r.seq); ++q) total += seq_counts[q * E + e];
      dp[i] = c.aux * float(total) + c.seq * float(seq_counts[b * E + e]);
      ssum += x.s[i];
    }
    if (r.score == MoeScore::softmax) {
#pragma unroll
      for (int i = 0; i < kPer; ++i) ds[i] += dp[i];
    } else {  // p = s / sum s
      ssum = warp_sum(ssum);
#pragma unroll
      for (int i = 0; i < kPer; ++i)
        if (lane + 32 * i < E) dot += dp[i] * x.s[i] / ssum;
      dot = warp_sum(dot);
#pragma unroll
      for (int i = 0; i < kPer; ++i) ds[i] += (dp[i] - dot) / ssum;
    }
  }
  // scores' backward, then the z-loss
  float sd = 0;
  if (r.score == MoeScore::softmax) {
#pragma unroll
    for (int i = 0; i < kPer; ++i)
      if (lane + 32 * i < E) sd += ds[i] * x.s[i];
    sd = warp_sum(sd);
  }
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int e = lane + 32 * i;
    if (e >= E) continue;
    const float s = x.s[i];
    float dl = r.score == MoeScore::softmax ? s * (ds[i] - sd) : ds[i] * s * (1.f - s);
    if (c.z != 0) dl += c.z * 2.f * x.lse * expf(x.l[i] - x.lse);
    dlogits[std::int64_t(t) * E + e] = __float2bfloat16_rn(dl);
  }
}

// Block e: the sums of p over each sequence's tokens for expert e, into psum[b E + e].
__global__ void __launch_bounds__(256) prob_sums_kernel(const MoeRouting r, const float* probs, float* psum) {
  __shared__ float smem[32];
  const int E = r.experts, e = int(blockIdx.x);
  for (int b = 0; b < (r.tokens / r.seq); ++b) {
    float v[1] = {0};
    for (int t = b * r.seq + int(threadIdx.x); t < (b + 1) * r.seq; t += int(blockDim.x))
      v[0] += probs[std::int64_t(t) * E + e];
    detail::block_sum(v, smem);
    if (threadIdx.x == 0) psum[b * E + e] = v[0];
  }
}

__global__ void __launch_bounds__(256) losses_kernel(const MoeRouting r, const std::int32_t* seq_counts,
                                                     const float* psum, const float* lse, double* stats, float* load) {
  __shared__ float smem[3 * 32];
  const int E = r.experts, B = (r.tokens / r.seq);
  const float T = float(r.tokens), S = float(r.seq), K = float(r.k);
  float v[3] = {0, 0, 0};  // aux, seq aux, z sums
  for (int t = int(threadIdx.x); t < r.tokens; t += int(blockDim.x)) v[2] += lse[t] * lse[t];
  for (int e = int(threadIdx.x); e < E; e += int(blockDim.x)) {
    float c = 0, P = 0;
    for (int b = 0; b < B; ++b) {
      const float cb = float(seq_counts[b * E + e]), pb = psum[b * E + e];
      c += cb, P += pb;
      v[1] += cb * float(E) / (K * S) * pb / S;
    }
    v[0] += c * P;
    stats[3 + e] += double(c);
    if (load) load[e] += c;
  }
  detail::block_sum(v, smem);
  if (threadIdx.x == 0) {
    stats[0] += double(v[0]) * E / (double(T) * T * K);
    stats[1] += double(v[1]) / B;
    stats[2] += double(v[2]) / T;
  }
}

unsigned blocks_for(std::int64_t rows) { return unsigned(ceil_div(rows, kWarps)); }

}  // namespace

void check_moe_routing(const MoeRouting& r) {
  TB_REQUIRE(r.experts >= 8 && r.experts <= kMoeMaxExperts && r.experts % 8 == 0,
             str("moe: the CUDA kernels take 8 to ", kMoeMaxExperts, " experts, a multiple of 8; got ", r.experts));
  TB_REQUIRE(r.k >= 1 && r.k <= r.experts && r.k <= 32, str("moe: top_k=", r.k, " must be in [1, min(32, experts)]"));
  TB_REQUIRE(r.tokens >= 1 && r.seq >= 1 && r.tokens % r.seq == 0,
             str("moe: ", r.tokens, " tokens are not whole sequences of ", r.seq));
  TB_REQUIRE(r.capacity >= 0 && (r.capacity > 0 || !r.pad), "moe: padding needs a capacity");
  TB_REQUIRE(r.held >= 0 && r.experts % r.held_experts() == 0,
             str("moe: the held experts (", r.held, ") must divide the ", r.experts, " experts"));
  TB_REQUIRE(r.rows() < (std::int64_t(1) << 31), "moe: too many token pairs for 32-bit row indices");
}

void moe_route(const MoeRouting& r, const float* logits, MoeRouteOut out, cudaStream_t stream) {
  check_moe_routing(r);
  TB_CHECK(
      cudaMemsetAsync(out.seq_counts, 0, sizeof(std::int32_t) * std::size_t((r.tokens / r.seq) * r.experts), stream));
  route_kernel<<<blocks_for(r.tokens), 32 * kWarps, 0, stream>>>(r, logits, out);
  TB_CHECK_LAUNCH();
}

// Scratch ints: the chunk histograms (by the largest expert count the passes group by); with a capacity also the
// first pass's starts and counts [E + 1 + E], keep [pairs], each row's weight [rows] and a 64-bit dropped counter.
std::size_t moe_dispatch_scratch(const MoeRouting& r) {
  const std::int64_t pairs = std::int64_t(r.tokens) * r.k, hist = ceil_div(pairs, kChunk) * r.experts;
  if (r.capacity == 0) return std::size_t(hist);
  MoeRouting first = r;
  first.held = 0, first.pad = false;
  return std::size_t((hist + 2 * r.experts + 1 + pairs + first.rows() + 1) / 2 * 2 + 2);
}

namespace {
// One counting sort of the pairs (kept, when keep is given) by the held expert r groups by.
void dispatch_pass(const MoeRouting& r, const std::int32_t* expert, const std::int32_t* keep, std::int32_t* row_of_pair,
                   std::int32_t* start, std::int32_t* count, std::int32_t* hist, cudaStream_t stream) {
  const int chunks = int(ceil_div(std::int64_t(r.tokens) * r.k, kChunk));
  chunk_hist_kernel<<<unsigned(chunks), 256, 0, stream>>>(r, expert, keep, hist);
  TB_CHECK_LAUNCH();
  dispatch_scan_kernel<<<1, kMoeMaxExperts, 0, stream>>>(r, chunks, hist, start, count);
  TB_CHECK_LAUNCH();
  dispatch_rank_kernel<<<unsigned(chunks), 32, 0, stream>>>(r, expert, keep, hist, row_of_pair);
  TB_CHECK_LAUNCH();
}
}  // namespace

void moe_dispatch(const MoeRouting& r, const std::int32_t* expert, const float* weight, MoeDispatchOut out,
                  cudaStream_t stream) {
  check_moe_routing(r);
  if (r.capacity == 0) {
    dispatch_pass(r, expert, nullptr, out.row_of_pair, out.start, out.count, out.scratch, stream);
    return;
  }
  // By expert first (no padding), each pair's rank in its expert, then the kept pairs by held expert.
  MoeRouting first = r;
  first.held = 0, first.pad = false, first.capacity = 0;
  const std::int64_t pairs = std::int64_t(r.tokens) * r.k;
  std::int32_t* start = out.scratch + ceil_div(pairs, kChunk) * r.experts;
  std::int32_t* count = start + r.experts + 1;
  std::int32_t* keep = count + r.experts;
  auto* w_row = reinterpret_cast<float*>(keep + pairs);
  const std::int64_t used = std::int64_t(reinterpret_cast<std::int32_t*>(w_row + first.rows()) - out.scratch);
  auto* dropped = reinterpret_cast<unsigned long long*>(out.scratch + (used + 1) / 2 * 2);  // 8-byte aligned
  TB_CHECK(cudaMemsetAsync(dropped, 0, sizeof(unsigned long long), stream));
  dispatch_pass(first, expert, nullptr, out.row_of_pair, start, count, out.scratch, stream);
  const unsigned blocks = unsigned(ceil_div(pairs, 256));
  weight_at_row_kernel<<<blocks, 256, 0, stream>>>(out.row_of_pair, weight, pairs, w_row);
  TB_CHECK_LAUNCH();
  capacity_keep_kernel<<<blocks, 256, 0, stream>>>(r, expert, out.row_of_pair, start, count, w_row, keep, dropped);
  TB_CHECK_LAUNCH();
  if (out.dropped) {
    add_count_kernel<<<1, 1, 0, stream>>>(dropped, out.dropped);
    TB_CHECK_LAUNCH();
  }
  dispatch_pass(r, expert, keep, out.row_of_pair, out.start, out.count, out.scratch, stream);
}

void moe_zero_padding(bf16* buf, const std::int32_t* start, const std::int32_t* count, int held, int d,
                      cudaStream_t stream) {
  TB_REQUIRE(d > 0 && d % kVec == 0, str("moe_zero_padding: the width ", d, " must be a positive multiple of 8"));
  zero_padding_kernel<<<dim3(unsigned(held), 16), 128, 0, stream>>>(buf, start, count, d);
  TB_CHECK_LAUNCH();
}

namespace {
void require_width(int d, const char* what) {
  TB_REQUIRE(d > 0 && d % kVec == 0, str(what, ": the width ", d, " must be a positive multiple of 8"));
}
}  // namespace

void moe_permute(bf16* xp, const bf16* x, const std::int32_t* row_of_pair, int n, int k, int d, cudaStream_t stream) {
  require_width(d, "moe_permute");
  const std::int64_t pairs = std::int64_t(n) * k;
  permute_kernel<<<blocks_for(pairs), 32 * kWarps, 0, stream>>>(xp, x, row_of_pair, pairs, k, d);
  TB_CHECK_LAUNCH();
}

void moe_unpermute(bf16* y, const bf16* o, const std::int32_t* row_of_pair, const float* weight, int n, int k, int d,
                   bool accumulate, cudaStream_t stream) {
  require_width(d, "moe_unpermute");
  gather_sum_kernel<<<blocks_for(n), 32 * kWarps, 0, stream>>>(y, o, row_of_pair, weight, n, k, d, accumulate);
  TB_CHECK_LAUNCH();
}

void moe_unpermute_backward(bf16* dop, float* dweight, const bf16* dy, const bf16* o, const std::int32_t* row_of_pair,
                            const float* weight, int n, int k, int d, cudaStream_t stream) {
  require_width(d, "moe_unpermute_backward");
  const std::int64_t pairs = std::int64_t(n) * k;
  unpermute_backward_kernel<<<blocks_for(pairs), 32 * kWarps, 0, stream>>>(dop, dweight, dy, o, row_of_pair, weight,
                                                                           pairs, k, d);
  TB_CHECK_LAUNCH();
}

void moe_permute_backward(bf16* dx, const bf16* dxp, const std::int32_t* row_of_pair, int n, int k, int d,
                          bool accumulate, cudaStream_t stream) {
  require_width(d, "moe_permute_backward");
  gather_sum_kernel<<<blocks_for(n), 32 * kWarps, 0, stream>>>(dx, dxp, row_of_pair, nullptr, n, k, d, accumulate);
  TB_CHECK_LAUNCH();
}

MoeLossCoeffs moe_loss_coefficients(const MoeRouting& r, double aux_loss, double seq_aux_loss, double z_loss,
                                    double grad_scale) {
  const double T = r.tokens, E = r.experts, K = r.k, S = r.seq, B = (r.tokens / r.seq);
  return {float(grad_scale * aux_loss * E / (T * T * K)), float(grad_scale * seq_aux_loss * E / (K * S) / (B * S)),
          float(grad_scale * z_loss / T)};
}

void moe_router_backward(const MoeRouting& r, bf16* dlogits, const float* logits, const std::int32_t* expert,
                         const float* dweight, const std::int32_t* seq_counts, MoeLossCoeffs c, cudaStream_t stream) {
  check_moe_routing(r);
  router_backward_kernel<<<blocks_for(r.tokens), 32 * kWarps, 0, stream>>>(r, dlogits, logits, expert, dweight,
                                                                           seq_counts, c);
  TB_CHECK_LAUNCH();
}

std::size_t moe_losses_scratch(const MoeRouting& r) { return std::size_t((r.tokens / r.seq) * r.experts); }

void moe_losses(const MoeRouting& r, const std::int32_t* seq_counts, const float* probs, const float* lse,
                double* stats, float* scratch, cudaStream_t stream, float* load) {
  check_moe_routing(r);
  prob_sums_kernel<<<unsigned(r.experts), 256, 0, stream>>>(r, probs, scratch);
  TB_CHECK_LAUNCH();
  losses_kernel<<<1, 256, 0, stream>>>(r, seq_counts, scratch, lse, stats, load);
  TB_CHECK_LAUNCH();
}

namespace {
__global__ void __launch_bounds__(kMoeMaxExperts) update_bias_kernel(float* bias, float* load, int E, float rate) {
  __shared__ float smem[32];
  const int e = int(threadIdx.x);
  float v[1] = {e < E ? load[e] : 0.f};
  detail::block_sum(v, smem);  // (the same sum in every thread)
  const float mean = v[0] / float(E);
  if (e < E) {
    const float c = load[e];
    bias[e] += rate * float((c < mean) - (c > mean));
    load[e] = 0;
  }
}
}  // namespace

void moe_update_expert_bias(float* bias, float* load, int experts, float rate, cudaStream_t stream) {
  TB_REQUIRE(experts >= 1 && experts <= kMoeMaxExperts, str("moe_update_expert_bias: ", experts, " experts"));
  update_bias_kernel<<<1, kMoeMaxExperts, 0, stream>>>(bias, load, experts, rate);
  TB_CHECK_LAUNCH();
}

}  // namespace tb::ops
