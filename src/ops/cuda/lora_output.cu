// ops/cuda/lora_output.cu: the output side of LoRA's adapters in one read of dy (ops/cuda/lora.h has the formulas):
//   dz_k[t, i] = Σ_o dy_k[t, o] B_k[o, i]        dB_k[o, i] = scale · Σ_t dy_k[t, o] z_k[t, i]
// A block takes 8 warps' columns of one adapter (warp_cols each) and a chunk of rows. Each 16-row tile of a warp's dy
// arrives in shared memory through a three-stage cp.async pipeline and is read twice with ldmatrix: as dz's A
// fragments (dy [t x o]) and, transposed, as dB's (dy^T [o x t]); B_k's fragments stay in registers, z_k's come from
// global memory (every warp reads the same rows).
// The sums over a block's columns (dz) are added across its warps in warp order, over its rows (dB) kept per warp
// until the chunk ends; both go out as fp32 partials (dz per column block, dB per chunk), and a second kernel adds
// them in order: the same result every run. Fragment layouts: ops/cuda/mma_sync.cuh (g = lane / 4, q = lane % 4).
#include <algorithm>

#include "ops/cuda/kernel_common.cuh"
#include "ops/cuda/lora.h"
#include "ops/cuda/mma_sync.cuh"

namespace tb::ops {
namespace {

constexpr int kWarps = 8, kThreads = 32 * kWarps;
constexpr int kStages = 3;  // dy tiles in flight per warp (cp.async into shared memory)
constexpr int kSlots = 3 * 132;  // blocks in one wave: three per SM of an H100 or H200 (below)

// A warp's columns: within 85 registers (three blocks per SM), dB's sums being warp_cols x r per warp.
constexpr int warp_cols(int r) { return r == 8 ? 64 : 32; }
constexpr int block_cols(int r) { return kWarps * warp_cols(r); }

// Where each adapter's blocks and partial sums are: blocks [first[k], first[k + 1]) of the grid's x, `chunk` rows per
// grid y; ws: dz partials [blocks_k][rows][r] from dz_at[k], dB partials [chunks][cols_k][r] from db_at[k].
struct Plan {
  int chunk = 0, chunks = 0;
  int first[LoraOutputs::kMax + 1] = {};
  std::int64_t dz_at[LoraOutputs::kMax] = {}, db_at[LoraOutputs::kMax] = {}, floats = 0;
};

// Rows per chunk: as many chunks as fit the column blocks into one wave of kSlots blocks (equal blocks: no tail),
// each of at least 64 rows. A fixed number, not the device's: the same sums, in the same order, on any GPU. Fewer
// chunks write fewer partial sums of dB (2 r / chunk of dy's bytes; dz's: 2 r / block_cols).
Plan plan(const LoraOutputs& g, std::int64_t rows) {
  Plan p;
  const int bc = block_cols(g.r);
  for (int k = 0; k < g.count; ++k) p.first[k + 1] = p.first[k] + int(detail::ceil_div(g.cols[k], bc));
  const std::int64_t split = std::max<std::int64_t>(1, kSlots / std::max(p.first[g.count], 1));
  p.chunk = int(std::max<std::int64_t>(64, detail::ceil_div(detail::ceil_div(rows, split), 16) * 16));
  p.chunks = int(detail::ceil_div(rows, p.chunk));
  for (int k = 0; k < g.count; ++k) {
    p.dz_at[k] = p.floats;
    p.floats += std::int64_t(p.first[k + 1] - p.first[k]) * rows * g.r;
    p.db_at[k] = p.floats;
    p.floats += std::int64_t(p.chunks) * g.cols[k] * g.r;
  }
  return p;
}

// Adapter k's view (selected with constant indices: the kernel parameters stay out of local memory).
struct One {
  std::int64_t col0 = 0, cols = 0, dz_at = 0, db_at = 0;
  int first = 0, blocks = 0;
  const unsigned short *b = nullptr, *z = nullptr;
  bf16* dz = nullptr;
  void* grad = nullptr;
};
__device__ __forceinline__ One select(const LoraOutputs& g, const Plan& p, int k) {
  One o;
#pragma unroll
  for (int j = 0; j < LoraOutputs::kMax; ++j)
    if (j == k) {
      o.col0 = g.col0[j], o.cols = g.cols[j], o.dz_at = p.dz_at[j], o.db_at = p.db_at[j];
      o.first = p.first[j], o.blocks = p.first[j + 1] - p.first[j];
      o.b = reinterpret_cast<const unsigned short*>(g.b[j]), o.z = reinterpret_cast<const unsigned short*>(g.z[j]);
      o.dz = g.dz[j], o.grad = g.grad[j];
    }
  return o;
}

template <int kR>
struct OutShared {
  static constexpr int kStride = warp_cols(kR) + 8;  // staged rows apart: ldmatrix's 8 rows hit distinct banks
  bf16 stage[kWarps][kStages][16 * kStride];
  float part[2][kWarps][16][kR];
};

// 16 bytes from global to shared memory, asynchronously (zeros when !valid: nothing read).
__device__ __forceinline__ void copy16(void* smem, const void* gmem, bool valid) {
  const auto d = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void copy_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void copy_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

template <int kR>
__global__ void __launch_bounds__(kThreads, 3) out_grad_kernel(LoraOutputs g, Plan p, const bf16* __restrict__ dy,
                                                               std::int64_t rows, std::int64_t ld,
                                                               float* __restrict__ ws) {
  constexpr int kN = kR / 8, kWc = warp_cols(kR), kS = kWc / 16, kV = kWc / 16;  // kV: 16-byte copies per lane
  constexpr int kStride = OutShared<kR>::kStride;
  extern __shared__ __align__(16) unsigned char smem[];
  auto& sh = *reinterpret_cast<OutShared<kR>*>(smem);
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31, g8 = lane >> 2, q = lane & 3;
  int k = 0;
#pragma unroll
  for (int j = 1; j < LoraOutputs::kMax; ++j) k += j < g.count && int(blockIdx.x) >= p.first[j];
  const One a = select(g, p, k);
  const int cb = int(blockIdx.x) - a.first;
  const std::int64_t cols = a.cols, c0 = std::int64_t(cb) * kWarps * kWc + std::int64_t(warp) * kWc;
  const std::int64_t t_begin = std::int64_t(blockIdx.y) * p.chunk,
                     t_end = std::min<std::int64_t>(rows, t_begin + p.chunk);
  const bf16* dyk = dy + a.col0;
  const unsigned short *b = a.b, *z = a.z;

  // lane's part of a tile: row lane / 2, kV 8-column packs from column (lane % 2) · kWc / 2; tile i in stage i % 3
  const int lr = lane >> 1, lc = (lane & 1) * (kWc / 2);
  auto fetch = [&](std::int64_t t0, int stage) {  // (always a group, empty past the chunk: uniform counting)
    const std::int64_t t = t0 + lr;
#pragma unroll
    for (int j = 0; j < kV; ++j) {
      const std::int64_t o = c0 + lc + 8 * j;
      const bool valid = t < t_end && o < cols;
      copy16(sh.stage[warp][stage] + lr * kStride + lc + 8 * j, valid ? dyk + t * ld + o : dyk, valid);
    }
    copy_commit();
  };
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) fetch(t_begin + 16 * i, i);

  // dz's B fragments: (o = c0 + 16 s + 2q (+1) (+8), i = 8 n + g8) of B_k [cols, r]; zero past cols (a multiple of 8)
  std::uint32_t bz[kS][kN][2];
#pragma unroll
  for (int s = 0; s < kS; ++s)
#pragma unroll
    for (int n = 0; n < kN; ++n)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const std::int64_t o = c0 + 16 * s + 2 * q + 8 * h;
        const std::int64_t e = o * kR + 8 * n + g8;
        bz[s][n][h] = o < cols ? std::uint32_t(__ldg(b + e)) | (std::uint32_t(__ldg(b + e + kR)) << 16) : 0u;
      }
  float db[kS][kN][4] = {};
  int stage = 0, buf = 0;
  for (std::int64_t t0 = t_begin; t0 < t_end; t0 += 16, buf ^= 1, stage = stage == kStages - 1 ? 0 : stage + 1) {
    fetch(t0 + 16 * (kStages - 1), stage == 0 ? kStages - 1 : stage - 1);  // into the stage read last tile
    copy_wait<kStages - 1>();  // this tile's group done (this lane's copies) ...
    __syncwarp();              // ... and the other lanes'
    const bf16* st = sh.stage[warp][stage];
    // z_k's B fragments for dB: (t = t0 + 2q (+1) (+8), i = 8 n + g8)
    std::uint32_t bzt[kN][2];
#pragma unroll
    for (int n = 0; n < kN; ++n)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const std::int64_t t = t0 + 2 * q + 8 * h, e = t * kR + 8 * n + g8;
        bzt[n][h] = (t < t_end ? std::uint32_t(__ldg(z + e)) : 0u) |
                    (t + 1 < t_end ? std::uint32_t(__ldg(z + e + kR)) << 16 : 0u);
      }
    float dz[kN][4] = {};
#pragma unroll
    for (int s = 0; s < kS; ++s) {
      std::uint32_t a[4], at[4];
      // A of dz: matrices (t 0-7 | 8-15) x (o 0-7 | 8-15) by lane / 8 = 0..3 as (t 0, o 0), (t 8, o 0), (t 0, o 8), ..
      detail::ldmatrix_x4(a, st + (lane & 15) * kStride + 16 * s + 8 * (lane >> 4));
      // A of dB (dy^T, o x t): (t 0, o 0), (t 0, o 8), (t 8, o 0), (t 8, o 8), each transposed
      detail::ldmatrix_x4_t(at, st + (8 * (lane >> 4) + (lane & 7)) * kStride + 16 * s + 8 * ((lane >> 3) & 1));
#pragma unroll
      for (int n = 0; n < kN; ++n) {
        detail::mma(dz[n], a, bz[s][n][0], bz[s][n][1]);
        detail::mma(db[s][n], at, bzt[n][0], bzt[n][1]);
      }
    }
#pragma unroll
    for (int n = 0; n < kN; ++n) {
      sh.part[buf][warp][g8][8 * n + 2 * q] = dz[n][0], sh.part[buf][warp][g8][8 * n + 2 * q + 1] = dz[n][1];
      sh.part[buf][warp][g8 + 8][8 * n + 2 * q] = dz[n][2], sh.part[buf][warp][g8 + 8][8 * n + 2 * q + 1] = dz[n][3];
    }
    // One barrier a tile: the warps' dz sums are complete, the other buffer's readers have finished, and every lane
    // has read this stage before the next tile's fetch refills it.
    __syncthreads();
    float* out = ws + a.dz_at + (std::int64_t(cb) * rows + t0) * kR;
    for (int e = int(threadIdx.x); e < 16 * kR; e += kThreads) {
      const int i = e / kR, c = e % kR;
      float s = 0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) s += sh.part[buf][w][i][c];
      if (t0 + i < t_end) out[e] = s;
    }
  }
  copy_wait<0>();  // (the empty groups past the chunk)
  // dB's C tiles: (o = c0 + 16 s + g8 (+ 8), i = 8 n + 2q, + 1)
  float* out = ws + a.db_at + (std::int64_t(blockIdx.y) * cols) * kR;
