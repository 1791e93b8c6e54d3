// ops/cuda/lora.cu: LoRA's dropout kernels (ops/cuda/lora.h has the formulas). One thread per 8 elements (a
// 16-byte access; the tail one by one), grid-stride; the mask of each element recomputed from its index.
#include "ops/cuda/lora.h"

#include <algorithm>

#include "core/counter_rng.h"
#include "ops/cuda/kernel_common.cuh"

namespace tb::ops {
namespace {

struct Mask {
  std::uint64_t stream;
  float p, keep_scale;
  LoraRows r;
  __device__ std::int64_t token(std::int64_t t) const {
    const std::int64_t b = t / r.seq, i = t % r.seq;
    std::int64_t pos = i;
    if (r.cp > 1) {
      const std::int64_t c = r.seq_full / (2 * r.cp);
      pos = i < c ? r.cp_rank * c + i : (2 * r.cp - 1 - r.cp_rank) * c + (i - c);
    }
    return (r.first_sequence + b) * r.seq_full + pos;
  }
  // the factor of element (t, j): keep / (1 - p)
  __device__ float factor(std::int64_t t, std::int64_t j) const {
    const auto i = std::uint64_t(token(t) * r.cols_full + r.col0 + j);
    return uniform_value(stream, i) >= p ? keep_scale : 0.f;
  }
};

// out[e] = in[e] * factor (+ out[e] when accumulate), element e = t * cols + j.
template <bool kAccumulate>
__global__ void dropout_kernel(bf16* __restrict__ out, const bf16* __restrict__ in, std::int64_t rows,
                               std::int64_t cols, std::uint64_t seed, const std::int64_t* step, float p, LoraRows r) {
  const Mask m{step_stream(seed, std::uint64_t(*step)), p, 1.f / (1.f - p), r};
  const std::int64_t n = rows * cols, packs = n / kVec;
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t k = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < packs + (n % kVec); k += stride) {
    if (k < packs) {
      float v[8], o[8];
      detail::unpack8(detail::load8(in + k * kVec), v);
      if (kAccumulate) detail::unpack8(detail::load8_rw(out + k * kVec), o);
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        const std::int64_t e = k * kVec + q;
        const float f = v[q] * m.factor(e / cols, e % cols);
        o[q] = kAccumulate ? o[q] + f : f;
      }
      detail::store8(out + k * kVec, detail::pack8(o));
    } else {  // the tail
      const std::int64_t e = packs * kVec + (k - packs);
      const float f = __bfloat162float(in[e]) * m.factor(e / cols, e % cols);
      out[e] = __float2bfloat16_rn(kAccumulate ? __bfloat162float(out[e]) + f : f);
    }
  }
}

unsigned grid(std::int64_t work) { return unsigned(std::clamp<std::int64_t>((work + 255) / 256, 1, 16384)); }

template <bool kAccumulate>
void launch(bf16* out, const bf16* in, std::int64_t rows, std::int64_t cols, const LoraMask& m, cudaStream_t st,
            const char* what) {
  TB_REQUIRE(m.p > 0 && m.p < 1 && m.step && m.rows.seq >= 1 && m.rows.cols_full >= m.rows.col0 + cols,
             std::string(what) + ": needs 0 < p < 1, a device step, and the rows' map (ops/cuda/lora.h)");
  TB_REQUIRE(reinterpret_cast<std::uintptr_t>(out) % 16 == 0 && reinterpret_cast<std::uintptr_t>(in) % 16 == 0,
             std::string(what) + ": tensors must be 16-byte aligned");
  if (rows * cols == 0) return;
  dropout_kernel<kAccumulate><<<grid(rows * cols / kVec + kVec), 256, 0, st>>>(out, in, rows, cols, m.seed, m.step,
                                                                              m.p, m.rows);
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
