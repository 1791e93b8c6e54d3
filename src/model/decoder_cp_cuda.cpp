// model/decoder_cp_cuda.cpp: context parallelism in the CUDA decoder (model/decoder_cuda.h ContextParallelOps).
// Local rows of a micro-batch: [batch, 2, c], chunk k = 0, 1 of the local rows is global chunk g_k (cp_chunk): rank
// and 2 cp - 1 - rank, positions g_k c + i. With S = 2 cp c tokens per sequence and kv = K|V columns (2 G hd) of the
// fused QKV rows:
//   gather:   kv_local [n_l, kv] (K|V of the local rows) -> all-gather over cp -> [cp, batch, 2, c, kv] (rank order)
//             -> kv_full [batch, S, kv] (natural order: block (r', k) to position g(r', k) c)
//   forward:  chunk k: queries [batch, c] at positions g_k c .. against keys [0, (g_k + 1) c) of kv_full,
//             causal with the diagonal at the bottom right; o and lse of the chunk (lse: [2][batch, H, c])
//   backward: dq of chunk k into its rows; dK|dV of chunk k over [0, (g_k + 1) c) into dkv_full[k] (zeroed first),
//             dkv_full[0] += dkv_full[1], permuted to rank order, reduce-scattered over cp -> this rank's [n_l, kv]
//             -> the K|V columns of dqkv. RoPE forward and backward per chunk at offset g_k c (learned positions:
//             model/position_pieces.h, in the embedding).
// Bytes moved per layer and rank: forward all-gather cp·n_l·kv·2 (K and V of the sequence), backward the same again
// (K, V re-gathered, unless kv_full still holds them: the last layer, whose backward follows its forward, and every
// layer under full recompute, whose recomputed forward gathers them just before) plus a reduce-scatter of the same
// size (dK, dV): the K|V width (2 G hd = 2048 for Llama 3.1 8B) is a quarter of d_model... times 2, so CP moves far
// less than TP's four [n, d] collectives.
#include <cuda_runtime_api.h>

#include "core/error.h"
#include "model/decoder_cuda.h"
#include "ops/cuda/norm.h"
#include "ops/cuda/rope.h"

