// model/attention_cuda.cpp: the attention cores' common part (RoPE, the fused-qkv shape) and the BF16 core: cuDNN's
// fused SDPA on the fused qkv (packed rows: its ragged layout, RoPE at the tokens' positions), with the FP8 attention
// emulation diagnostic (Fp8Options::attention_emulate: BF16 attention whose q, k, v and/or o are rounded to E4M3 and
// back as FP8 attention stores them, one current scale per tensor). model/attention_cuda.h has the formulas.
#include "model/attention_cuda.h"

#include "core/error.h"
#include "model/decoder_common.h"
#include "model/decoder_cuda.h"
#include "ops/cuda/rope.h"

namespace tb::model {

AttentionCore::AttentionCore(const AttentionSetup& s)
    : dc_(s.dc), cfg_(s.cfg), fp8_(s.fp8), deterministic_(s.deterministic), layers_(s.layers), on_op_(s.on_op) {
  if (cfg_.pos == Pos::rope) {
    const std::vector<double> inv = detail::rope_inv_freq(cfg_);
    inv_freq_ = ops::DeviceBuffer(dc_.device(), inv.size() * sizeof(float));
    ops::upload_rope_inv_freq(TensorView<float>(inv_freq_.as<float>(), {std::int64_t(inv.size())}), inv, dc_.stream());
  }
  attention_ = std::make_unique<ops::CudnnAttention>(dc_.device());
}

ops::AttentionShape AttentionCore::shape(int batch, int seq, int segments) const {
  ops::AttentionShape s =
      ops::fused_qkv_attention(batch, seq, cfg_.heads, cfg_.kv_heads, cfg_.head_dim, deterministic_);
  s.segments = segments;
  return s;
}

void AttentionCore::require_unpacked(int segments, const char* core) {
  TB_REQUIRE(segments == 0, std::string("CUDA decoder: packed sequences with ") + core +
                                " are not built: run packed data with the BF16 attention and without context parallel");
}

TensorView<const float> AttentionCore::inv_freq() const {
  if (cfg_.pos != Pos::rope) return {};
  return TensorView<const float>(inv_freq_.as<float>(), {cfg_.rope_dim() / 2});
}

void AttentionCore::rope(bf16* at, int batch, int seq, std::int64_t rows, std::int64_t offset, bool backward,
                         const std::int32_t* positions) const {
  const std::int64_t hd = cfg_.head_dim, width = cfg_.q_dim() + 2 * std::int64_t(cfg_.kv_dim());
  const TensorView<bf16> view(at, Shape{batch, rows, cfg_.heads + cfg_.kv_heads, hd},
                              Shape{std::int64_t(seq) * width, width, hd, 1}, 4);  // Q and K heads, skipping V
  if (backward)
    ops::rope_backward(view, inv_freq(), dc_.stream(), offset, positions);
  else
    ops::rope_forward(view, inv_freq(), dc_.stream(), offset, positions);
}

namespace {

class Bf16Attention final : public AttentionCore {
 public:
  explicit Bf16Attention(const AttentionSetup& s) : AttentionCore(s) {
    if (fp8_.attention_emulate) emulate_scales_ = std::make_unique<ops::Fp8Scales>(dc_.device(), 2, 1, dc_.stream());
  }

  void prepare(int batch, int seq, int sets, int segments) override {
    segments_ = segments;
    attention_->plan(shape(batch, seq, segments));  // may grow its workspace
    if (fp8_.attention_emulate) {
      const std::size_t n = std::size_t(batch) * std::size_t(seq);
      emulate_buf_ = ops::DeviceBuffer(dc_.device(), n * std::size_t(cfg_.q_dim() + 2 * cfg_.kv_dim()));
    }
  }

  void forward(int layer, const AttentionActs& A, int batch, int seq, const PackedRows* packed) override {
    const ops::AttentionShape as = shape(batch, seq, segments_);
    check_rows(packed);
    const std::int64_t n = std::int64_t(batch) * seq, qd = cfg_.q_dim(), width = qd + 2 * std::int64_t(cfg_.kv_dim());
    if (cfg_.pos == Pos::rope) {
      rope(A.qkv, batch, seq, seq, 0, false, packed ? packed->positions : nullptr);
      mark("rope fwd");
    }
    if (fp8_.attention_emulate & kEmulateQkv) emulate(A.qkv, n, width, 0);
    const ops::QkvPointers qkv = ops::split_fused_qkv(A.qkv, as);
    attention_->forward(as, {qkv.q, qkv.k, qkv.v, A.o, A.lse, packed ? packed->segments : ops::PackedSegments{}},
                        dc_.stream());
    mark("attention fwd");
    if (fp8_.attention_emulate & kEmulateO) emulate(A.o, n, qd, 1);
  }

  void backward(int layer, const AttentionActs& A, const AttentionGrads& g, int batch, int seq,
                const PackedRows* packed) override {
    const ops::AttentionShape as = shape(batch, seq, segments_);
    check_rows(packed);
    const ops::QkvPointers qkv = ops::split_fused_qkv(A.qkv, as);
    const ops::QkvPointers dqkv = ops::split_fused_qkv(g.dqkv, as);
    attention_->backward(as,
                         {qkv.q, qkv.k, qkv.v, A.o, g.dout, A.lse, dqkv.q, dqkv.k, dqkv.v,
                          packed ? packed->segments : ops::PackedSegments{}},
                         dc_.stream());
    mark("attention bwd");
    if (cfg_.pos == Pos::rope) {
      rope(g.dqkv, batch, seq, seq, 0, true, packed ? packed->positions : nullptr);
      mark("rope bwd");
    }
  }

  std::size_t workspace_bytes() const override { return attention_->workspace_bytes(); }

 private:
  // A call's rows agree with prepare(): packed rows exactly when planned with a segment capacity.
  void check_rows(const PackedRows* packed) const {
    TB_REQUIRE((packed != nullptr) == (segments_ > 0),
               segments_ > 0 ? "CUDA decoder: prepared for packed rows, but a micro-batch came without its documents"
                             : "CUDA decoder: a micro-batch of packed rows, but prepare() had no segment capacity");
  }

  // x [rows, cols] rounded to E4M3 and back in place, current scaling in slot `slot`.
  void emulate(bf16* x, std::int64_t rows, std::int64_t cols, int slot) {
    ops::Fp8CastArgs c;
    c.x = x, c.rows = rows, c.cols = cols, c.q = emulate_buf_.get(), c.type = DType::e4m3;
    const ops::Fp8Meta m = emulate_scales_->meta(slot);
    fp8_scaled_cast(dc_, fp8_.margin, c, m, /*delayed=*/false, /*amax_ready=*/false);
    ops::fp8_dequantize({emulate_buf_.get(), cols, x, cols, rows, cols, DType::e4m3, m.scale_inv}, dc_.stream());
    mark("fp8 attention emulation");
  }

  int segments_ = 0;                                // packed rows: the segment capacity (prepare())
  ops::DeviceBuffer emulate_buf_;                   // the E4M3 codes (prepare())
  std::unique_ptr<ops::Fp8Scales> emulate_scales_;  // its qkv and O slots
};

}  // namespace

std::unique_ptr<AttentionCore> make_bf16_attention(const AttentionSetup& s) {
  return std::make_unique<Bf16Attention>(s);
}

}  // namespace tb::model
