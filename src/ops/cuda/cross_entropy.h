// ops/cuda/cross_entropy.h: the chunked LM head fused with softmax cross-entropy, forward and backward, on one GPU.
// The CPU reference (the spec) is ops/cpu/cross_entropy.h: lm_head_cross_entropy. x: [t, h], W: [V, h] bf16,
// targets: [t] int32 in [0, V) (device). Per chunk of c tokens (never the full [t, V] logits at once):
//   logits_c  = x_c W^T                                   [c, V] bf16, fp32 accumulate   (GEMM abt)
//   loss_r    = lse(logits_r) - logits_r[target_r],  lse = log sum_v exp    (fp32, online max/sum, one block/row)
//   dlogits_c = (softmax(logits_c) - onehot(target)) * grad_scale / t       bf16, written over logits_c in place
//   dx_c      = dlogits_c W                           [c, h] bf16 written     (GEMM ab)
//   dW       += dlogits_c^T x_c                       [V, h] fp32 accumulated (GEMM atb, beta = 1)
//   *loss_out = (1/t) sum_r loss_r                    fp32 on the device: the MEAN loss, as the CPU reference returns
//                                                     (summed in double in a fixed order: deterministic)
// Empty dx / dW views skip that GEMM (both empty: forward only, dlogits are not written).
// Loss weights (optional, device fp32 [t]; a loss mask with its normaliser, ops/cpu/cross_entropy.h):
//   dlogits_r = w_r (softmax(logits_r) - onehot(target_r)) * grad_scale;  *loss_out = sum_r w_r loss_r (rows of
//   weight 0 left out of the sum, so a masked row's target need not be valid). The FP8 head takes none.
//
// Decisions:
// - Logits are bf16 (GEMM output), read into fp32 by the softmax kernel. Their rounding (2^-9 relative) is the
//   loss's main error: |d loss_r| <= 2^-9 (|logit_target| + max|logit|), mean over tokens far smaller; fp32 logits
//   would double the scratch and the GEMM's output traffic and still need a separate bf16 dlogits buffer for the
//   backward GEMMs. PyTorch's bf16 LM head (and Megatron's) also rounds logits to bf16.
// - The chunk is rounded up to a multiple of 128 / gcd(h, 128) tokens (at most t), so every chunk's x and dx rows
//   start 256-byte aligned, as the cuBLASLt plans assume. Results do not depend on the chunk beyond fp32
//   summation order in dW.
// - Any V >= 1 (not only multiples of 8): the softmax kernel does a scalar head and tail around 16-byte loads;
//   cuBLASLt runs rows of odd length with slower kernels. Any h >= 1; h % 8 == 0 for the fast GEMM paths.
// - A target outside [0, V) gives that token a NaN loss (so the mean is NaN, visibly) and a dlogits row without the
//   one-hot term; it cannot be reported from the device without a host sync.
//
// Scratch (caller-owned device bytes, 256-byte aligned; lm_head_ce_scratch() sizes it):
//   [0, logits_bytes):            logits / dlogits of one chunk, [chunk, V] bf16
//   [token_loss_offset, +4 t):    per-token losses (fp32), valid after the call (perplexity, masking, tests)
// GEMMs use the DeviceContext's cuBLASLt workspace and its plan cache (planned on first use of a shape: call once
// before capturing a CUDA graph). Everything is enqueued on dc.stream(); nothing synchronises with the host.
//
// Cost: 6 t V h FLOPs (2 t V h forward only): the three GEMMs. Ideal DRAM bytes beyond the GEMM operands:
// the softmax kernel reads each chunk's logits twice (the second read mostly from L2) and writes dlogits once:
// 4 t V bytes ideal (6 t V counted with both reads) plus 4 t for the token losses.
// Peak memory: scratch = 2 chunk V + 4 t bytes (+ alignment), e.g. 2.1 GB for chunk 8192 at V = 128256.
//
// FP8 (lm_head_cross_entropy_fp8): the same three GEMMs on FP8 operands with per-tensor current scaling
// (ops/cuda/fp8.h), the logits still bf16 and the softmax fp32:
//   xq = e4m3(x s_x), s_x from amax(x) (one pass over x per call); Wq, Wq^T = e4m3(W s_w) made by the caller
//   logits_c  = (xq_c / s_x)(Wq / s_w)^T                             fast accumulation
//   pass 1 (one block per row): lse_r, loss_r, and amax of dlogits over the chunk, exactly, without writing them:
//              max(|g(z_target, target)|, |g(max of the other z, not target)|), g(z, onehot) = (e^(z-lse) - onehot)
//              * grad_scale / t (monotone in z)
//   pass 2 (vector cast): dlq, dlq^T = fp8(g s_g) (E5M2, or E4M3 for all-E4M3), g recomputed from the bf16 logits
//              and lse, s_g from that amax; rounded to nearest, or stochastically (LmHeadFp8::stochastic: most of
//              the V gradients of a row are small positive probabilities of similar size, which nearest rounding
//              moves the same way, biasing dx and dW's sums; stochastic rounding is unbiased)
//   dx_c  = (dlq / s_g)(Wq^T / s_w)^T;   dW += (dlq^T / s_g)(xq_c^T / s_x)^T    (fp32, beta = 1)
// DRAM traffic beyond the GEMMs equals the bf16 path's (logits read twice; 2 chunk V fp8 bytes written instead of
// 2 chunk V bf16 bytes); the GEMMs read half the bytes and run at the FP8 rate. Its scratch adds the two FP8 copies
// of dlogits (2 chunk V bytes) and of x_c (2 chunk h), so chunk 4096 takes what chunk 8192 takes in bf16.
// LmHeadFp8::fp8_gemms picks which of the three GEMMs run in FP8; the others run as in the bf16 head, from W's bf16
// copy (w_bf16) and, for a BF16 dgrad or wgrad, bf16 dlogits written over the logits after the FP8 copies are made
// (the softmax again). With none in FP8 the results are the bf16 head's, bit for bit; with all three, the above.
// Mixed sets locate FP8's accuracy cost (bench/RESULTS.md); they cost an extra softmax pass when the backward mixes.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"
#include "ops/cuda/context.h"
#include "ops/cuda/fp8.h"

