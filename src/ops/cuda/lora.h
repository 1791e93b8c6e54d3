// ops/cuda/lora.h: the dropout of LoRA's adapters (model/lora.h; model/lora_cuda.h runs the GEMMs), on bf16
// [rows, cols] tensors with dense rows, fp32 arithmetic:
//   lora_dropout       xd[t, j] = x[t, j] · keep(t, j) · s
//   lora_dropout_add   dx[t, j] += t_[t, j] · keep(t, j) · s                (the dropout's backward, accumulated)
//   keep(t, j) = dropout_bits(dropout_row_key(step_stream(seed, *step), token(t)), col0 + j) >= dropout_threshold(p),
//   s = dropout_keep_scale(p) (core/counter_rng.h: the CPU reference's mask, ops/cpu/lora.h), where row t of a
//   micro-batch's `seq` local rows per sequence is
//   token(t) = (first_sequence + t / seq) · seq_full + position(t % seq): with context parallel (cp > 1) rank r holds
//   chunks r and 2 cp - 1 - r of seq_full / (2 cp) tokens each, so position(i) = r c + i (i < c) or
//   (2 cp - 1 - r) c + i - c; else position(i) = i. step: a device int64 (the optimizer step: a captured graph reads
//   each replay's). Bytes: 2 reads / writes of rows x cols bf16 (+ one read of dx); no FLOPs worth counting.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace tb::ops {

struct LoraRows {  // where a micro-batch's rows and columns sit in the step's batch (above)
  std::int64_t first_sequence = 0;
  int seq = 1, seq_full = 1, cp = 1, cp_rank = 0;
  std::int64_t col0 = 0, cols_full = 0;
};

struct LoraMask {
  std::uint64_t seed = 0;           // the adapter's (model::slot_seed(lora seed, A's name))
  const std::int64_t* step = nullptr;  // device
  float p = 0;
  LoraRows rows;
};

void lora_dropout(__nv_bfloat16* xd, const __nv_bfloat16* x, std::int64_t rows, std::int64_t cols, const LoraMask& m,
                  cudaStream_t stream);
void lora_dropout_add(__nv_bfloat16* dx, const __nv_bfloat16* t, std::int64_t rows, std::int64_t cols,
                      const LoraMask& m, cudaStream_t stream);

}  // namespace tb::ops
