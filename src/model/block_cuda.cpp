// model/block_cuda.cpp: one layer of the CUDA decoder, the block: r1 = x + resid, y1 = norm1(r1), attention (qkv
// linear, RoPE, the core: cuDNN | FP8 | context parallel, out linear; or model/attention_mla_cuda.h's), r2 = a + r1,
// y2 = norm2(r2), its MLP
// (model/mlp_cuda.h), and the backward in reverse (model/decoder_cuda.h has the data flow and what each recompute mode
// keeps). The pre-norms feed the linears that read them (FP8: their inputs' casts written by the norm itself).
#include <cuda_runtime_api.h>

#include <type_traits>

#include "model/decoder_cuda.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/norm.h"
#include "ops/cuda/rope.h"

namespace tb::model {

using bf16 = __nv_bfloat16;

std::vector<LinearCuda*> CudaDecoder::layer_linears(int l) {
  std::vector<LinearCuda*> out;
  if (MlaAttentionCuda* mla = mlas_[std::size_t(l)].get())
    out = mla->linears();
  else
    out = {&linears_[std::size_t(l)]->qkv, &linears_[std::size_t(l)]->out};
  for (LinearCuda* lin : mlps_[std::size_t(l)]->linears()) out.push_back(lin);
  return out;
}

std::vector<const LinearCuda*> CudaDecoder::layer_linears(int l) const {
  std::vector<const LinearCuda*> out;
  for (LinearCuda* lin : const_cast<CudaDecoder*>(this)->layer_linears(l)) out.push_back(lin);
  return out;
}

LinearSaved& CudaDecoder::linear_saved(int set, int l, int k) {
  MlaAttentionCuda* mla = mlas_[std::size_t(l)].get();
  const int attention = mla ? int(mla->linears().size()) : 2;
  if (k >= attention) return mlps_[std::size_t(l)]->saved(set, k - attention);
  return mla ? mla->saved(set, k) : acts_[act_index(set, l)].lin[k];
}

int CudaDecoder::linear_count() const {
  std::size_t n = 0;
  for (int l = 0; l < layers(); ++l) n += layer_linears(l).size();
  return int(n);
}

const LinearCuda* CudaDecoder::mlp_output_linear(int l) {
  if (l < 0) return nullptr;
  MlpCuda& mlp = *mlps_[std::size_t(l)];
  const int k = mlp.output_linear();
  return k < 0 ? nullptr : mlp.linears()[std::size_t(k)];
}

LinearInput CudaDecoder::pre_norm(int l, bool first, const LinearSaved* fused, const bf16* x, const bf16* resid,
                                  const LayerActs& A, std::int64_t rows) {
  const DenseLayout::Layer& L = layout_.layers[std::size_t(l)];
  const ops::NormKind nk = detail::norm_kind(cfg_.norm);
  const float eps = float(cfg_.norm_eps);
  const std::int64_t d = cfg_.d_model;
  bf16* const y = first ? A.y1 : A.y2;
  const TensorView<bf16> r(first ? A.r1 : A.r2, {rows, d});
  const TensorView<float> mean(first ? A.mean1 : A.mean2, {rows}), rstd(first ? A.rstd1 : A.rstd2, {rows});
  const TensorView<const bf16> xv(x, {rows, d});
  const TensorView<const bf16> rv = resid ? TensorView<const bf16>(resid, {rows, d}) : TensorView<const bf16>();
  const TensorView<const bf16> w = P(first ? L.norm1_w : L.norm2_w), b = P(first ? L.norm1_b : L.norm2_b);
  const bool whole = fp8_.enabled && tp_.size == 1 && fused;
  LinearInput input = LinearInput::bf16;
  if (whole && fp8_.delayed) {
    // (a frozen linear keeps no X^T: the norm's transposed copy goes to scratch the forward does not use)
    const ops::Fp8CastArgs cast =
        fp8_delayed_cast(fused->xs, DType::e4m3, rows, d, s_.xq, fused->xt ? fused->xt : s_.dyqt, fp8_.margin);
    ops::add_norm_forward_fp8(nk, cast, r, mean, rstd, xv, rv, w, b, eps, dc_.stream());
    input = LinearInput::cast;
  } else {
    float* amax = whole ? fp8_fused_amax(env(), fused->xs) : nullptr;
    ops::add_norm_forward(nk, {own(y, rows), {rows, d}}, r, mean, rstd, xv, rv, w, b, eps, dc_.stream(), amax);
    if (amax) input = LinearInput::amax_ready;
  }
  mark("norm fwd");
  if (input == LinearInput::bf16 && tp_.size > 1) {
    if (!tp_.all_gather_async || fp8_.enabled) {  // FP8: the cast reads the whole gathered input
      tp_gather(y, rows);
    } else {  // the GEMM starts on this rank's rows (LinearCuda::forward)
      tp_.all_gather_async(y, std::size_t(rows * d));
      input = LinearInput::gathering;
    }
  }
  return input;
}

float* CudaDecoder::fused_grad_amax(const LinearCuda* lin) {
  return fp8_.enabled && tp_.size == 1 && lin ? fp8_fused_amax(env(), lin->fp8.dy) : nullptr;
}

void CudaDecoder::layer_forward(int l, int set, const bf16* x_in, const bf16* resid_in, const LayerActs& A, int batch,
                                int seq, bool recompute_only) {
  const std::int64_t n = std::int64_t(batch) * seq;
  const std::int64_t nl = n / tp_.size;  // the residual stream's rows (sequence parallel)

  const LinearEnv e = env();
  if (MlaAttentionCuda* mla = mlas_[std::size_t(l)].get()) {  // BF16 at tp 1: y1 whole, in BF16
    pre_norm(l, true, nullptr, x_in, resid_in, A, nl);
    mla->forward(mla_call(e), set, A.y1, s_.m);
  } else {
    const LayerLinears& M = *linears_[std::size_t(l)];
    const LinearSaved* qkv_fused = M.qkv.fp8_fusable() ? &A.lin[kQkv] : nullptr;  // (LoRA: x in BF16)
    M.qkv.forward(e, A.attn.qkv, A.y1, A.lin[kQkv], n, pre_norm(l, true, qkv_fused, x_in, resid_in, A, nl));
    attention_->forward(l, A.attn, batch, seq, rows_);
    M.out.forward(e, s_.m, A.attn.o, A.lin[kOut], n);  // the attention output lands in m (free until the MLP)
  }
  MlpCuda& mlp = *mlps_[std::size_t(l)];
  const int in = mlp.input_linear();
  const bool fusable = in >= 0 && mlp.linears()[std::size_t(in)]->fp8_fusable();
  const LinearInput y2_input = pre_norm(l, false, fusable ? &mlp.saved(set, in) : nullptr, s_.m, A.r1, A, nl);
  mlp.forward(mlp_call(e, n), set, A.y2, y2_input, s_.m, recompute_only);
}

bool CudaDecoder::layer_backward(int l, int set, const LayerActs& A, int batch, int seq, bool dnext_amax_ready) {
  const ModelConfig& c = cfg_;
  const DenseLayout::Layer& L = layout_.layers[std::size_t(l)];
  MlaAttentionCuda* const mla = mlas_[std::size_t(l)].get();
  cudaStream_t st = dc_.stream();
  const std::int64_t n = std::int64_t(batch) * seq, d = c.d_model;
  const ops::NormKind nk = detail::norm_kind(c.norm);
  const float eps = float(c.norm_eps);
  const ops::Workspace norm_ws{s_.norm_ws, s_.norm_ws_bytes};
  // Selective recompute: the norm outputs the backward reads in BF16 (FP8 saves X^T, a frozen weight reads none; a MLA
  // layer's projections read y1 in BF16)
  const bool sel_y2 = policy_.recomputes_input(mlp_reads_bf16_input(*mlps_[std::size_t(l)], fp8_.enabled));
  const bool sel_y1 = policy_.recomputes_input(
      mla ? !fp8_.enabled : linears_[std::size_t(l)]->qkv.reads_bf16_input(fp8_.enabled));
  const std::int64_t nl = n / tp_.size;
  bf16* const dy_local = tp_.size > 1 ? s_.dyl : s_.dy;  // an input gradient after the reduce-scatter
  // The layer's output gradient arrives in this rank's block of dnext: gathered to all n rows for fc2's backward.
  tp_gather(s_.dnext, nl);

  if (policy_.full()) {  // the whole forward again, from the saved layer input
    layer_forward(l, set, A.r1, nullptr, A, batch, seq, true);
    mark("recompute");
  }
  // MLP (selective recompute: the norm's output here, the MLP's own in its backward)
  if (sel_y2) {
    ops::norm_forward(nk, {own(A.y2, nl), {nl, d}}, {A.mean2, {nl}}, {A.rstd2, {nl}}, {A.r2, {nl, d}}, P(L.norm2_w),
                      P(L.norm2_b), eps, st);
    tp_gather(A.y2, nl);
  }
  const LinearEnv e = env();  // (after a full recompute: its forward ran with the same env)
  mlps_[std::size_t(l)]->backward(mlp_call(e, n), set, A.y2, s_.dnext, dnext_amax_ready, s_.dy,
                                  tp_scatter_async(s_.dy, s_.dyl, nl));
  tp_wait(s_.dy, s_.dyl, nl);
  float* dr2_amax = mla ? nullptr : fused_grad_amax(&linears_[std::size_t(l)]->out);  // out's output gradient
  with_grad_type([&]<class T>(std::type_identity<T>) {
    ops::add_norm_backward(nk, {own(s_.dr2, nl), {nl, d}}, G<T>(L.norm2_w), G<T>(L.norm2_b), {dy_local, {nl, d}},
                           {own(s_.dnext, nl), {nl, d}}, {A.r2, {nl, d}}, P(L.norm2_w), {A.mean2, {nl}},
                           {A.rstd2, {nl}}, st, norm_ws, dr2_amax);
  });
  mark("norm bwd");
  tp_gather(s_.dr2, nl);
  // attention (the norm's output recomputed first with selective recompute; the qkv linear reads it last)
  auto recompute_y1 = [&] {
    ops::norm_forward(nk, {own(A.y1, nl), {nl, d}}, {A.mean1, {nl}}, {A.rstd1, {nl}}, {A.r1, {nl, d}}, P(L.norm1_w),
                      P(L.norm1_b), eps, st);
    tp_gather(A.y1, nl);
    mark("recompute");
  };
  if (mla) {
    if (sel_y1) recompute_y1();
    mla->backward(mla_call(e), set, A.y1, s_.dr2, s_.dy);
  } else {
    const LayerLinears& M = *linears_[std::size_t(l)];
    M.out.backward(e, s_.dout, s_.dr2, A.attn.o, A.lin[kOut], n, {}, dr2_amax != nullptr);
    attention_->backward(l, A.attn, {s_.dout, s_.dqkv, s_.dout8, s_.dqkv8}, batch, seq, rows_);
    if (sel_y1) recompute_y1();
    M.qkv.backward(e, s_.dy, s_.dqkv, A.y1, A.lin[kQkv], n, tp_scatter_async(s_.dy, s_.dyl, nl));
  }
  tp_wait(s_.dy, s_.dyl, nl);
  float* dnext_amax = fused_grad_amax(mlp_output_linear(l - 1));  // the layer below's fc2 output gradient
  with_grad_type([&]<class T>(std::type_identity<T>) {
    ops::add_norm_backward(nk, {own(s_.dnext, nl), {nl, d}}, G<T>(L.norm1_w), G<T>(L.norm1_b), {dy_local, {nl, d}},
                           {own(s_.dr2, nl), {nl, d}}, {A.r1, {nl, d}}, P(L.norm1_w), {A.mean1, {nl}},
                           {A.rstd1, {nl}}, st, norm_ws, dnext_amax);
  });
  mark("norm bwd");
  return dnext_amax != nullptr;
}

}  // namespace tb::model
