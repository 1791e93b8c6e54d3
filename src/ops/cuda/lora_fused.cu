// ops/cuda/lora_fused.cu: LoRA's adapter products with their dropout drawn inside (ops/cuda/lora.h has the formulas):
// bf16 tensor-core MMAs (mma.sync m16n8k16, fp32 sums) on fragments of x, A and dx loaded straight from global memory
// (a block's dz staged in shared memory). Every 32-bit fragment register of x (or of the product that dx receives)
// holds two neighbouring columns of one row, so one dropout hash (core/counter_rng.h dropout_pair_bits) masks both;
// the rows' keys are drawn once per block into shared memory. Fragment layouts: ops/cuda/mma_sync.cuh (g = lane / 4,
// q = lane % 4).
#include <algorithm>

#include "ops/cuda/kernel_common.cuh"
#include "ops/cuda/lora.h"
#include "ops/cuda/mma_sync.cuh"

namespace tb::ops {
namespace {

constexpr int kWarps = 8, kThreads = 32 * kWarps;
constexpr int kRowsPerChunk = 256;  // lora_grad_a's and lora_input_grad's rows per block

// Adapters per launch: their fragments within the register budget (K · ceil(r / 16) <= 4).
constexpr int adapters_per_launch(int r) { return r <= 16 ? 4 : 2; }

using detail::mma;

__device__ __forceinline__ std::uint32_t ld32(const bf16* p) { return __ldg(reinterpret_cast<const unsigned*>(p)); }
__device__ __forceinline__ uint2 ld64(const bf16* p) { return __ldg(reinterpret_cast<const uint2*>(p)); }
__device__ __forceinline__ std::uint32_t ld16(const bf16* p) {
  return __ldg(reinterpret_cast<const unsigned short*>(p));
}
// The low (high) halves of two registers, as one.
__device__ __forceinline__ std::uint32_t lows(std::uint32_t a, std::uint32_t b) { return __byte_perm(a, b, 0x5410); }
__device__ __forceinline__ std::uint32_t highs(std::uint32_t a, std::uint32_t b) { return __byte_perm(a, b, 0x7632); }

struct Drop {
  LoraRows rows;
  const std::int64_t* step;
  std::uint32_t threshold;
  float keep_scale;
  __device__ std::uint64_t key(std::uint64_t seed, std::int64_t t) const {
    return dropout_row_key(step_stream(seed, std::uint64_t(*step)), std::uint64_t(lora_token(rows, t)));
  }
  // The factors of the two columns of pair `pair` (of the whole) in the row keyed `key`: keep_scale or 0.
  __device__ float2 factors(std::uint64_t key, std::uint32_t pair) const {
    const std::uint32_t bits = dropout_pair_bits(key, pair);
    return {(bits & 0xFFFFu) >= threshold ? keep_scale : 0.f, (bits >> 16) >= threshold ? keep_scale : 0.f};
  }
  // A register of two bf16 columns, dropped and scaled (rounded to bf16, as a dropped copy would be).
  __device__ std::uint32_t apply(std::uint32_t v, std::uint64_t key, std::uint32_t pair) const {
    const float2 f = factors(key, pair);
    return detail::pack2(__uint_as_float(v << 16) * f.x, __uint_as_float(v & 0xffff0000u) * f.y);
  }
};

// The keys of rows t0 + i (i < n) of each adapter k < kC into keys[k * n + i].
template <int kC>
__device__ void draw_keys(std::uint64_t* keys, const LoraGroup& g, const Drop& d, std::int64_t t0, int n,
                          std::int64_t rows) {
  for (int e = int(threadIdx.x); e < kC * n; e += int(blockDim.x)) {
    const std::int64_t t = t0 + e % n;
    keys[e] = t < rows ? d.key(g.seed[e / n], t) : 0;
  }
}

// dz_k's rows [t0, t0 + kRowsPerChunk) of each adapter into shared memory (zero past `rows`), 16 bytes at a time.
template <int kR, int kC>
__device__ void stage_dz(bf16 (*dz)[kRowsPerChunk * kR], const LoraGroup& g, std::int64_t t0, std::int64_t rows) {
  constexpr int kPacks = kRowsPerChunk * kR / 8;
  const std::int64_t valid = std::min<std::int64_t>(kRowsPerChunk, rows - t0) * kR / 8;
  for (int e = int(threadIdx.x); e < kC * kPacks; e += int(blockDim.x)) {
    const int k = e / kPacks, v = e % kPacks;
    reinterpret_cast<uint4*>(dz[k])[v] =
        v < valid ? __ldg(reinterpret_cast<const uint4*>(g.z[k] + t0 * kR) + v) : make_uint4(0, 0, 0, 0);
  }
}

// A block of lora_grad_a or lora_input_grad: rows [t_begin, t_end) of chunk blockIdx.y, their keys and dz_k in shared
// memory, and the calling warp's 32 columns from c0 (of block blockIdx.x's 256).
template <int kR, int kC>
struct ChunkShared {
  std::uint64_t keys[kC * kRowsPerChunk];
  __align__(16) bf16 dz[kC][kRowsPerChunk * kR];
};
struct Chunk {
  std::int64_t t_begin, t_end, c0;
};
template <int kR, int kC>
__device__ Chunk open_chunk(ChunkShared<kR, kC>& sh, const LoraGroup& g, const Drop& d, std::int64_t rows) {
  const std::int64_t t_begin = std::int64_t(blockIdx.y) * kRowsPerChunk;
  draw_keys<kC>(sh.keys, g, d, t_begin, kRowsPerChunk, rows);
  stage_dz<kR, kC>(sh.dz, g, t_begin, rows);
  __syncthreads();
  return {t_begin, std::min<std::int64_t>(rows, t_begin + kRowsPerChunk),
          std::int64_t(blockIdx.x) * 256 + 32 * (int(threadIdx.x) >> 5)};
}

// z_k = dropout_k(x) A_k^T. A block per 16 rows; warp w takes the 16-column steps w, w + 8, ... (M: the rows, N: 8 of
// A's rows, K: 16 columns, ordered so that a thread's two K pairs are four neighbouring columns: one 8-byte load of x
// and of A each), x loaded two steps ahead and A one; the warps' sums added in shared memory in warp order.
template <int kR, int kC>
__global__ void __launch_bounds__(kThreads) down_kernel(LoraGroup g, const bf16* __restrict__ x, std::int64_t rows,
                                                        std::int64_t cols, Drop d) {
  constexpr int kN = kR / 8;
  __shared__ std::uint64_t keys[kC * 16];
  __shared__ float part[kWarps][16][kC * kR];
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31, g8 = lane >> 2, q = lane & 3;
  const std::int64_t t0 = std::int64_t(blockIdx.x) * 16;
  draw_keys<kC>(keys, g, d, t0, 16, rows);
  __syncthreads();
  const bool ok0 = t0 + g8 < rows, ok1 = t0 + g8 + 8 < rows;
  const bf16* x0 = x + (t0 + g8) * cols + 4 * q;
  const bf16* x1 = x0 + 8 * cols;
  const bf16* a0[kC];  // A_k row g8, column 4 q; + 8 n rows for tile n
#pragma unroll
  for (int k = 0; k < kC; ++k) a0[k] = g.a[k] + std::int64_t(g8) * cols + 4 * q;
  std::uint64_t key0[kC], key1[kC];
#pragma unroll
  for (int k = 0; k < kC; ++k) key0[k] = keys[k * 16 + g8], key1[k] = keys[k * 16 + g8 + 8];
  const uint2 zero = make_uint2(0, 0);
  constexpr std::int64_t kStep = 16 * kWarps;
  auto load_x = [&](std::int64_t j0, uint2 (&v)[2]) {
    v[0] = j0 < cols && ok0 ? ld64(x0 + j0) : zero, v[1] = j0 < cols && ok1 ? ld64(x1 + j0) : zero;
  };
  auto load_b = [&](std::int64_t j0, uint2 (&b)[kC][kN]) {
#pragma unroll
    for (int k = 0; k < kC; ++k)
#pragma unroll
      for (int n = 0; n < kN; ++n) b[k][n] = j0 < cols ? ld64(a0[k] + std::int64_t(8 * n) * cols + j0) : zero;
  };
  // x two steps ahead, A one
  float acc[kC][kN][4] = {};
  uint2 v[2], v1[2], b[kC][kN];
  std::int64_t j0 = 16 * std::int64_t(warp);
  load_x(j0, v), load_b(j0, b), load_x(j0 + kStep, v1);
  for (; j0 < cols; j0 += kStep) {
    uint2 v2[2], bn[kC][kN];
    load_x(j0 + 2 * kStep, v2), load_b(j0 + kStep, bn);
    const auto pair = std::uint32_t((d.rows.col0 + j0) >> 1) + std::uint32_t(2 * q);
#pragma unroll
    for (int k = 0; k < kC; ++k) {
      const std::uint32_t a[4] = {d.apply(v[0].x, key0[k], pair), d.apply(v[1].x, key1[k], pair),
                                  d.apply(v[0].y, key0[k], pair + 1), d.apply(v[1].y, key1[k], pair + 1)};
#pragma unroll
      for (int n = 0; n < kN; ++n) mma(acc[k][n], a, b[k][n].x, b[k][n].y);
    }
    v[0] = v1[0], v[1] = v1[1], v1[0] = v2[0], v1[1] = v2[1];
#pragma unroll
    for (int k = 0; k < kC; ++k)
#pragma unroll
      for (int n = 0; n < kN; ++n) b[k][n] = bn[k][n];
  }
#pragma unroll
  for (int k = 0; k < kC; ++k)
#pragma unroll
    for (int n = 0; n < kN; ++n) {
      const int c = k * kR + 8 * n + 2 * q;
      part[warp][g8][c] = acc[k][n][0], part[warp][g8][c + 1] = acc[k][n][1];
      part[warp][g8 + 8][c] = acc[k][n][2], part[warp][g8 + 8][c + 1] = acc[k][n][3];
    }
  __syncthreads();
  constexpr int kWidth = kC * kR;
  for (int e = int(threadIdx.x); e < 16 * kWidth; e += kThreads) {
    const int i = e / kWidth, c = e % kWidth;
    float s = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s += part[w][i][c];
    if (t0 + i < rows) g.z[c / kR][(t0 + i) * kR + c % kR] = __float2bfloat16_rn(s);
  }
}

// dA_k's partial sums over a chunk of kRowsPerChunk rows: ws[chunk][k][i][j] = Σ_t dz_k[t, i] dropout_k(x)[t, j].
// A block per chunk and 256 columns, warp w on 32 of them (M: A's rows, 16 at a time; N: 8 columns; K: 16 rows), the
// chunk's dz in shared memory, the next step's x loaded before this one's products. The 16 columns of two N tiles
// are interleaved (tile 0 holds the even columns, tile 1 the odd), so a thread's register of x (two neighbouring
// columns of one row) feeds both tiles after one hash.
template <int kR, int kC>
__global__ void __launch_bounds__(kThreads) grad_a_kernel(LoraGroup g, const bf16* __restrict__ x, std::int64_t rows,
                                                          std::int64_t cols, Drop d, float* __restrict__ ws) {
  constexpr int kM = (kR + 15) / 16;
  __shared__ ChunkShared<kR, kC> sh;
  const Chunk ch = open_chunk(sh, g, d, rows);
  if (ch.c0 >= cols) return;
  const int lane = int(threadIdx.x) & 31, g8 = lane >> 2, q = lane & 3;
  const auto pair0 = std::uint32_t((d.rows.col0 + ch.c0) >> 1) + std::uint32_t(g8);  // + 8 for the second 16 columns
  const int tr[4] = {2 * q, 2 * q + 1, 2 * q + 8, 2 * q + 9};  // the rows of b0 (two) and b1 (two), from t0
  auto load = [&](std::int64_t t0, std::uint32_t (&raw)[2][4]) {
#pragma unroll
    for (int v = 0; v < 4; ++v)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        raw[h][v] = t0 + tr[v] < ch.t_end ? ld32(x + (t0 + tr[v]) * cols + ch.c0 + 16 * h + 2 * g8) : 0u;
  };
  float acc[kC][kM][4][4] = {};
  std::uint32_t raw[2][4];
  load(ch.t_begin, raw);
  for (std::int64_t t0 = ch.t_begin; t0 < ch.t_end; t0 += 16) {
    std::uint32_t next[2][4] = {};
    if (t0 + 16 < ch.t_end) load(t0 + 16, next);
    const int lt = int(t0 - ch.t_begin);
#pragma unroll
    for (int k = 0; k < kC; ++k) {
      std::uint32_t b[4][2];  // N tiles: even and odd columns of the first 16, then of the second 16
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        std::uint32_t m[4];
#pragma unroll
        for (int v = 0; v < 4; ++v) m[v] = d.apply(raw[h][v], sh.keys[k * kRowsPerChunk + lt + tr[v]], pair0 + 8 * h);
        b[2 * h][0] = lows(m[0], m[1]), b[2 * h][1] = lows(m[2], m[3]);
        b[2 * h + 1][0] = highs(m[0], m[1]), b[2 * h + 1][1] = highs(m[2], m[3]);
      }
      const auto* dz = reinterpret_cast<const unsigned short*>(sh.dz[k]);
#pragma unroll
      for (int mt = 0; mt < kM; ++mt) {
        std::uint32_t a[4];  // dz^T: (A's row i, row t) = dz[t, i]; a0 / a2 rows 2q, 2q + 1 (+ 8), a1 / a3 A's row + 8
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int i0 = 16 * mt + g8, i1 = i0 + 8, r0 = (lt + tr[2 * half]) * kR, r1 = (lt + tr[2 * half + 1]) * kR;
          a[2 * half] = std::uint32_t(dz[r0 + i0]) | (std::uint32_t(dz[r1 + i0]) << 16);
          a[2 * half + 1] = i1 < kR ? std::uint32_t(dz[r0 + i1]) | (std::uint32_t(dz[r1 + i1]) << 16) : 0u;
        }
#pragma unroll
        for (int n = 0; n < 4; ++n) mma(acc[k][mt][n], a, b[n][0], b[n][1]);
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int v = 0; v < 4; ++v) raw[h][v] = next[h][v];
  }
  // C tile n = 2 h + odd: (A's row g8 (+ 8), tile column 2q (+ 1)) is column c0 + 16 h + 2 (2q (+ 1)) + odd.
#pragma unroll
  for (int k = 0; k < kC; ++k) {
    float* out = ws + ((std::int64_t(blockIdx.y) * g.count + k) * kR) * cols + ch.c0;
#pragma unroll
    for (int mt = 0; mt < kM; ++mt)
#pragma unroll
      for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = 16 * mt + g8 + (e >= 2 ? 8 : 0), col = 16 * (n / 2) + 2 * (2 * q + (e & 1)) + n % 2;
          if (i < kR) out[std::int64_t(i) * cols + col] = acc[k][mt][n][e];
        }
  }
}