#pragma unroll
  for (int s = 0; s < kS; ++s)
#pragma unroll
    for (int n = 0; n < kN; ++n)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const std::int64_t o = c0 + 16 * s + g8 + 8 * h;
        if (o < cols)
          *reinterpret_cast<float2*>(out + o * kR + 8 * n + 2 * q) = make_float2(db[s][n][2 * h], db[s][n][2 * h + 1]);
      }
}

// Adapter blockIdx.y's dz = Σ over column blocks of its partials (bf16), dB = scale · Σ over chunks (+ dB unless
// overwrite).
template <class G>
__global__ void out_finish_kernel(LoraOutputs g, Plan p, const float* __restrict__ ws, std::int64_t rows, float scale,
                                  bool overwrite) {
  const One a = select(g, p, int(blockIdx.y));
  const std::int64_t nz = rows * g.r, total = nz + a.cols * g.r;
  for (std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += std::int64_t(gridDim.x) * blockDim.x) {
    if (e < nz) {
      a.dz[e] = __float2bfloat16_rn(detail::ordered_sum(ws + a.dz_at + e, a.blocks, nz));
      continue;
    }
    const std::int64_t f = e - nz;
    const float db = scale * detail::ordered_sum(ws + a.db_at + f, p.chunks, a.cols * g.r);
    detail::write_or_add(static_cast<G*>(a.grad) + f, db, overwrite);
  }
}

}  // namespace

