// ops/cuda/lora.cu: LoRA's dropout kernels (ops/cuda/lora.h has the formulas). One thread per 8 columns of a row (a
// 16-byte access), the mask of each element recomputed: a 64-bit key per row, then a 32-bit hash per pair of columns
// (core/counter_rng.h's dropout draws); columns not a multiple of 8 one element per thread.
#include "ops/cuda/lora.h"

#include <algorithm>

#include "core/counter_rng.h"
#include "ops/cuda/kernel_common.cuh"

namespace tb::ops {
namespace {

struct Mask {
  std::uint64_t base;  // dropout_key_base of the step's stream
  std::uint32_t threshold;
  float keep_scale;
  LoraRows r;
  // The dropout key of row t (core/counter_rng.h's dropout_row_key of its token).
  __device__ std::uint64_t row_key(std::int64_t t) const {
    return dropout_row_key_from(base, std::uint64_t(lora_token(r, t)));
  }
  __device__ float factor(std::uint32_t bits) const { return bits >= threshold ? keep_scale : 0.f; }
};

Mask make_mask(const LoraMask& m) {
  return {0, dropout_threshold(m.p), float(dropout_keep_scale(m.p)), m.rows};
}

// out[t, j] = in[t, j] * factor (+ out[t, j] when accumulate), for cols a multiple of 8 and an even col0: blocks
// stride over rows (y) and 8-column packs (x); a pack's 16-bit draws come from four column-pair hashes.
template <bool kAccumulate>
__global__ void dropout_kernel(bf16* __restrict__ out, const bf16* __restrict__ in, std::int64_t rows,
                               std::int64_t cols, std::uint64_t seed, const std::int64_t* step, Mask m) {
  m.base = dropout_key_base(step_stream(seed, std::uint64_t(*step)));
  const std::int64_t packs = cols / kVec;
  for (std::int64_t t = blockIdx.y; t < rows; t += gridDim.y) {
    const std::uint64_t key = m.row_key(t);
    for (std::int64_t k = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < packs;
         k += std::int64_t(gridDim.x) * blockDim.x) {
      const std::int64_t e = t * cols + k * kVec;
      const auto pair0 = std::uint32_t((m.r.col0 + k * kVec) >> 1);
      float v[8], o[8];
      detail::unpack8(detail::load8(in + e), v);
      if (kAccumulate) detail::unpack8(detail::load8_rw(out + e), o);
#pragma unroll
      for (int q = 0; q < 8; q += 2) {
        const std::uint32_t bits = dropout_pair_bits(key, pair0 + std::uint32_t(q / 2));
        const float f0 = v[q] * m.factor(bits & 0xFFFFu), f1 = v[q + 1] * m.factor(bits >> 16);
        o[q] = kAccumulate ? o[q] + f0 : f0;
        o[q + 1] = kAccumulate ? o[q + 1] + f1 : f1;
      }
      detail::store8(out + e, detail::pack8(o));
    }
  }
}

// The same for any cols and col0, one element per thread, grid-stride.
template <bool kAccumulate>
__global__ void dropout_any_kernel(bf16* __restrict__ out, const bf16* __restrict__ in, std::int64_t rows,
                                   std::int64_t cols, std::uint64_t seed, const std::int64_t* step, Mask m) {
  m.base = dropout_key_base(step_stream(seed, std::uint64_t(*step)));
  for (std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < rows * cols;
       e += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t t = e / cols, j = e % cols;
    const float f = __bfloat162float(in[e]) * m.factor(dropout_bits(m.row_key(t), std::uint64_t(m.r.col0 + j)));
    out[e] = __float2bfloat16_rn(kAccumulate ? __bfloat162float(out[e]) + f : f);
  }
}

unsigned grid(std::int64_t work) { return unsigned(std::clamp<std::int64_t>((work + 255) / 256, 1, 16384)); }

template <bool kAccumulate>
void launch(bf16* out, const bf16* in, std::int64_t rows, std::int64_t cols, const LoraMask& m, cudaStream_t st,
            const char* what) {
  check_lora_mask(m, rows, cols, what);
  TB_REQUIRE(detail::aligned16(out) && detail::aligned16(in), std::string(what) + ": tensors must be 16-byte aligned");
  if (rows * cols == 0) return;
  const Mask mk = make_mask(m);
  if (cols % kVec == 0 && m.rows.col0 % 2 == 0) {
    const unsigned gx = grid(cols / kVec);
    const auto gy = unsigned(std::clamp<std::int64_t>(16384 / gx, 1, std::min<std::int64_t>(rows, 65535)));
    dropout_kernel<kAccumulate><<<dim3(gx, gy), 256, 0, st>>>(out, in, rows, cols, m.seed, m.step, mk);
  } else {
    dropout_any_kernel<kAccumulate><<<grid(rows * cols), 256, 0, st>>>(out, in, rows, cols, m.seed, m.step, mk);
  }
  TB_CHECK_LAUNCH();
}

}  // namespace

void check_lora_mask(const LoraMask& m, std::int64_t rows, std::int64_t cols, const char* what) {
  TB_REQUIRE(m.p > 0 && m.p < 1 && m.step && m.rows.seq >= 1 && m.rows.cols_full >= m.rows.col0 + cols &&
                 rows < (std::int64_t(1) << 31),
             std::string(what) + ": needs 0 < p < 1, a device step, and the rows' map (ops/cuda/lora.h)");
}

void lora_dropout(bf16* xd, const bf16* x, std::int64_t rows, std::int64_t cols, const LoraMask& m,
                  cudaStream_t stream) {
  launch<false>(xd, x, rows, cols, m, stream, "lora_dropout");
}

void lora_dropout_add(bf16* dx, const bf16* t, std::int64_t rows, std::int64_t cols, const LoraMask& m,
                      cudaStream_t stream) {
  launch<true>(dx, t, rows, cols, m, stream, "lora_dropout_add");
}

}  // namespace tb::ops