// dA_k = scale · Σ over chunks (in order) of ws, written or added.
template <class G>
__global__ void grad_a_finish_kernel(LoraGroup g, const float* __restrict__ ws, std::int64_t chunks,
                                     std::int64_t per_adapter, float scale, bool overwrite) {
  const std::int64_t total = per_adapter * g.count;
  for (std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += std::int64_t(gridDim.x) * blockDim.x) {
    detail::write_or_add(static_cast<G*>(g.grad[e / per_adapter]) + e % per_adapter,
                         scale * detail::ordered_sum(ws + e, chunks, total), overwrite);
  }
}

// dx += scale · Σ_k dropout_k'(dz_k A_k) (add; else dx = that, dx not read). A block per kRowsPerChunk rows and 256
// columns, warp w on 32 of them (M: 16 rows, N: 8 columns, K: 16 of A's rows, zero past r), the chunk's dz in shared
// memory, A_k's B fragments loaded once. Columns are ordered so that tiles 2p and 2p + 1 give a thread four
// neighbouring columns of a row (column 16 p + 4 (n / 2) + 2 s + n % 2 of tile 2p + s's column n): dx is read (one
// row tile ahead) and written 8 bytes at a time, and each C pair (two neighbouring columns) is masked by one hash.
template <int kR, int kC>
__global__ void __launch_bounds__(kThreads) input_grad_kernel(bf16* __restrict__ dx, LoraGroup g, std::int64_t rows,
                                                              std::int64_t cols, Drop d, float scale, bool add) {
  constexpr int kM = (kR + 15) / 16;
  __shared__ ChunkShared<kR, kC> sh;
  const Chunk ch = open_chunk(sh, g, d, rows);
  if (ch.c0 >= cols) return;
  const int lane = int(threadIdx.x) & 31, g8 = lane >> 2, q = lane & 3;
  std::uint32_t b[kC][kM][4][2];  // A_k rows 16 mt + 2q (+1) and + 8, the tile's column g8
#pragma unroll
  for (int k = 0; k < kC; ++k)
#pragma unroll
    for (int mt = 0; mt < kM; ++mt)
#pragma unroll
      for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int i = 16 * mt + 2 * q + 8 * h, col = 16 * (n / 2) + 4 * (g8 / 2) + 2 * (n % 2) + g8 % 2;
          const bf16* p = g.a[k] + std::int64_t(i) * cols + ch.c0 + col;
          b[k][mt][n][h] = i < kR ? ld16(p) | (ld16(p + cols) << 16) : 0u;
        }
  const auto pair0 = std::uint32_t((d.rows.col0 + ch.c0) >> 1) + std::uint32_t(2 * q);  // + 8 p + s for tile 2p + s
  bf16* dx0 = dx + ch.c0 + 4 * q;  // + row · cols + 16 p
  const uint2 zero = make_uint2(0, 0);
  auto load = [&](std::int64_t t0, uint2 (&v)[2][2]) {  // [row g8 / g8 + 8][p]; zero when dx is written
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int p = 0; p < 2; ++p)
        v[h][p] = add && t0 + g8 + 8 * h < ch.t_end
                      ? *reinterpret_cast<const uint2*>(dx0 + (t0 + g8 + 8 * h) * cols + 16 * p)
                      : zero;
  };
  uint2 cur[2][2];
  load(ch.t_begin, cur);
  for (std::int64_t t0 = ch.t_begin; t0 < ch.t_end; t0 += 16) {
    uint2 next[2][2] = {{zero, zero}, {zero, zero}};
    if (t0 + 16 < ch.t_end) load(t0 + 16, next);
    const int lt = int(t0 - ch.t_begin);
    float sum[4][4] = {};
#pragma unroll
    for (int k = 0; k < kC; ++k) {
      const std::uint64_t k0 = sh.keys[k * kRowsPerChunk + lt + g8], k1 = sh.keys[k * kRowsPerChunk + lt + g8 + 8];
      const bf16* dz0 = sh.dz[k] + (lt + g8) * kR + 2 * q;
      const bf16* dz1 = dz0 + 8 * kR;
      float c[4][4] = {};
#pragma unroll
      for (int mt = 0; mt < kM; ++mt) {
        const int i = 16 * mt;  // A frag: dz rows g8 / g8 + 8, columns i + 2q (+1) and i + 8 + 2q (+1)
        const std::uint32_t a[4] = {*reinterpret_cast<const unsigned*>(dz0 + i),
                                    *reinterpret_cast<const unsigned*>(dz1 + i),
                                    i + 8 < kR ? *reinterpret_cast<const unsigned*>(dz0 + i + 8) : 0u,
                                    i + 8 < kR ? *reinterpret_cast<const unsigned*>(dz1 + i + 8) : 0u};
#pragma unroll
        for (int n = 0; n < 4; ++n) mma(c[n], a, b[k][mt][n][0], b[k][mt][n][1]);
      }
#pragma unroll
      for (int n = 0; n < 4; ++n) {
        const std::uint32_t pair = pair0 + 8 * (n / 2) + n % 2;
        const float2 f0 = d.factors(k0, pair), f1 = d.factors(k1, pair);
        sum[n][0] += c[n][0] * f0.x, sum[n][1] += c[n][1] * f0.y;
        sum[n][2] += c[n][2] * f1.x, sum[n][3] += c[n][3] * f1.y;
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (t0 + g8 + 8 * h >= ch.t_end) continue;
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        const uint2 v = cur[h][p];
        const float* s0 = sum[2 * p] + 2 * h;  // columns 4q, 4q + 1 (tile 2p), 4q + 2, 4q + 3 (tile 2p + 1)
        const float* s1 = sum[2 * p + 1] + 2 * h;
        uint2 o;
        o.x = detail::pack2(__uint_as_float(v.x << 16) + scale * s0[0],
                            __uint_as_float(v.x & 0xffff0000u) + scale * s0[1]);
        o.y = detail::pack2(__uint_as_float(v.y << 16) + scale * s1[0],
                            __uint_as_float(v.y & 0xffff0000u) + scale * s1[1]);
        *reinterpret_cast<uint2*>(dx0 + (t0 + g8 + 8 * h) * cols + 16 * p) = o;
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int p = 0; p < 2; ++p) cur[h][p] = next[h][p];
  }
}