bool lora_out_fusable(int r, std::int64_t col0, std::int64_t cols, std::int64_t ld) {
  return (r == 8 || r == 16 || r == 32) && cols > 0 && col0 % 8 == 0 && cols % 8 == 0 && ld % 8 == 0;
}

std::size_t lora_out_grad_workspace_bytes(const LoraOutputs& g, std::int64_t rows) {
  return std::size_t(plan(g, rows).floats) * sizeof(float);
}

void lora_out_grad(const LoraOutputs& g, const bf16* dy, std::int64_t rows, std::int64_t ld, float scale,
                   DType grad_type, bool overwrite, void* workspace, cudaStream_t stream) {
  TB_REQUIRE(g.count >= 1 && g.count <= LoraOutputs::kMax,
             detail::str("lora_out_grad: needs 1 to ", LoraOutputs::kMax, " adapters (got ", g.count, ")"));
  for (int k = 0; k < g.count; ++k) {
    TB_REQUIRE(lora_out_fusable(g.r, g.col0[k], g.cols[k], ld) && g.col0[k] + g.cols[k] <= ld,
               detail::str("lora_out_grad: adapter ", k, " needs rank 8, 16 or 32 and its columns (", g.col0[k], " + ",
                           g.cols[k], " of ", ld, ") multiples of 8 within the row"));
    TB_REQUIRE(g.b[k] && g.z[k] && g.dz[k] && g.grad[k], detail::str("lora_out_grad: adapter ", k, " lacks a tensor"));
  }
  TB_REQUIRE(detail::aligned16(dy), "lora_out_grad: dy must be 16-byte aligned");
  TB_REQUIRE(grad_type == DType::f32 || grad_type == DType::bf16, "lora_out_grad: dB must be fp32 or bf16");
  TB_REQUIRE(workspace || rows == 0, "lora_out_grad: needs its workspace (lora_out_grad_workspace_bytes)");
  if (rows == 0) return;
  const Plan p = plan(g, rows);
  auto* ws = static_cast<float*>(workspace);
  const dim3 grid(unsigned(p.first[g.count]), unsigned(p.chunks));
  const auto launch = [&]<int kR>() {
    constexpr int bytes = sizeof(OutShared<kR>);  // (over the 48 KiB default: allowed once; a process per GPU)
    static const bool sized = cudaFuncSetAttribute(out_grad_kernel<kR>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   bytes) == cudaSuccess;
    TB_REQUIRE(sized, detail::str("lora_out_grad: the GPU refuses ", bytes, " bytes of shared memory per block"));
    out_grad_kernel<kR><<<grid, kThreads, bytes, stream>>>(g, p, dy, rows, ld, ws);
  };
  if (g.r == 8) launch.template operator()<8>();
  if (g.r == 16) launch.template operator()<16>();
  if (g.r == 32) launch.template operator()<32>();
  TB_CHECK_LAUNCH();
  std::int64_t most = 0;
  for (int k = 0; k < g.count; ++k) most = std::max(most, (rows + g.cols[k]) * g.r);
  const dim3 fgrid(unsigned(std::clamp<std::int64_t>(detail::ceil_div(most, 256), 1, 1024)), unsigned(g.count));
  if (grad_type == DType::f32)
    out_finish_kernel<float><<<fgrid, 256, 0, stream>>>(g, p, ws, rows, scale, overwrite);
  else
    out_finish_kernel<bf16><<<fgrid, 256, 0, stream>>>(g, p, ws, rows, scale, overwrite);
  TB_CHECK_LAUNCH();
}

}  // namespace tb::ops
