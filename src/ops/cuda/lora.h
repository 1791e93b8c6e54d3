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
// The adapters' products with that dropout drawn inside, the dropped input never written (ops/cuda/lora_fused.cu):
// adapters k < count of one linear share its input x [rows, cols], each with its A_k [r, cols], its stream's seed
// and its z_k or dz_k [rows, r] (all dense rows); bf16 tensor-core products, fp32 sums:
//   lora_down         z_k = dropout_k(x) A_k^T
//   lora_grad_a       dA_k = scale · dz_k^T dropout_k(x), written (overwrite) or added (fp32 or bf16 dA_k)
//   lora_input_grad   dx += scale · Σ_k dropout_k'(dz_k A_k)      (dropout_k': the same mask and s; or dx = that,
//                                                                  dx not read, when not `add`)
// Bytes: one read of x (lora_down, lora_grad_a) or a read and a write of dx (lora_input_grad; a write only when it
// writes dx) for all the adapters; FLOPs 2 rows cols r per adapter each. lora_fusable says which shapes they take
// (else the kernels above and GEMMs).
// The output side of a linear's adapters, adapter k on columns [col0_k, col0_k + cols_k) of dy (rows `ld` apart) with
// its B_k [cols_k, r] and the forward's z_k [rows, r] (ops/cuda/lora_output.cu; no dropout on this side):
//   lora_out_grad     dz_k = dy_k B_k (written, bf16);  dB_k = scale · dy_k^T z_k, written (overwrite) or added
// Bytes: one read of the adapters' blocks of dy, plus fp32 partial sums written and read once (4 r / chunk +
// 4 r / 256 or 512 of dy's bytes; a chunk's rows fit the column blocks into one wave); FLOPs 4 rows cols_k r each.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/counter_rng.h"
#include "core/dtype.h"

namespace tb::ops {

struct LoraRows {  // where a micro-batch's rows and columns sit in the step's batch (above)
  std::int64_t first_sequence = 0;
  int seq = 1, seq_full = 1, cp = 1, cp_rank = 0;
  std::int64_t col0 = 0, cols_full = 0;
};

// token(t) above.
TB_HOST_DEVICE inline std::int64_t lora_token(const LoraRows& r, std::int64_t t) {
  const std::int64_t b = t / r.seq, i = t - b * r.seq;
  std::int64_t pos = i;
  if (r.cp > 1) {
    const std::int64_t c = r.seq_full / (2 * r.cp);
    pos = i < c ? r.cp_rank * c + i : (2 * r.cp - 1 - r.cp_rank) * c + (i - c);
  }
  return (r.first_sequence + b) * r.seq_full + pos;
}

struct LoraMask {
  std::uint64_t seed = 0;           // the adapter's (model::slot_seed(lora seed, A's name); a group's own)
  const std::int64_t* step = nullptr;  // device
  float p = 0;
  LoraRows rows;
};

// The adapters of one linear for the fused products (above).
struct LoraGroup {
  static constexpr int kMax = 4;
  int count = 0, r = 0;
  const __nv_bfloat16* a[kMax] = {};
  std::uint64_t seed[kMax] = {};
  __nv_bfloat16* z[kMax] = {};  // z_k (lora_down) or dz_k (lora_grad_a, lora_input_grad)
  void* grad[kMax] = {};        // dA_k (lora_grad_a)
};

// The adapters of one linear on its output side (lora_out_grad).
struct LoraOutputs {
  static constexpr int kMax = 4;
  int count = 0, r = 0;
  std::int64_t col0[kMax] = {}, cols[kMax] = {};
  const __nv_bfloat16* b[kMax] = {};
  const __nv_bfloat16* z[kMax] = {};
  __nv_bfloat16* dz[kMax] = {};
  void* grad[kMax] = {};  // dB_k
};

// Whether the fused products take adapters of rank r on an input of `cols` columns starting at col0 of the whole:
// r 8, 16 or 32, cols a multiple of 32, col0 even.
bool lora_fusable(int r, std::int64_t cols, std::int64_t col0);

// The dropout kernels' and the fused products' check of a mask for `rows` x `cols` (what: the caller, for the message).
void check_lora_mask(const LoraMask& m, std::int64_t rows, std::int64_t cols, const char* what);

void lora_dropout(__nv_bfloat16* xd, const __nv_bfloat16* x, std::int64_t rows, std::int64_t cols, const LoraMask& m,
                  cudaStream_t stream);
void lora_dropout_add(__nv_bfloat16* dx, const __nv_bfloat16* t, std::int64_t rows, std::int64_t cols,
                      const LoraMask& m, cudaStream_t stream);

void lora_down(const LoraGroup& g, const __nv_bfloat16* x, std::int64_t rows, std::int64_t cols, const LoraMask& m,
               cudaStream_t stream);
// dA's partial sums over row chunks go through `workspace` (lora_grad_a_workspace_bytes; the chunks added in order:
// the same result every run).
std::size_t lora_grad_a_workspace_bytes(std::int64_t rows, std::int64_t cols, int count, int r);
void lora_grad_a(const LoraGroup& g, const __nv_bfloat16* x, std::int64_t rows, std::int64_t cols, const LoraMask& m,
                 float scale, DType grad_type, bool overwrite, void* workspace, cudaStream_t stream);
void lora_input_grad(__nv_bfloat16* dx, const LoraGroup& g, std::int64_t rows, std::int64_t cols, const LoraMask& m,
                     float scale, bool add, cudaStream_t stream);

// Whether lora_out_grad takes an adapter of rank r on `cols` columns from col0 of rows `ld` apart: r 8, 16 or 32, all
// three multiples of 8.
bool lora_out_fusable(int r, std::int64_t col0, std::int64_t cols, std::int64_t ld);
// The partial sums go through `workspace` (lora_out_grad_workspace_bytes; added in order: the same result every run).
std::size_t lora_out_grad_workspace_bytes(const LoraOutputs& g, std::int64_t rows);
void lora_out_grad(const LoraOutputs& g, const __nv_bfloat16* dy, std::int64_t rows, std::int64_t ld, float scale,
                   DType grad_type, bool overwrite, void* workspace, cudaStream_t stream);

}  // namespace tb::ops