Drop make_drop(const LoraMask& m) {
  return {m.rows, m.step, dropout_threshold(m.p), float(dropout_keep_scale(m.p))};
}

void check(const LoraGroup& g, std::int64_t rows, std::int64_t cols, const LoraMask& m, const char* what) {
  TB_REQUIRE(g.count >= 1 && g.count <= LoraGroup::kMax && lora_fusable(g.r, cols, m.rows.col0),
             detail::str(what, ": needs 1 to ", LoraGroup::kMax,
                         " adapters of rank 8, 16 or 32 on a multiple of 32 columns from an even col0 (got ", g.count,
                         " of rank ", g.r, ", ", cols, " columns from ", m.rows.col0, ")"));
  check_lora_mask(m, rows, cols, what);
  for (int k = 0; k < g.count; ++k)
    TB_REQUIRE(g.a[k] && g.z[k] && detail::aligned_to(g.a[k], 8) && detail::aligned16(g.z[k]),
               detail::str(what, ": adapter ", k, " needs A 8-byte and z 16-byte aligned"));
}

// f.operator()<kR, kC>(sub-group) for each sub-group of at most adapters_per_launch(r) adapters (kC of them).
template <class F>
void by_rank(const LoraGroup& g, F&& f) {
  const auto run = [&]<int kR>() {
    constexpr int kPer = adapters_per_launch(kR);
    for (int k0 = 0; k0 < g.count; k0 += kPer) {
      LoraGroup s = g;
      s.count = std::min(g.count - k0, kPer);
      for (int k = 0; k < s.count; ++k)
        s.a[k] = g.a[k0 + k], s.seed[k] = g.seed[k0 + k], s.z[k] = g.z[k0 + k], s.grad[k] = g.grad[k0 + k];
      if (s.count == 1) f.template operator()<kR, 1>(s);
      if constexpr (kPer >= 2)
        if (s.count == 2) f.template operator()<kR, 2>(s);
      if constexpr (kPer >= 3)
        if (s.count == 3) f.template operator()<kR, 3>(s);
      if constexpr (kPer >= 4)
        if (s.count == 4) f.template operator()<kR, 4>(s);
    }
  };
  if (g.r == 8) run.template operator()<8>();
  if (g.r == 16) run.template operator()<16>();
  if (g.r == 32) run.template operator()<32>();
}

