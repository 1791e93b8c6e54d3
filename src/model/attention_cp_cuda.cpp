// model/attention_cp_cuda.cpp: the context-parallel attention core (model/attention_cuda.h; the layout:
// model/decoder_cuda.h ContextParallelOps).
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
#include "model/attention_cuda.h"
#include "model/decoder_cuda.h"
#include "ops/cuda/norm.h"
#include "ops/cuda/rope.h"

namespace tb::model {
namespace {

using bf16 = __nv_bfloat16;

// Copies `rows` blocks of `bytes` from src (pitch sp) to dst (pitch dp) on stream.
void copy2d(void* dst, std::size_t dp, const void* src, std::size_t sp, std::size_t bytes, std::size_t rows,
            cudaStream_t st) {
  TB_CHECK(cudaMemcpy2DAsync(dst, dp, src, sp, bytes, rows, cudaMemcpyDeviceToDevice, st));
}

class CpAttention final : public AttentionCore {
 public:
  CpAttention(const AttentionSetup& s, const ContextParallelOps& cp) : AttentionCore(s), cp_(cp) {}

  std::size_t workspace_bytes() const override { return attention_->workspace_bytes(); }

  void prepare(int batch, int seq, int sets, int segments) override {
    require_unpacked(segments, "context parallel");
    TB_REQUIRE(seq % 2 == 0, "CUDA decoder: context parallel needs an even local sequence (two chunks per rank)");
    const std::size_t n = std::size_t(batch) * std::size_t(seq), kv = 2 * std::size_t(cfg_.kv_dim());
    const std::size_t full = n * std::size_t(cp_.size);  // batch x S rows
    const std::size_t elems[5] = {n * kv, full * kv, full * kv, full * kv, full * kv};
    std::size_t total = 0;
    for (std::size_t e : elems) total += (e * sizeof(bf16) + 255) / 256 * 256;
    buf_ = ops::DeviceBuffer(dc_.device(), total);
    auto* p = static_cast<std::byte*>(buf_.get());
    bf16* ptrs[5];
    for (int i = 0; i < 5; ++i) {
      ptrs[i] = reinterpret_cast<bf16*>(p);
      p += (elems[i] * sizeof(bf16) + 255) / 256 * 256;
    }
    s_ = {ptrs[0], ptrs[1], ptrs[2], {ptrs[3], ptrs[4]}};
    kv_of_ = nullptr;
    for (int k = 0; k < 2; ++k) attention_->plan(cp_shape(batch, seq, k));
  }