namespace tb::ops {

// Tokens per chunk. Measured on an H200 (bench/lab/lm_head_lab, t = 8192, V = 128256, h = 4096): bf16 chunk
// 4096 / 8192 39.5 / 38.2 ms, FP8 2048 / 4096 24.3 / 22.8 ms; the larger chunks cost ~1 GB more scratch at
// V = 128256, which the gradients sharing the activations' memory (model/grad_sharing.h) more than paid for.
inline constexpr int kLmHeadDefaultChunk = 8192;
inline constexpr int kLmHeadFp8Chunk = 4096;  // FP8: the same scratch as bf16's 8192 (see above)
// The LM head's tokens per chunk, FP8 or BF16.
inline constexpr int lm_head_chunk(bool fp8) { return fp8 ? kLmHeadFp8Chunk : kLmHeadDefaultChunk; }

struct LmHeadCeScratch {
  std::int64_t chunk = 0;                // tokens per chunk actually used (rounded as above, at most t)
  std::size_t logits_bytes = 0;          // [chunk, V] bf16 at offset 0
  std::size_t token_loss_offset = 0;     // [t] fp32 per-token losses
  // FP8 only (0 otherwise): dlq [chunk, V], dlq^T [V, chunk] (LmHeadFp8::grad); xq [chunk, h], xq^T [h, chunk]
  // e4m3; lse [chunk]
  std::size_t dlq_offset = 0, dlqt_offset = 0, xq_offset = 0, xqt_offset = 0, lse_offset = 0;
  std::size_t bytes = 0;                 // total to allocate
};
// The scratch layout for these sizes; throws tb::Error{config} on non-positive sizes or chunk. fp8: the layout of
// lm_head_cross_entropy_fp8 (its chunk is also rounded to a multiple of 16 tokens, as FP8 GEMMs need).
LmHeadCeScratch lm_head_ce_scratch(std::int64_t tokens, std::int64_t vocab, std::int64_t hidden,
                                   int chunk = kLmHeadDefaultChunk, bool fp8 = false);

// dx: [t, h] bf16 (written) or empty; dW: [V, h] fp32 or bf16 (G; accumulated: the caller zeroes it; dw_overwrite:
// written, the first chunk's GEMM with beta 0) or empty;
// x: [t, h] bf16; W: [V, h] bf16; targets: t device int32; loss_out: one device float (the mean loss);
// grad_scale: multiplies every gradient (e.g. 1 / gradient-accumulation steps, or a loss scale).
// All views contiguous and 256-byte aligned (cudaMalloc'ed, or offsets that keep that alignment).
// Throws tb::Error{config} for shape, alignment or scratch-size mistakes, before enqueuing anything.
template <class G>
void lm_head_cross_entropy(DeviceContext& dc, TensorView<__nv_bfloat16> dx, TensorView<G> dw,
                           TensorView<const __nv_bfloat16> x, TensorView<const __nv_bfloat16> w,
                           const std::int32_t* targets, int chunk, float grad_scale, float* loss_out,
                           Workspace scratch, bool dw_overwrite = false, const float* weights = nullptr);

// The head's GEMMs (LmHeadFp8::fp8_gemms, a bit set): logits = x W^T, dx = dlogits W, dW += dlogits^T x.
enum LmHeadGemm : unsigned { kHeadForward = 1, kHeadDgrad = 2, kHeadWgrad = 4, kHeadAllGemms = 7 };

// The FP8 head's weights and scaling slots (device). x and dlogits are written by the call (current scaling).
struct LmHeadFp8 {
  const std::uint8_t* wq = nullptr;    // [V, h] e4m3: W s_w
  const std::uint8_t* wqt = nullptr;   // [h, V] e4m3: its transpose
  const float* w_scale_inv = nullptr;  // 1 / s_w
  Fp8Meta x, dlogits;                  // amax, scale, scale_inv of each (history unused)
  int margin = 0;                      // scale = fp8_max / amax / 2^margin
  DType grad = DType::e5m2;            // the logit gradients' format: e5m2 (hybrid) or e4m3
  bool stochastic = false;             // dlogits rounded stochastically to FP8 (unbiased; Fp8CastArgs::stochastic)
  unsigned fp8_gemms = kHeadAllGemms;  // which GEMMs run in FP8 (LmHeadGemm bits); the others in BF16 from w_bf16
  const __nv_bfloat16* w_bf16 = nullptr;  // W [V, h] bf16: needed unless all three GEMMs are FP8
};
// As lm_head_cross_entropy, with W given by its FP8 copies (above). h, V and t multiples of 16; scratch from
// lm_head_ce_scratch(t, V, h, chunk, true).
template <class G>
void lm_head_cross_entropy_fp8(DeviceContext& dc, TensorView<__nv_bfloat16> dx, TensorView<G> dw,
                               TensorView<const __nv_bfloat16> x, const LmHeadFp8& w, std::int64_t vocab,
                               const std::int32_t* targets, int chunk, float grad_scale, float* loss_out,
                               Workspace scratch, bool dw_overwrite = false);

}  // namespace tb::ops