dim3 chunk_grid(std::int64_t rows, std::int64_t cols) {
  return dim3(unsigned(detail::ceil_div(cols, 256)), unsigned(detail::ceil_div(rows, kRowsPerChunk)));
}

}  // namespace

bool lora_fusable(int r, std::int64_t cols, std::int64_t col0) {
  return (r == 8 || r == 16 || r == 32) && cols > 0 && cols % 32 == 0 && col0 % 2 == 0;
}

void lora_down(const LoraGroup& g, const bf16* x, std::int64_t rows, std::int64_t cols, const LoraMask& m,
               cudaStream_t stream) {
  check(g, rows, cols, m, "lora_down");
  TB_REQUIRE(detail::aligned_to(x, 8), "lora_down: x must be 8-byte aligned");
  if (rows == 0) return;
  by_rank(g, [&]<int kR, int kC>(const LoraGroup& s) {
    down_kernel<kR, kC><<<unsigned(detail::ceil_div(rows, 16)), kThreads, 0, stream>>>(s, x, rows, cols, make_drop(m));
    TB_CHECK_LAUNCH();
  });
}

std::size_t lora_grad_a_workspace_bytes(std::int64_t rows, std::int64_t cols, int count, int r) {
  return std::size_t(detail::ceil_div(rows, kRowsPerChunk) * std::min(count, adapters_per_launch(r)) * r * cols) *
         sizeof(float);
}