  ops::AttentionShape cp_shape(int batch, int seq, int k) const {
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

  void cp_rope(bf16* qkv, int batch, int seq, bool backward) {  // each chunk at its global positions
    const std::int64_t c = seq / 2, width = cfg_.q_dim() + 2 * std::int64_t(cfg_.kv_dim());
    for (int k = 0; k < 2; ++k) rope(qkv + std::size_t(k * c * width), batch, seq, c, cp_chunk(k) * c, backward);
    mark(backward ? "rope bwd" : "rope fwd");
  }

  void gather_kv(const bf16* qkv, int batch, int seq) {
    cudaStream_t st = dc_.stream();
    const std::size_t n = std::size_t(batch) * std::size_t(seq), c = std::size_t(seq) / 2;
    const std::size_t q = std::size_t(cfg_.q_dim()), kv = 2 * std::size_t(cfg_.kv_dim()), width = q + kv;
    const std::size_t S = std::size_t(seq) * std::size_t(cp_.size), row = kv * sizeof(bf16);
    copy2d(s_.kv_local, row, qkv + q, width * sizeof(bf16), row, n, st);  // the K|V columns of the local rows
    cp_.all_gather(s_.kv_local, s_.kv_all, n * kv);
    for (int r = 0; r < cp_.size; ++r)
      for (int k = 0; k < 2; ++k) {
        const std::size_t g = std::size_t(k == 0 ? r : 2 * cp_.size - 1 - r);
        copy2d(s_.kv_full + g * c * kv, S * row, s_.kv_all + (std::size_t(r) * n + std::size_t(k) * c) * kv,
               std::size_t(seq) * row, c * row, std::size_t(batch), st);
      }
    kv_of_ = qkv;
    mark("cp kv all-gather");
  }

  void forward(int layer, const AttentionActs& A, int batch, int seq, const PackedRows*) override {
    const std::int64_t c = seq / 2, width = cfg_.q_dim() + 2 * std::int64_t(cfg_.kv_dim()), qd = cfg_.q_dim();
    if (cfg_.pos == Pos::rope) cp_rope(A.qkv, batch, seq, false);
    gather_kv(A.qkv, batch, seq);
    for (int k = 0; k < 2; ++k) {
      const ops::AttentionShape as = cp_shape(batch, seq, k);
      attention_->forward(as,
                          {A.qkv + k * c * width, s_.kv_full, s_.kv_full + cfg_.kv_dim(), A.o + k * c * qd,
                           A.lse + std::size_t(k) * std::size_t(batch) * std::size_t(cfg_.heads) * std::size_t(c)},
                          dc_.stream());
    }
    mark("attention fwd");
  }

  void backward(int layer, const AttentionActs& A, const AttentionGrads& g, int batch, int seq,
                const PackedRows*) override {
    cudaStream_t st = dc_.stream();
    const std::int64_t c = seq / 2, width = cfg_.q_dim() + 2 * std::int64_t(cfg_.kv_dim()), qd = cfg_.q_dim();
    const std::size_t n = std::size_t(batch) * std::size_t(seq), kv = 2 * std::size_t(cfg_.kv_dim());
    const std::size_t S = std::size_t(seq) * std::size_t(cp_.size), row = kv * sizeof(bf16);
    if (kv_of_ != A.qkv) gather_kv(A.qkv, batch, seq);  // K and V again (not kept: [batch, S] per layer)
    for (int k = 0; k < 2; ++k) {
      const ops::AttentionShape as = cp_shape(batch, seq, k);
      TB_CHECK(cudaMemsetAsync(s_.dkv_full[k], 0, std::size_t(batch) * S * row, st));  // rows past its keys stay 0
      attention_->backward(
          as,
          {A.qkv + k * c * width, s_.kv_full, s_.kv_full + cfg_.kv_dim(), A.o + k * c * qd, g.dout + k * c * qd,
           A.lse + std::size_t(k) * std::size_t(batch) * std::size_t(cfg_.heads) * std::size_t(c),
           g.dqkv + k * c * width, s_.dkv_full[k], s_.dkv_full[k] + cfg_.kv_dim()},
          st);
    }
    mark("attention bwd");
    const std::int64_t full_rows = std::int64_t(batch) * std::int64_t(S);
    ops::residual_add({s_.dkv_full[0], {full_rows, std::int64_t(kv)}}, {s_.dkv_full[0], {full_rows, std::int64_t(kv)}},
                      {s_.dkv_full[1], {full_rows, std::int64_t(kv)}}, st);
    for (int r = 0; r < cp_.size; ++r)  // natural order -> rank order (kv_all is free now)
      for (int k = 0; k < 2; ++k) {
        const std::size_t gc = std::size_t(k == 0 ? r : 2 * cp_.size - 1 - r);
        copy2d(s_.kv_all + (std::size_t(r) * n + std::size_t(k) * std::size_t(c)) * kv, std::size_t(seq) * row,
               s_.dkv_full[0] + gc * std::size_t(c) * kv, S * row, std::size_t(c) * row, std::size_t(batch), st);
      }
    cp_.reduce_scatter(s_.kv_all, s_.kv_local, n * kv);
    copy2d(g.dqkv + cfg_.q_dim(), std::size_t(width) * sizeof(bf16), s_.kv_local, row, row, n, st);
    mark("cp dkv reduce-scatter");
    if (cfg_.pos == Pos::rope) cp_rope(g.dqkv, batch, seq, true);
  }

 private:
  int cp_chunk(int k) const { return k == 0 ? cp_.rank : 2 * cp_.size - 1 - cp_.rank; }  // global chunk of local k

  ContextParallelOps cp_;
  ops::DeviceBuffer buf_;  // K|V local, gathered, natural order; dK|dV per chunk
  struct Scratch {
    bf16 *kv_local, *kv_all, *kv_full, *dkv_full[2];
  } s_{};
  const bf16* kv_of_ = nullptr;  // whose K|V kv_full holds (the qkv rows last gathered): the backward of those rows
                                 // skips its gather (the last layer; every layer under full recompute)
};

}  // namespace

std::unique_ptr<AttentionCore> make_cp_attention(const AttentionSetup& s, const ContextParallelOps& cp) {
  TB_REQUIRE(!s.fp8.attention_emulate, "CUDA decoder: the FP8 attention emulation takes no context parallel");
  return std::make_unique<CpAttention>(s, cp);
}

}  // namespace tb::model
