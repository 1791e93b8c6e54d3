// model/attention_fp8_cuda.cpp: the FP8 attention core, cuDNN's FP8 SDPA (Fp8Options::attention; the op and its
// formats: ops/cuda/attention_fp8.h; the core's interface: model/attention_cuda.h). Per layer, with n = batch x seq
// rows, W = (H + 2G) hd:
//   forward:  qkv8 = e4m3(qkv * s_qkv)           current scaling: s_qkv = 448 / amax(qkv) / 2^margin, one scale for
//                                                the fused [n, W] q | k | v after RoPE (kept per layer: the backward's)
//             o8, lse = fp8_sdpa(qkv8 / s_qkv)   o8 = e4m3(o * s_o), P inside at the fixed scale 448
//             o = bf16(o8 / s_o)                 [n, H hd], the out-projection's input (as the bf16 path's o)
//   backward: do8 = fp8_grad(do * s_do)          current scaling of the out-projection's dgrad output (E5M2, or E4M3
//                                                with the all-E4M3 format: Fp8Options::grad, as dS, dq, dk, dv)
//             dq8 | dk8 | dv8 = fp8_sdpa_backward(qkv8, o8, do8, lse), dS inside at s_dp
//             dqkv = bf16(dq8 / s_dq) | bf16(dk8 / s_dk) | bf16(dv8 / s_dv)   (each column range its own scale)
//   then RoPE's backward and the qkv linear's backward as in the bf16 path.
// Delayed scales (s_o, s_dp, s_dq, s_dk, s_dv, one per tensor and layer), in both FP8 recipes: s = fp8_max / amax_ref /
// 2^margin, amax_ref the max (or, with most_recent, the last) of the step amaxes in a history of Fp8Options::history
// steps, rolled by the decoder's fp8_end_step() (delayed_tables()). cuDNN overwrites each amax per call, so a step's
// amax is its last micro-batch's. The first step runs at scale 1 (no history yet): its dS, far below 1, largely
// underflows E5M2, so its dq, dk, dv (and their amaxes) come out too small and the second step's dq, dk, dv scales too
// large (saturating); with the history's max, the third step's scales follow the tensors (the tests warm up two calls).
// With --fp8-recipe delayed on several ranks the amaxes are maxed over the ranks (fp8_reduce_amax), else local.
#include <cuda_runtime_api.h>

#include "core/dtype.h"
#include "core/error.h"
#include "model/attention_cuda.h"
#include "model/decoder_cuda.h"

namespace tb::model {
namespace {

enum NowSlot : int { kP, kDout, kQkv0 };     // now_: P, dO, then qkv8 of (set, layer) at kQkv0 + set L + l
enum GradSlot : int { kDp, kDq, kDk, kDv };  // grad_: layer l's at 4 l + slot

class Fp8Attention final : public AttentionCore {
 public:
  explicit Fp8Attention(const AttentionSetup& s) : AttentionCore(s) {
    attention8_ = std::make_unique<ops::CudnnFp8Attention>(dc_.device());
    o_ = std::make_unique<ops::Fp8Scales>(dc_.device(), layers_, fp8_.history, dc_.stream());
    grad_ = std::make_unique<ops::Fp8Scales>(dc_.device(), 4 * layers_, fp8_.history, dc_.stream());
  }

  // qkv8's scale is set by the forward and read again by the backward of the same micro-batch: one slot per
  // activation set (another micro-batch in flight must not overwrite it), as the linear layers' current-scaling
  // inputs.
  void prepare(int batch, int seq, int sets, int segments) override {
    require_unpacked(segments, "FP8 attention");
    const int L = layers_;
    if (!now_ || now_->tensors() < kQkv0 + L * sets) {
      now_ = std::make_unique<ops::Fp8Scales>(dc_.device(), kQkv0 + L * sets, 1, dc_.stream());
      static const float p_scale = ops::kPScale, p_scale_inv = 1.0f / ops::kPScale;
      const ops::Fp8Meta p = now_->meta(kP);
      TB_CHECK(cudaMemcpy(p.scale, &p_scale, sizeof(float), cudaMemcpyHostToDevice));
      TB_CHECK(cudaMemcpy(p.scale_inv, &p_scale_inv, sizeof(float), cudaMemcpyHostToDevice));
    }
    attention8_->plan(fp8_shape(batch, seq));  // may grow its workspace
  }

  ops::Fp8Meta qkv8_scale(int layer, int set) const override { return now_->meta(kQkv0 + set * layers_ + layer); }

  void delayed_tables(std::vector<std::pair<const ops::Fp8Scales*, DType>>& out) const override {
    out.emplace_back(o_.get(), DType::e4m3);  // o, dS, dq, dk, dv: delayed in both recipes
    out.emplace_back(grad_.get(), fp8_.grad);
  }

  std::size_t workspace_bytes() const override {
    return attention_->workspace_bytes() + attention8_->workspace_bytes();
  }