void lora_grad_a(const LoraGroup& g, const bf16* x, std::int64_t rows, std::int64_t cols, const LoraMask& m,
                 float scale, DType grad_type, bool overwrite, void* workspace, cudaStream_t stream) {
  check(g, rows, cols, m, "lora_grad_a");
  TB_REQUIRE(detail::aligned_to(x, 8), "lora_grad_a: x must be 8-byte aligned");
  TB_REQUIRE(grad_type == DType::f32 || grad_type == DType::bf16, "lora_grad_a: dA must be fp32 or bf16");
  TB_REQUIRE(workspace || rows == 0, "lora_grad_a: needs its workspace (lora_grad_a_workspace_bytes)");
  if (rows == 0) return;
  by_rank(g, [&]<int kR, int kC>(const LoraGroup& s) {
    for (int k = 0; k < s.count; ++k) TB_REQUIRE(s.grad[k], "lora_grad_a: adapter without dA");
    auto* ws = static_cast<float*>(workspace);
    grad_a_kernel<kR, kC><<<chunk_grid(rows, cols), kThreads, 0, stream>>>(s, x, rows, cols, make_drop(m), ws);
    TB_CHECK_LAUNCH();
    const std::int64_t per_adapter = std::int64_t(kR) * cols, chunks = detail::ceil_div(rows, kRowsPerChunk);
    const auto blocks = unsigned(std::clamp<std::int64_t>(detail::ceil_div(per_adapter * s.count, 256), 1, 4096));
    if (grad_type == DType::f32)
      grad_a_finish_kernel<float><<<blocks, 256, 0, stream>>>(s, ws, chunks, per_adapter, scale, overwrite);
    else
      grad_a_finish_kernel<bf16><<<blocks, 256, 0, stream>>>(s, ws, chunks, per_adapter, scale, overwrite);
    TB_CHECK_LAUNCH();
  });
}

void lora_input_grad(bf16* dx, const LoraGroup& g, std::int64_t rows, std::int64_t cols, const LoraMask& m,
                     float scale, bool add, cudaStream_t stream) {
  check(g, rows, cols, m, "lora_input_grad");
  TB_REQUIRE(detail::aligned_to(dx, 8), "lora_input_grad: dx must be 8-byte aligned");
  if (rows == 0) return;
  by_rank(g, [&]<int kR, int kC>(const LoraGroup& s) {  // (a second launch adds to what the first wrote)
    input_grad_kernel<kR, kC>
        <<<chunk_grid(rows, cols), kThreads, 0, stream>>>(dx, s, rows, cols, make_drop(m), scale, add);
    TB_CHECK_LAUNCH();
    add = true;
  });
}

}  // namespace tb::ops
