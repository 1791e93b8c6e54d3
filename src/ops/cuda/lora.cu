// ops/cuda/lora.cu: LoRA's dropout kernels (ops/cuda/lora.h has the formulas). One thread per 8 columns of a row (a
// 16-byte access), the mask of each element recomputed from its index: one division per row, then the counters of
// consecutive elements a stride apart (core/counter_rng.h); columns not a multiple of 8 one element per thread.
#include "ops/cuda/lora.h"

#include <algorithm>

#include "core/counter_rng.h"
#include "ops/cuda/kernel_common.cuh"

namespace tb::ops {
namespace {

struct Mask {
  std::uint64_t base;  // splitmix64 of the step's stream: element i's counter is base + i · kUniformStride
  float p, keep_scale;
  LoraRows r;
  // The mask index of row t's first column, token(t) · cols_full + col0 (32-bit division: a micro-batch has fewer
  // than 2^31 rows).
  __device__ std::uint64_t row_index(std::int64_t t) const {
    const auto seq = std::uint32_t(r.seq), tt = std::uint32_t(t);
    const std::uint32_t b = tt / seq, i = tt - b * seq;
    std::int64_t pos = i;
    if (r.cp > 1) {
      const std::int64_t c = r.seq_full / (2 * r.cp);
      pos = i < c ? r.cp_rank * c + i : (2 * r.cp - 1 - r.cp_rank) * c + (i - c);
    }
    return std::uint64_t(((r.first_sequence + b) * r.seq_full + pos) * r.cols_full + r.col0);
  }
  __device__ float factor_at(std::uint64_t counter) const { return uniform_at(counter) >= p ? keep_scale : 0.f; }
};

__device__ Mask make_mask(std::uint64_t seed, const std::int64_t* step, float p, const LoraRows& r) {
  return {splitmix64(step_stream(seed, std::uint64_t(*step))), p, 1.f / (1.f - p), r};
}

// out[t, j] = in[t, j] * factor (+ out[t, j] when accumulate), for cols a multiple of 8: blocks stride over rows
// (y) and 8-column packs (x); a pack's counters are consecutive, one splitmix64 per element.
template <bool kAccumulate>
__global__ void dropout_kernel(bf16* __restrict__ out, const bf16* __restrict__ in, std::int64_t rows,
                               std::int64_t cols, std::uint64_t seed, const std::int64_t* step, float p, LoraRows r) {
  const Mask m = make_mask(seed, step, p, r);
  const std::int64_t packs = cols / kVec;
  for (std::int64_t t = blockIdx.y; t < rows; t += gridDim.y) {
    const std::uint64_t row = m.row_index(t);
    for (std::int64_t k = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < packs;
         k += std::int64_t(gridDim.x) * blockDim.x) {
      const std::int64_t e = t * cols + k * kVec;
      std::uint64_t counter = m.base + (row + std::uint64_t(k * kVec)) * kUniformStride;
      float v[8], o[8];
      detail::unpack8(detail::load8(in + e), v);
      if (kAccumulate) detail::unpack8(detail::load8_rw(out + e), o);
#pragma unroll
      for (int q = 0; q < 8; ++q, counter += kUniformStride) {
        const float f = v[q] * m.factor_at(counter);
        o[q] = kAccumulate ? o[q] + f : f;
      }
      detail::store8(out + e, detail::pack8(o));
    }
  }
}

// The same for any cols, one element per thread, grid-stride.
template <bool kAccumulate>
__global__ void dropout_any_kernel(bf16* __restrict__ out, const bf16* __restrict__ in, std::int64_t rows,
                                   std::int64_t cols, std::uint64_t seed, const std::int64_t* step, float p,
                                   LoraRows r) {
  const Mask m = make_mask(seed, step, p, r);
  for (std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < rows * cols;
       e += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t t = e / cols, j = e % cols;
    const std::uint64_t counter = m.base + (m.row_index(t) + std::uint64_t(j)) * kUniformStride;
    const float f = __bfloat162float(in[e]) * m.factor_at(counter);
    out[e] = __float2bfloat16_rn(kAccumulate ? __bfloat162float(out[e]) + f : f);
  }
}

unsigned grid(std::int64_t work) { return unsigned(std::clamp<std::int64_t>((work + 255) / 256, 1, 16384)); }

template <bool kAccumulate>
void launch(bf16* out, const bf16* in, std::int64_t rows, std::int64_t cols, const LoraMask& m, cudaStream_t st,
            const char* what) {
  TB_REQUIRE(m.p > 0 && m.p < 1 && m.step && m.rows.seq >= 1 && m.rows.cols_full >= m.rows.col0 + cols &&
                 rows < (std::int64_t(1) << 31),
             std::string(what) + ": needs 0 < p < 1, a device step, and the rows' map (ops/cuda/lora.h)");
  TB_REQUIRE(reinterpret_cast<std::uintptr_t>(out) % 16 == 0 && reinterpret_cast<std::uintptr_t>(in) % 16 == 0,
             std::string(what) + ": tensors must be 16-byte aligned");
  if (rows * cols == 0) return;
  if (cols % kVec == 0) {
    const unsigned gx = grid(cols / kVec);
    const auto gy = unsigned(std::clamp<std::int64_t>(16384 / gx, 1, std::min<std::int64_t>(rows, 65535)));
    dropout_kernel<kAccumulate><<<dim3(gx, gy), 256, 0, st>>>(out, in, rows, cols, m.seed, m.step, m.p, m.rows);
  } else {
    dropout_any_kernel<kAccumulate><<<grid(rows * cols), 256, 0, st>>>(out, in, rows, cols, m.seed, m.step, m.p,
                                                                        m.rows);
  }
  TB_CHECK_LAUNCH();
}

}  // namespace

void lora_dropout(bf16* xd, const bf16* x, std::int64_t rows, std::int64_t cols, const LoraMask& m,
                  cudaStream_t stream) {
  launch<false>(xd, x, rows, cols, m, stream, "lora_dropout");
}

void lora_dropout_add(bf16* dx, const bf16* t, std::int64_t rows, std::int64_t cols, const LoraMask& m,
                      cudaStream_t stream) {
  launch<true>(dx, t, rows, cols, m, stream, "lora_dropout_add");
}

}  // namespace tb::ops