namespace tb::model {
namespace {

// Copies `rows` blocks of `bytes` from src (pitch sp) to dst (pitch dp) on stream.
void copy2d(void* dst, std::size_t dp, const void* src, std::size_t sp, std::size_t bytes, std::size_t rows,
            cudaStream_t st) {
  TB_CHECK(cudaMemcpy2DAsync(dst, dp, src, sp, bytes, rows, cudaMemcpyDeviceToDevice, st));
}

}  // namespace

void CudaDecoder::set_context_parallel(ContextParallelOps cp) {
  TB_REQUIRE(batch_ == 0, "CUDA decoder: set_context_parallel() must come before prepare()");
  TB_REQUIRE(cp.size >= 1 && cp.rank >= 0 && cp.rank < cp.size, "CUDA decoder: context-parallel rank out of range");
  if (cp.size > 1) {
    TB_REQUIRE(cp.all_gather && cp.reduce_scatter, "CUDA decoder: context parallel needs all_gather and reduce_scatter");
    TB_REQUIRE(!fp8_attention(), "CUDA decoder: FP8 attention does not combine with context parallel (cuDNN's FP8 "
                                 "attention has no bottom-right causal mask on Hopper): leave it off");
  }
  cp_ = std::move(cp);
}

void CudaDecoder::cp_prepare(int batch, int seq) {
  TB_REQUIRE(seq % 2 == 0, "CUDA decoder: context parallel needs an even local sequence (two chunks per rank)");
  const std::size_t n = std::size_t(batch) * std::size_t(seq), kv = 2 * std::size_t(cfg_.kv_dim());
  const std::size_t full = n * std::size_t(cp_.size);  // batch x S rows
  const std::size_t elems[5] = {n * kv, full * kv, full * kv, full * kv, full * kv};
  std::size_t total = 0;
  for (std::size_t e : elems) total += (e * sizeof(bf16) + 255) / 256 * 256;
  cp_buf_ = ops::DeviceBuffer(dc_.device(), total);
  auto* p = static_cast<std::byte*>(cp_buf_.get());
  bf16* ptrs[5];
  for (int i = 0; i < 5; ++i) {
    ptrs[i] = reinterpret_cast<bf16*>(p);
    p += (elems[i] * sizeof(bf16) + 255) / 256 * 256;
  }
  cp_s_ = {ptrs[0], ptrs[1], ptrs[2], {ptrs[3], ptrs[4]}};
  cp_kv_of_ = nullptr;
  for (int k = 0; k < 2; ++k) attention_->plan(cp_attention_shape(batch, seq, k));
}

ops::AttentionShape CudaDecoder::cp_attention_shape(int batch, int seq, int k) const {
  const std::int64_t c = seq / 2, hd = cfg_.head_dim, H = cfg_.heads, G = cfg_.kv_heads;
  const std::int64_t width = (H + 2 * G) * hd, kv = 2 * G * hd, S = std::int64_t(seq) * cp_.size;
  ops::AttentionShape s;
  s.batch = batch, s.seq = c, s.kv_seq = (cp_chunk(k) + 1) * c, s.heads = H, s.kv_heads = G, s.head_dim = hd;
  s.q = {std::int64_t(seq) * width, width, hd};
  s.k = s.v = {S * kv, kv, hd};
  s.o = {std::int64_t(seq) * H * hd, H * hd, hd};
  s.deterministic = deterministic_;
  return s;
}

void CudaDecoder::cp_rope(bf16* qkv, int batch, int seq, bool backward) {
  const std::int64_t c = seq / 2, hd = cfg_.head_dim, width = cfg_.q_dim() + 2 * std::int64_t(cfg_.kv_dim());
  for (int k = 0; k < 2; ++k) {
    const TensorView<bf16> view(qkv + std::size_t(k * c * width), Shape{batch, c, cfg_.heads + cfg_.kv_heads, hd},
                                Shape{std::int64_t(seq) * width, width, hd, 1}, 4);
    if (backward)
      ops::rope_backward(view, inv_freq(), dc_.stream(), std::int64_t(cp_chunk(k)) * c);
    else
      ops::rope_forward(view, inv_freq(), dc_.stream(), std::int64_t(cp_chunk(k)) * c);
  }
  mark(backward ? "rope bwd" : "rope fwd");
}

void CudaDecoder::cp_gather_kv(const bf16* qkv, int batch, int seq) {
  cudaStream_t st = dc_.stream();
  const std::size_t n = std::size_t(batch) * std::size_t(seq), c = std::size_t(seq) / 2;
  const std::size_t q = std::size_t(cfg_.q_dim()), kv = 2 * std::size_t(cfg_.kv_dim()), width = q + kv;
  const std::size_t S = std::size_t(seq) * std::size_t(cp_.size), row = kv * sizeof(bf16);
  copy2d(cp_s_.kv_local, row, qkv + q, width * sizeof(bf16), row, n, st);  // the K|V columns of the local rows
  cp_.all_gather(cp_s_.kv_local, cp_s_.kv_all, n * kv);
  for (int r = 0; r < cp_.size; ++r)
    for (int k = 0; k < 2; ++k) {
      const std::size_t g = std::size_t(k == 0 ? r : 2 * cp_.size - 1 - r);
      copy2d(cp_s_.kv_full + g * c * kv, S * row, cp_s_.kv_all + (std::size_t(r) * n + std::size_t(k) * c) * kv,
             std::size_t(seq) * row, c * row, std::size_t(batch), st);
    }
  cp_kv_of_ = qkv;
  mark("cp kv all-gather");
}

void CudaDecoder::cp_attention_forward(const LayerActs& A, int batch, int seq) {
  const std::int64_t c = seq / 2, width = cfg_.q_dim() + 2 * std::int64_t(cfg_.kv_dim()), qd = cfg_.q_dim();
  cp_gather_kv(A.qkv, batch, seq);
  for (int k = 0; k < 2; ++k) {
    const ops::AttentionShape as = cp_attention_shape(batch, seq, k);
    attention_->forward(as,
                        {A.qkv + k * c * width, cp_s_.kv_full, cp_s_.kv_full + cfg_.kv_dim(), A.o + k * c * qd,
                         A.lse + std::size_t(k) * std::size_t(batch) * std::size_t(cfg_.heads) * std::size_t(c)},
                        dc_.stream());
  }
  mark("attention fwd");
}

void CudaDecoder::cp_attention_backward(const LayerActs& A, int batch, int seq) {
  cudaStream_t st = dc_.stream();
  const std::int64_t c = seq / 2, width = cfg_.q_dim() + 2 * std::int64_t(cfg_.kv_dim()), qd = cfg_.q_dim();
  const std::size_t n = std::size_t(batch) * std::size_t(seq), kv = 2 * std::size_t(cfg_.kv_dim());
  const std::size_t S = std::size_t(seq) * std::size_t(cp_.size), row = kv * sizeof(bf16);
  if (cp_kv_of_ != A.qkv) cp_gather_kv(A.qkv, batch, seq);  // K and V again (not kept: [batch, S] per layer)
  for (int k = 0; k < 2; ++k) {
    const ops::AttentionShape as = cp_attention_shape(batch, seq, k);
    TB_CHECK(cudaMemsetAsync(cp_s_.dkv_full[k], 0, std::size_t(batch) * S * row, st));  // rows past its keys stay 0
    attention_->backward(
        as,
        {A.qkv + k * c * width, cp_s_.kv_full, cp_s_.kv_full + cfg_.kv_dim(), A.o + k * c * qd, s_.dout + k * c * qd,
         A.lse + std::size_t(k) * std::size_t(batch) * std::size_t(cfg_.heads) * std::size_t(c),
         s_.dqkv + k * c * width, cp_s_.dkv_full[k], cp_s_.dkv_full[k] + cfg_.kv_dim()},
        st);
  }
  mark("attention bwd");
  const std::int64_t full_rows = std::int64_t(batch) * std::int64_t(S);
  ops::residual_add({cp_s_.dkv_full[0], {full_rows, std::int64_t(kv)}}, {cp_s_.dkv_full[0], {full_rows, std::int64_t(kv)}},
                    {cp_s_.dkv_full[1], {full_rows, std::int64_t(kv)}}, st);
  for (int r = 0; r < cp_.size; ++r)  // natural order -> rank order (kv_all is free now)
    for (int k = 0; k < 2; ++k) {
      const std::size_t g = std::size_t(k == 0 ? r : 2 * cp_.size - 1 - r);
      copy2d(cp_s_.kv_all + (std::size_t(r) * n + std::size_t(k) * std::size_t(c)) * kv, std::size_t(seq) * row,
             cp_s_.dkv_full[0] + g * std::size_t(c) * kv, S * row, std::size_t(c) * row, std::size_t(batch), st);
    }
  cp_.reduce_scatter(cp_s_.kv_all, cp_s_.kv_local, n * kv);
  copy2d(s_.dqkv + cfg_.q_dim(), std::size_t(width) * sizeof(bf16), cp_s_.kv_local, row, row, n, st);
  mark("cp dkv reduce-scatter");
}

}  // namespace tb::model
