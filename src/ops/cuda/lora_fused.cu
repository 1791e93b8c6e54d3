// ops/cuda/lora_fused.cu: LoRA's adapter products with their dropout drawn inside (ops/cuda/lora.h has the formulas):
// bf16 tensor-core MMAs (mma.sync m16n8k16, fp32 sums) on fragments loaded straight from global memory. Every 32-bit
// fragment register of x (or of the product that dx receives) holds two neighbouring columns of one row, so one
// dropout hash (core/counter_rng.h dropout_pair_bits) masks both; the rows' keys are drawn once per block into shared
// memory. Fragment layouts (PTX ISA, m16n8k16 with g = lane / 4, q = lane % 4):
//   A [16 x 16] row-major:  a0 (g, 2q..2q+1)  a1 (g + 8, 2q..)  a2 (g, 2q + 8..)  a3 (g + 8, 2q + 8..)
//   B [16 x 8]  col-major:  b0 (2q..2q+1, g)  b1 (2q + 8.., g)
//   C [16 x 8]  fp32:       c0 c1 (g, 2q and 2q + 1)  c2 c3 (g + 8, 2q and 2q + 1)
#include <algorithm>

#include "ops/cuda/kernel_common.cuh"
#include "ops/cuda/lora.h"

namespace tb::ops {
namespace {

constexpr int kWarps = 8, kThreads = 32 * kWarps;
constexpr int kRowsPerChunk = 256;  // lora_grad_a's and lora_input_grad's rows per block

// Adapters per launch: their fragments within the register budget (K · ceil(r / 16) <= 4).
constexpr int adapters_per_launch(int r) { return r <= 16 ? 4 : 2; }

__device__ __forceinline__ void mma(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ std::uint32_t ld32(const bf16* p) { return __ldg(reinterpret_cast<const unsigned*>(p)); }
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

// The keys of rows t0 + i (i < n) of each adapter k < count into keys[k * n + i].
__device__ void draw_keys(std::uint64_t* keys, const LoraGroup& g, const Drop& d, std::int64_t t0, int n,
                          std::int64_t rows) {
  for (int e = int(threadIdx.x); e < g.count * n; e += int(blockDim.x)) {
    const std::int64_t t = t0 + e % n;
    keys[e] = t < rows ? d.key(g.seed[e / n], t) : 0;
  }
  __syncthreads();
}

// z_k = dropout_k(x) A_k^T. A block per 16 rows; warp w takes the 16-column steps w, w + 8, ... of every adapter (M:
// the rows, N: 8 of A's rows, K: 16 columns); the warps' sums added in shared memory in warp order.
template <int kR>
__global__ void __launch_bounds__(kThreads) down_kernel(LoraGroup g, const bf16* __restrict__ x, std::int64_t rows,
                                                        std::int64_t cols, Drop d) {
  constexpr int kK = adapters_per_launch(kR), kN = kR / 8;
  __shared__ std::uint64_t keys[kK * 16];
  __shared__ float part[kWarps][16][kK * kR];
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31, g8 = lane >> 2, q = lane & 3;
  const std::int64_t t0 = std::int64_t(blockIdx.x) * 16;
  draw_keys(keys, g, d, t0, 16, rows);
  const bool ok0 = t0 + g8 < rows, ok1 = t0 + g8 + 8 < rows;
  const bf16* x0 = x + (t0 + g8) * cols + 2 * q;
  const bf16* x1 = x0 + 8 * cols;
  float acc[kK][kN][4] = {};
  for (std::int64_t j0 = 16 * std::int64_t(warp); j0 < cols; j0 += 16 * kWarps) {
    const std::uint32_t raw[4] = {ok0 ? ld32(x0 + j0) : 0u, ok1 ? ld32(x1 + j0) : 0u, ok0 ? ld32(x0 + j0 + 8) : 0u,
                                  ok1 ? ld32(x1 + j0 + 8) : 0u};
    const auto pair = std::uint32_t((d.rows.col0 + j0) >> 1) + std::uint32_t(q);
#pragma unroll
    for (int k = 0; k < kK; ++k) {
      if (k >= g.count) break;
      const std::uint64_t k0 = keys[k * 16 + g8], k1 = keys[k * 16 + g8 + 8];
      const std::uint32_t a[4] = {d.apply(raw[0], k0, pair), d.apply(raw[1], k1, pair), d.apply(raw[2], k0, pair + 4),
                                  d.apply(raw[3], k1, pair + 4)};
      const bf16* ak = g.a[k] + j0 + 2 * q + std::int64_t(g8) * cols;
#pragma unroll
      for (int n = 0; n < kN; ++n) {
        const bf16* an = ak + std::int64_t(8 * n) * cols;
        mma(acc[k][n], a, ld32(an), ld32(an + 8));
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kK; ++k)
#pragma unroll
    for (int n = 0; n < kN; ++n) {
      const int c = k * kR + 8 * n + 2 * q;
      part[warp][g8][c] = acc[k][n][0], part[warp][g8][c + 1] = acc[k][n][1];
      part[warp][g8 + 8][c] = acc[k][n][2], part[warp][g8 + 8][c + 1] = acc[k][n][3];
    }
  __syncthreads();
  const int width = g.count * kR;
  for (int e = int(threadIdx.x); e < 16 * width; e += kThreads) {
    const int i = e / width, c = e % width;
    float s = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s += part[w][i][c];
    if (t0 + i < rows) g.z[c / kR][(t0 + i) * kR + c % kR] = __float2bfloat16_rn(s);
  }
}

// dA_k's partial sums over a chunk of kRowsPerChunk rows: ws[chunk][k][i][j] = Σ_t dz_k[t, i] dropout_k(x)[t, j].
// A block per chunk and 256 columns, warp w on 32 of them (M: A's rows, 16 at a time; N: 8 columns; K: 16 rows). The
// 16 columns of two N tiles are interleaved (tile 0 holds the even columns, tile 1 the odd), so a thread's register
// of x (two neighbouring columns of one row) feeds both tiles after one hash.
template <int kR>
__global__ void __launch_bounds__(kThreads) grad_a_kernel(LoraGroup g, const bf16* __restrict__ x, std::int64_t rows,
                                                          std::int64_t cols, Drop d, float* __restrict__ ws) {
  constexpr int kK = adapters_per_launch(kR), kM = (kR + 15) / 16;
  __shared__ std::uint64_t keys[kK * kRowsPerChunk];
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31, g8 = lane >> 2, q = lane & 3;
  const std::int64_t t_begin = std::int64_t(blockIdx.y) * kRowsPerChunk,
                     t_end = std::min<std::int64_t>(rows, t_begin + kRowsPerChunk);
  draw_keys(keys, g, d, t_begin, kRowsPerChunk, rows);
  const std::int64_t c0 = std::int64_t(blockIdx.x) * 256 + 32 * warp;  // the warp's 32 columns
  if (c0 >= cols) return;
  float acc[kK][kM][4][4] = {};
  const auto pair0 = std::uint32_t((d.rows.col0 + c0) >> 1) + std::uint32_t(g8);  // + 8 for the second 16 columns
  for (std::int64_t t0 = t_begin; t0 < t_end; t0 += 16) {
    const int tr[4] = {2 * q, 2 * q + 1, 2 * q + 8, 2 * q + 9};  // the rows of b0 (two) and b1 (two), from t0
    bool ok[4];
    std::uint32_t raw[2][4];
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      ok[v] = t0 + tr[v] < t_end;
#pragma unroll
      for (int h = 0; h < 2; ++h) raw[h][v] = ok[v] ? ld32(x + (t0 + tr[v]) * cols + c0 + 16 * h + 2 * g8) : 0u;
    }
#pragma unroll
    for (int k = 0; k < kK; ++k) {
      if (k >= g.count) break;
      std::uint64_t key[4];
#pragma unroll
      for (int v = 0; v < 4; ++v) key[v] = keys[k * kRowsPerChunk + int(t0 - t_begin) + tr[v]];
      std::uint32_t b[4][2];  // N tiles: even and odd columns of the first 16, then of the second 16
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        std::uint32_t m[4];
#pragma unroll
        for (int v = 0; v < 4; ++v) m[v] = d.apply(raw[h][v], key[v], pair0 + 8 * h);
        b[2 * h][0] = lows(m[0], m[1]), b[2 * h][1] = lows(m[2], m[3]);
        b[2 * h + 1][0] = highs(m[0], m[1]), b[2 * h + 1][1] = highs(m[2], m[3]);
      }
      const bf16* dz = g.z[k];
#pragma unroll
      for (int mt = 0; mt < kM; ++mt) {
        std::uint32_t a[4];  // dz^T: (A's row i, row t) = dz[t, i]
#pragma unroll
        for (int half = 0; half < 2; ++half) {  // a0 / a2: rows 2q, 2q + 1; a1 / a3: A's rows + 8
          const int i0 = 16 * mt + g8, i1 = i0 + 8;
          const std::int64_t r0 = t0 + tr[2 * half], r1 = t0 + tr[2 * half + 1];
          const std::uint32_t u0 = ok[2 * half] && i0 < kR ? ld16(dz + r0 * kR + i0) : 0u,
                              u1 = ok[2 * half + 1] && i0 < kR ? ld16(dz + r1 * kR + i0) : 0u,
                              w0 = ok[2 * half] && i1 < kR ? ld16(dz + r0 * kR + i1) : 0u,
                              w1 = ok[2 * half + 1] && i1 < kR ? ld16(dz + r1 * kR + i1) : 0u;
          a[2 * half] = u0 | (u1 << 16), a[2 * half + 1] = w0 | (w1 << 16);
        }
#pragma unroll
        for (int n = 0; n < 4; ++n) mma(acc[k][mt][n], a, b[n][0], b[n][1]);
      }
    }
  }
  // C tile n = 2 h + odd: (A's row g8 (+ 8), tile column 2q (+ 1)) is column c0 + 16 h + 2 (2q (+ 1)) + odd.
  const int count = g.count;
#pragma unroll
  for (int k = 0; k < kK; ++k) {
    if (k >= count) break;
    float* out = ws + ((std::int64_t(blockIdx.y) * count + k) * kR) * cols + c0;
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
    float s = 0;
    for (std::int64_t c = 0; c < chunks; ++c) s += ws[c * total + e];
    G* da = static_cast<G*>(g.grad[e / per_adapter]) + e % per_adapter;
    const float v = scale * s + (overwrite ? 0.f : float(*da));
    *da = G(v);
  }
}

// dx += scale · Σ_k dropout_k'(dz_k A_k). A block per kRowsPerChunk rows and 256 columns, warp w on 32 of them (M:
// 16 rows, N: 8 columns, K: 16 of A's rows, zero past r), its B fragments of A_k loaded once; each C pair (two
// neighbouring columns of one row) masked by one hash, the adapters' sum added to dx in one read and write.
template <int kR>
__global__ void __launch_bounds__(kThreads) input_grad_kernel(bf16* __restrict__ dx, LoraGroup g, std::int64_t rows,
                                                              std::int64_t cols, Drop d, float scale) {
  constexpr int kK = adapters_per_launch(kR), kM = (kR + 15) / 16;
  __shared__ std::uint64_t keys[kK * kRowsPerChunk];
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31, g8 = lane >> 2, q = lane & 3;
  const std::int64_t t_begin = std::int64_t(blockIdx.y) * kRowsPerChunk,
                     t_end = std::min<std::int64_t>(rows, t_begin + kRowsPerChunk);
  draw_keys(keys, g, d, t_begin, kRowsPerChunk, rows);
  const std::int64_t c0 = std::int64_t(blockIdx.x) * 256 + 32 * warp;
  if (c0 >= cols) return;
  std::uint32_t b[kK][kM][4][2];  // A_k rows 16 mt + 2q (+1) and + 8, column c0 + 8 n + g8
#pragma unroll
  for (int k = 0; k < kK; ++k)
#pragma unroll
    for (int mt = 0; mt < kM; ++mt)
#pragma unroll
      for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int i = 16 * mt + 2 * q + 8 * h;
          const bf16* p = g.a[std::min(k, g.count - 1)] + std::int64_t(i) * cols + c0 + 8 * n + g8;
          b[k][mt][n][h] = i < kR ? ld16(p) | (ld16(p + cols) << 16) : 0u;
        }
  const auto pair0 = std::uint32_t((d.rows.col0 + c0) >> 1) + std::uint32_t(q);  // + 4 n for tile n
  for (std::int64_t t0 = t_begin; t0 < t_end; t0 += 16) {
    const bool ok0 = t0 + g8 < t_end, ok1 = t0 + g8 + 8 < t_end;
    float sum[4][4] = {};
#pragma unroll
    for (int k = 0; k < kK; ++k) {
      if (k >= g.count) break;
      const bf16* dz0 = g.z[k] + (t0 + g8) * kR + 2 * q;
      const bf16* dz1 = dz0 + 8 * kR;
      const std::uint64_t k0 = keys[k * kRowsPerChunk + int(t0 - t_begin) + g8],
                          k1 = keys[k * kRowsPerChunk + int(t0 - t_begin) + g8 + 8];
      float c[4][4] = {};
#pragma unroll
      for (int mt = 0; mt < kM; ++mt) {
        const int i = 16 * mt;  // A frag: dz rows g8 / g8 + 8, columns i + 2q (+1) and i + 8 + 2q (+1)
        const std::uint32_t a[4] = {ok0 ? ld32(dz0 + i) : 0u, ok1 ? ld32(dz1 + i) : 0u,
                                    ok0 && i + 8 < kR ? ld32(dz0 + i + 8) : 0u,
                                    ok1 && i + 8 < kR ? ld32(dz1 + i + 8) : 0u};
#pragma unroll
        for (int n = 0; n < 4; ++n) mma(c[n], a, b[k][mt][n][0], b[k][mt][n][1]);
      }
#pragma unroll
      for (int n = 0; n < 4; ++n) {
        const float2 f0 = d.factors(k0, pair0 + 4 * n), f1 = d.factors(k1, pair0 + 4 * n);
        sum[n][0] += c[n][0] * f0.x, sum[n][1] += c[n][1] * f0.y;
        sum[n][2] += c[n][2] * f1.x, sum[n][3] += c[n][3] * f1.y;
      }
    }
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (!(h ? ok1 : ok0)) continue;
        auto* p = reinterpret_cast<unsigned*>(dx + (t0 + g8 + 8 * h) * cols + c0 + 8 * n + 2 * q);
        const unsigned v = *p;
        *p = detail::pack2(__uint_as_float(v << 16) + scale * sum[n][2 * h],
                           __uint_as_float(v & 0xffff0000u) + scale * sum[n][2 * h + 1]);
      }
  }
}

Drop make_drop(const LoraMask& m) {
  return {m.rows, m.step, dropout_threshold(m.p), float(dropout_keep_scale(m.p))};
}

void check(const LoraGroup& g, std::int64_t rows, std::int64_t cols, const LoraMask& m, const char* what) {
  TB_REQUIRE(g.count >= 1 && g.count <= LoraGroup::kMax && lora_fusable(g.r, cols, m.rows.col0),
             detail::str(what, ": needs 1 to ", LoraGroup::kMax, " adapters of rank 8, 16 or 32 on a multiple of 32 columns "
                 "from an even col0 (got ", g.count, " of rank ", g.r, ", ", cols, " columns from ", m.rows.col0, ")"));
  TB_REQUIRE(m.p > 0 && m.p < 1 && m.step && m.rows.seq >= 1 && m.rows.cols_full >= m.rows.col0 + cols &&
                 rows < (std::int64_t(1) << 31),
             detail::str(what, ": needs 0 < p < 1, a device step, and the rows' map (ops/cuda/lora.h)"));
  for (int k = 0; k < g.count; ++k)
    TB_REQUIRE(g.a[k] && g.z[k], detail::str(what, ": adapter ", k, " has no A or z"));
}

// f(sub-group of at most adapters_per_launch(r) adapters) with kR = r.
template <class F>
void by_rank(const LoraGroup& g, F&& f) {
  const auto run = [&]<int kR>() {
    for (int k0 = 0; k0 < g.count; k0 += adapters_per_launch(kR)) {
      LoraGroup s = g;
      s.count = std::min(g.count - k0, adapters_per_launch(kR));
      for (int k = 0; k < s.count; ++k) s.a[k] = g.a[k0 + k], s.seed[k] = g.seed[k0 + k], s.z[k] = g.z[k0 + k],
                                        s.grad[k] = g.grad[k0 + k];
      f.template operator()<kR>(s);
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
  if (rows == 0) return;
  by_rank(g, [&]<int kR>(const LoraGroup& s) {
    down_kernel<kR><<<unsigned(detail::ceil_div(rows, 16)), kThreads, 0, stream>>>(s, x, rows, cols, make_drop(m));
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
  TB_REQUIRE(grad_type == DType::f32 || grad_type == DType::bf16, "lora_grad_a: dA must be fp32 or bf16");
  TB_REQUIRE(workspace || rows == 0, "lora_grad_a: needs its workspace (lora_grad_a_workspace_bytes)");
  if (rows == 0) return;
  by_rank(g, [&]<int kR>(const LoraGroup& s) {
    for (int k = 0; k < s.count; ++k) TB_REQUIRE(s.grad[k], "lora_grad_a: adapter without dA");
    auto* ws = static_cast<float*>(workspace);
    grad_a_kernel<kR><<<chunk_grid(rows, cols), kThreads, 0, stream>>>(s, x, rows, cols, make_drop(m), ws);
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
                     float scale, cudaStream_t stream) {
  check(g, rows, cols, m, "lora_input_grad");
  if (rows == 0) return;
  by_rank(g, [&]<int kR>(const LoraGroup& s) {
    input_grad_kernel<kR><<<chunk_grid(rows, cols), kThreads, 0, stream>>>(dx, s, rows, cols, make_drop(m), scale);
    TB_CHECK_LAUNCH();
  });
}

}  // namespace tb::ops