  void forward(int l, const AttentionActs& A, int batch, int seq, const PackedRows*) override {
    cudaStream_t st = dc_.stream();
    const ops::Fp8AttentionShape s = fp8_shape(batch, seq);
    const std::int64_t n = std::int64_t(batch) * seq, qd = cfg_.q_dim(), width = qd + 2 * std::int64_t(cfg_.kv_dim());
    if (cfg_.pos == Pos::rope) {
      rope(A.qkv, batch, seq, seq, 0, false);
      mark("rope fwd");
    }
    ops::Fp8CastArgs c;
    c.x = A.qkv, c.rows = n, c.cols = width, c.q = A.qkv8, c.type = DType::e4m3;
    fp8_scaled_cast(dc_, fp8_.margin, c, A.qkv8_scale, /*delayed=*/false, /*amax_ready=*/false);
    mark("fp8 attention casts");

    const ops::Fp8Meta o = o_->meta(l), p = now_->meta(kP);
    const ops::QkvPointers in = ops::split_fused_qkv_fp8(A.qkv8, s.attn);
    const float* qkv_inv = A.qkv8_scale.scale_inv;
    ops::Fp8AttentionForwardArgs a;
    a.q = {in.q, qkv_inv}, a.k = {in.k, qkv_inv}, a.v = {in.v, qkv_inv};
    a.o = {A.o8, o.scale, o.amax};
    a.lse = A.lse;
    a.s = {p.scale, p.scale_inv, p.amax};
    attention8_->forward(s, a, st);
    mark("attention fwd");

    ops::fp8_dequantize({A.o8, qd, A.o, qd, n, qd, DType::e4m3, o.scale_inv}, st);
    mark("fp8 attention casts");
  }

  void backward(int l, const AttentionActs& A, const AttentionGrads& g, int batch, int seq,
                const PackedRows*) override {
    cudaStream_t st = dc_.stream();
    const ops::Fp8AttentionShape s = fp8_shape(batch, seq);
    const std::int64_t n = std::int64_t(batch) * seq, qd = cfg_.q_dim(), kvd = cfg_.kv_dim(), width = qd + 2 * kvd;
    const ops::Fp8Meta dout = now_->meta(kDout);
    ops::Fp8CastArgs c;
    c.x = g.dout, c.rows = n, c.cols = qd, c.q = g.dout8, c.type = fp8_.grad;
    fp8_scaled_cast(dc_, fp8_.margin, c, dout, /*delayed=*/false, /*amax_ready=*/false);
    mark("fp8 attention casts");

    const ops::Fp8Meta o = o_->meta(l), p = now_->meta(kP);
    const auto grad = [&](GradSlot k) { return grad_->meta(4 * l + k); };
    const ops::Fp8Meta dp = grad(kDp), dq = grad(kDq), dk = grad(kDk), dv = grad(kDv);
    const ops::QkvPointers in = ops::split_fused_qkv_fp8(A.qkv8, s.attn);
    const ops::QkvPointers out = ops::split_fused_qkv_fp8(g.dqkv8, s.attn);
    const float* qkv_inv = A.qkv8_scale.scale_inv;
    ops::Fp8AttentionBackwardArgs b;
    b.q = {in.q, qkv_inv}, b.k = {in.k, qkv_inv}, b.v = {in.v, qkv_inv};
    b.o = {A.o8, o.scale_inv};
    b.dout = {g.dout8, dout.scale_inv};
    b.lse = A.lse;
    b.s = {p.scale, p.scale_inv, nullptr};
    b.dp = {dp.scale, dp.scale_inv, dp.amax};
    b.dq = {out.q, dq.scale, dq.amax}, b.dk = {out.k, dk.scale, dk.amax}, b.dv = {out.v, dv.scale, dv.amax};
    attention8_->backward(s, b, st);
    mark("attention bwd");

    const std::int64_t col[3] = {0, qd, qd + kvd}, cols[3] = {qd, kvd, kvd};
    const float* inv[3] = {dq.scale_inv, dk.scale_inv, dv.scale_inv};
    for (int k = 0; k < 3; ++k)
      ops::fp8_dequantize({g.dqkv8 + col[k], width, g.dqkv + col[k], width, n, cols[k], fp8_.grad, inv[k]}, st);
    mark("fp8 attention casts");
    if (cfg_.pos == Pos::rope) {
      rope(g.dqkv, batch, seq, seq, 0, true);
      mark("rope bwd");
    }
  }

 private:
  ops::Fp8AttentionShape fp8_shape(int batch, int seq) const {
    return {shape(batch, seq), fp8_.grad};  // deterministic: refused by the op's shape check
  }

  std::unique_ptr<ops::CudnnFp8Attention> attention8_;
  std::unique_ptr<ops::Fp8Scales> o_;     // delayed, E4M3: o of layer l at l
  std::unique_ptr<ops::Fp8Scales> grad_;  // delayed, Fp8Options::grad: dS, dq, dk, dv of layer l at 4 l + 0..3
  std::unique_ptr<ops::Fp8Scales> now_;   // P (fixed), dO (current), then qkv8 per activation set and layer
};

}  // namespace

std::unique_ptr<AttentionCore> make_fp8_attention(const AttentionSetup& s) { return std::make_unique<Fp8Attention>(s); }

}  // namespace tb::model
