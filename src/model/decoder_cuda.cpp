// model/decoder_cuda.cpp: forward and backward of the dense decoder on one GPU (see the .h for the data flow).
#include "model/decoder_cuda.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/cpu/rope.h"
#include "ops/cuda/activation.h"
#include "ops/cuda/cross_entropy.h"
#include "ops/cuda/embedding.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/norm.h"
#include "ops/cuda/rope.h"

namespace tb::model {
namespace {

using bf16 = __nv_bfloat16;
using ops::NormKind;

NormKind norm_kind(Norm n) {
  switch (n) {
    case Norm::rmsnorm: return NormKind::rmsnorm;
    case Norm::layernorm: return NormKind::layernorm;
    case Norm::layernorm1p: return NormKind::layernorm1p;
  }
  return NormKind::rmsnorm;
}

constexpr std::size_t kSlotAlignElements = 128;  // 256 bytes of bf16 (512 of fp32)

// A GEMM shape in one of the three layouts; the weight gradient (atb) is fp32 and accumulated.
ops::GemmShape gemm_shape(std::int64_t m, std::int64_t n, std::int64_t k, ops::GemmLayout layout) {
  ops::GemmShape s;
  s.m = m;
  s.n = n;
  s.k = k;
  s.a = s.b = s.d = DType::bf16;
  s.layout = layout;
  if (layout == ops::GemmLayout::atb) {
    s.d = DType::f32;
    s.accumulate = true;
  }
  return s;
}

template <class T>
TensorView<T> mat(const ops::DeviceBuffer& b, std::int64_t rows, std::int64_t cols) {
  return TensorView<T>(b.as<T>(), {rows, cols});
}
template <class T>
TensorView<T> vec(const ops::DeviceBuffer& b, std::int64_t n) {
  return TensorView<T>(b.as<T>(), {n});
}

// The view of slot `index` inside a flat device buffer (empty for an absent slot, index -1).
template <class T>
TensorView<T> slot_view(T* base, const DenseLayout& L, int index) {
  if (index < 0) return {};
  const Slot& s = L.slots[std::size_t(index)];
  T* p = base + s.offset;
  return s.shape.size() == 1 ? TensorView<T>(p, {s.shape[0]}) : TensorView<T>(p, {s.shape[0], s.shape[1]});
}

void check_ids(const std::int32_t* ids, std::int64_t n, int vocab, const char* what) {
  for (std::int64_t i = 0; i < n; ++i)
    TB_REQUIRE(ids[i] >= 0 && ids[i] < vocab, std::string("CUDA decoder: ") + what + " " + std::to_string(ids[i]) +
                                                  " at index " + std::to_string(i) + " is outside the vocabulary [0, " +
                                                  std::to_string(vocab) + ")");
}

}  // namespace

CudaDecoder::CudaDecoder(ops::DeviceContext& dc, const ModelConfig& cfg)
    : dc_(dc), cfg_(cfg), layout_(model::dense_layout(cfg)) {
  cfg_.validate();
  for (const Slot& s : layout_.slots)
    TB_REQUIRE(s.offset % kSlotAlignElements == 0,
               "CUDA decoder: parameter slot " + s.name + " starts at element " + std::to_string(s.offset) +
                   ", not a multiple of " + std::to_string(kSlotAlignElements) +
                   " (256 bytes of bf16, which the GEMM, norm and cross-entropy kernels assume); choose d_model, ffn "
                   "and head sizes that are multiples of 128");
  TB_REQUIRE(cfg_.head_dim % 16 == 0 || cfg_.pos != Pos::rope,
             "CUDA decoder: RoPE needs head_dim a multiple of 16, got " + std::to_string(cfg_.head_dim));
  dc_.activate();
  params_ = ops::DeviceBuffer(dc_.device(), layout_.total * sizeof(bf16));
  grads_ = ops::DeviceBuffer(dc_.device(), layout_.total * sizeof(float));
  zero_grads();
  if (cfg_.pos == Pos::rope) {
    const ops::cpu::RopeScaling s{cfg_.rope_scaling.factor, cfg_.rope_scaling.low_freq_factor,
                                  cfg_.rope_scaling.high_freq_factor, cfg_.rope_scaling.original_max_position};
    const std::vector<double> inv =
        ops::cpu::rope_inv_freq(cfg_.head_dim, cfg_.rope_theta, cfg_.rope_scaling.enabled ? &s : nullptr);
    inv_freq_ = ops::DeviceBuffer(dc_.device(), inv.size() * sizeof(float));
    ops::upload_rope_inv_freq(vec<float>(inv_freq_, std::int64_t(inv.size())), inv, dc_.stream());
  }
  attention_ = std::make_unique<ops::CudnnAttention>(dc_.device());
  dc_.synchronize();
}

CudaDecoder::~CudaDecoder() {
  // Work enqueued on the stream may still read the buffers about to be freed.
  cudaStreamSynchronize(dc_.stream());
}

void CudaDecoder::load_params(std::span<const float> host_params) {
  TB_REQUIRE(host_params.size() == layout_.total, "CUDA decoder: load_params got " +
                                                      std::to_string(host_params.size()) + " values, the layout has " +
                                                      std::to_string(layout_.total));
  std::vector<std::uint16_t> bits(host_params.size());
  for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = float_to_bf16(host_params[i]);
  dc_.activate();
  TB_CHECK(cudaMemcpyAsync(params_.get(), bits.data(), bits.size() * sizeof(std::uint16_t), cudaMemcpyHostToDevice,
                           dc_.stream()));
  dc_.synchronize();  // bits is freed on return
}

std::vector<float> CudaDecoder::params_to_host() {
  std::vector<std::uint16_t> bits(layout_.total);
  dc_.activate();
  TB_CHECK(cudaMemcpyAsync(bits.data(), params_.get(), bits.size() * sizeof(std::uint16_t), cudaMemcpyDeviceToHost,
                           dc_.stream()));
  dc_.synchronize();
  std::vector<float> out(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_float(bits[i]);
  return out;
}

std::vector<float> CudaDecoder::grads_to_host() {
  std::vector<float> out(layout_.total);
  dc_.activate();
  TB_CHECK(cudaMemcpyAsync(out.data(), grads_.get(), out.size() * sizeof(float), cudaMemcpyDeviceToHost,
                           dc_.stream()));
  dc_.synchronize();
  return out;
}

void CudaDecoder::zero_grads() {
  dc_.activate();
  TB_CHECK(cudaMemsetAsync(grads_.get(), 0, layout_.total * sizeof(float), dc_.stream()));
}

void CudaDecoder::ensure_buffers(int batch, int seq) {
  if (batch == batch_ && seq == seq_) return;
  dc_.synchronize();  // the old buffers may still be in use
  const ModelConfig& c = cfg_;
  const std::size_t n = std::size_t(batch) * std::size_t(seq);
  const std::size_t d = std::size_t(c.d_model), qd = std::size_t(c.q_dim());
  const std::size_t width = qd + 2 * std::size_t(c.kv_dim());
  const std::size_t ffn = std::size_t(c.ffn), fc1_rows = c.act == Act::swiglu ? 2 * ffn : ffn;
  const int dev = dc_.device();
  auto bf = [&](std::size_t elems) { return ops::DeviceBuffer(dev, elems * sizeof(bf16)); };
  auto f32 = [&](std::size_t elems) { return ops::DeviceBuffer(dev, elems * sizeof(float)); };
  auto i32 = [&](std::size_t elems) { return ops::DeviceBuffer(dev, elems * sizeof(std::int32_t)); };

  acts_.clear();
  acts_.resize(std::size_t(c.layers));
  for (LayerActs& A : acts_) {
    A.r1 = bf(n * d), A.mean1 = f32(n), A.rstd1 = f32(n), A.y1 = bf(n * d), A.qkv = bf(n * width);
    A.o = bf(n * qd), A.lse = f32(n * std::size_t(c.heads));
    A.r2 = bf(n * d), A.mean2 = f32(n), A.rstd2 = f32(n), A.y2 = bf(n * d), A.h = bf(n * fc1_rows), A.g = bf(n * ffn);
  }
  tokens_ = i32(n), targets_ = i32(n);
  x0_ = bf(n * d), m_ = bf(n * d), rf_ = bf(n * d), meanf_ = f32(n), rstdf_ = f32(n), yf_ = bf(n * d), loss_ = f32(1);
  ce_scratch_ = ops::DeviceBuffer(dev, ops::lm_head_ce_scratch(std::int64_t(n), c.vocab, c.d_model).bytes);
  dyf_ = bf(n * d), dnext_ = bf(n * d), dr2_ = bf(n * d), dy_ = bf(n * d);
  dg_ = bf(n * ffn), dh_ = bf(n * fc1_rows), dout_ = bf(n * qd), dqkv_ = bf(n * width);
  batch_ = batch;
  seq_ = seq;
}

// y[rows, out] = x[rows, in] W[out, in]^T
void CudaDecoder::linear_forward(bf16* y, const bf16* x, int w_slot, std::int64_t rows) {
  const Slot& w = layout_.slots[std::size_t(w_slot)];
  dc_.gemm(gemm_shape(rows, w.shape[0], w.shape[1], ops::GemmLayout::abt), y, x, params_.as<bf16>() + w.offset);
}

// dx[rows, in] = dy[rows, out] W[out, in] (skipped when dx is null);  dW[out, in] += dy^T x (fp32)
void CudaDecoder::linear_backward(bf16* dx, int w_slot, const bf16* dy, const bf16* x, std::int64_t rows) {
  const Slot& w = layout_.slots[std::size_t(w_slot)];
  const std::int64_t out = w.shape[0], in = w.shape[1];
  if (dx) dc_.gemm(gemm_shape(rows, in, out, ops::GemmLayout::ab), dx, dy, params_.as<bf16>() + w.offset);
  dc_.gemm(gemm_shape(out, in, rows, ops::GemmLayout::atb), grads_.as<float>() + w.offset, dy, x);
}

double CudaDecoder::forward_backward(const std::int32_t* host_tokens, const std::int32_t* host_targets, int batch,
                                     int seq, double grad_scale) {
  const ModelConfig& c = cfg_;
  TB_REQUIRE(batch >= 1 && seq >= 1, "CUDA decoder: batch and seq must be >= 1, got batch " + std::to_string(batch) +
                                         " seq " + std::to_string(seq));
  TB_REQUIRE(seq <= c.seq, "CUDA decoder: seq " + std::to_string(seq) + " is longer than the model's " +
                               std::to_string(c.seq) + " positions");
  const std::int64_t n = std::int64_t(batch) * seq;
  check_ids(host_tokens, n, c.vocab, "token");
  check_ids(host_targets, n, c.vocab, "target");
  dc_.activate();
  ensure_buffers(batch, seq);
  cudaStream_t st = dc_.stream();
  TB_CHECK(cudaMemcpyAsync(tokens_.get(), host_tokens, std::size_t(n) * sizeof(std::int32_t), cudaMemcpyHostToDevice, st));
  TB_CHECK(cudaMemcpyAsync(targets_.get(), host_targets, std::size_t(n) * sizeof(std::int32_t), cudaMemcpyHostToDevice,
                           st));

  const NormKind nk = norm_kind(c.norm);
  const float eps = float(c.norm_eps);
  const std::int64_t d = c.d_model, hd = c.head_dim, qd = c.q_dim(), kvd = c.kv_dim(), width = qd + 2 * kvd;
  const std::int64_t ffn = c.ffn, fc1_rows = c.act == Act::swiglu ? 2 * ffn : ffn;
  auto P = [&](int index) { return TensorView<const bf16>(slot_view(params_.as<bf16>(), layout_, index)); };
  auto G = [&](int index) { return slot_view(grads_.as<float>(), layout_, index); };
  const ops::AttentionShape as = ops::fused_qkv_attention(batch, seq, c.heads, c.kv_heads, hd);
  // Q and K heads of a fused [n, width] buffer: one strided view that skips V (ops/cuda/rope.h).
  auto qk_view = [&](const ops::DeviceBuffer& b) {
    return TensorView<bf16>(b.as<bf16>(), Shape{batch, seq, c.heads + c.kv_heads, hd}, Shape{seq * width, width, hd, 1},
                            4);
  };
  const TensorView<const float> inv_freq =
      c.pos == Pos::rope ? TensorView<const float>(inv_freq_.as<float>(), {hd / 2}) : TensorView<const float>();
  const TensorView<const std::int32_t> tokens(tokens_.as<std::int32_t>(), {n});

  // ---- Forward.
  ops::embedding_forward(mat<bf16>(x0_, n, d), P(layout_.embed), tokens, st);
  if (c.pos == Pos::learned) ops::position_embedding_add(mat<bf16>(x0_, n, d), P(layout_.pos_embed), seq, st);
  TensorView<const bf16> x = mat<bf16>(x0_, n, d), resid;
  for (int l = 0; l < c.layers; ++l) {
    const DenseLayout::Layer& L = layout_.layers[std::size_t(l)];
    LayerActs& A = acts_[std::size_t(l)];
    ops::add_norm_forward(nk, mat<bf16>(A.y1, n, d), mat<bf16>(A.r1, n, d), vec<float>(A.mean1, n),
                          vec<float>(A.rstd1, n), x, resid, P(L.norm1_w), P(L.norm1_b), eps, st);
    linear_forward(A.qkv.as<bf16>(), A.y1.as<bf16>(), L.qkv, n);
    if (c.pos == Pos::rope) ops::rope_forward(qk_view(A.qkv), inv_freq, st);
    const ops::QkvPointers qkv = ops::split_fused_qkv(A.qkv.get(), as);
    attention_->forward(as, {qkv.q, qkv.k, qkv.v, A.o.get(), A.lse.as<float>()}, st);
    linear_forward(m_.as<bf16>(), A.o.as<bf16>(), L.out, n);  // the attention output lands in m (free until the MLP)
    ops::add_norm_forward(nk, mat<bf16>(A.y2, n, d), mat<bf16>(A.r2, n, d), vec<float>(A.mean2, n),
                          vec<float>(A.rstd2, n), mat<bf16>(m_, n, d), mat<bf16>(A.r1, n, d), P(L.norm2_w),
                          P(L.norm2_b), eps, st);
    linear_forward(A.h.as<bf16>(), A.y2.as<bf16>(), L.fc1, n);
    const TensorView<bf16> g = mat<bf16>(A.g, n, ffn);
    const TensorView<const bf16> h = mat<bf16>(A.h, n, fc1_rows);
    switch (c.act) {
      case Act::swiglu: ops::swiglu_forward(g, h, st); break;
      case Act::gelu: ops::gelu_forward(g, h, st); break;
      case Act::sqrelu: ops::sqrelu_forward(g, h, st); break;
    }
    linear_forward(m_.as<bf16>(), A.g.as<bf16>(), L.fc2, n);
    x = mat<bf16>(m_, n, d);
    resid = mat<bf16>(A.r2, n, d);
  }
  ops::add_norm_forward(nk, mat<bf16>(yf_, n, d), mat<bf16>(rf_, n, d), vec<float>(meanf_, n), vec<float>(rstdf_, n),
                        x, resid, P(layout_.final_norm_w), P(layout_.final_norm_b), eps, st);

  // ---- LM head + cross-entropy (forward and its backward in one call: dyf, dWlm).
  ops::lm_head_cross_entropy(dc_, mat<bf16>(dyf_, n, d), G(layout_.lm_head),
                             mat<bf16>(yf_, n, d), P(layout_.lm_head), targets_.as<std::int32_t>(),
                             ops::kLmHeadDefaultChunk, float(grad_scale), loss_.as<float>(),
                             {ce_scratch_.get(), ce_scratch_.bytes()});

  // ---- Backward.
  ops::add_norm_backward(nk, mat<bf16>(dnext_, n, d), G(layout_.final_norm_w), G(layout_.final_norm_b),
                         mat<bf16>(dyf_, n, d), {}, mat<bf16>(rf_, n, d), P(layout_.final_norm_w),
                         vec<float>(meanf_, n), vec<float>(rstdf_, n), st);
  for (int l = c.layers - 1; l >= 0; --l) {
    const DenseLayout::Layer& L = layout_.layers[std::size_t(l)];
    LayerActs& A = acts_[std::size_t(l)];
    // MLP
    linear_backward(dg_.as<bf16>(), L.fc2, dnext_.as<bf16>(), A.g.as<bf16>(), n);
    const TensorView<bf16> dh = mat<bf16>(dh_, n, fc1_rows);
    const TensorView<const bf16> dg = mat<bf16>(dg_, n, ffn), h = mat<bf16>(A.h, n, fc1_rows);
    switch (c.act) {
      case Act::swiglu: ops::swiglu_backward(dh, dg, h, st); break;
      case Act::gelu: ops::gelu_backward(dh, dg, h, st); break;
      case Act::sqrelu: ops::sqrelu_backward(dh, dg, h, st); break;
    }
    linear_backward(dy_.as<bf16>(), L.fc1, dh_.as<bf16>(), A.y2.as<bf16>(), n);
    ops::add_norm_backward(nk, mat<bf16>(dr2_, n, d), G(L.norm2_w), G(L.norm2_b), mat<bf16>(dy_, n, d),
                           mat<bf16>(dnext_, n, d), mat<bf16>(A.r2, n, d), P(L.norm2_w), vec<float>(A.mean2, n),
                           vec<float>(A.rstd2, n), st);
    // attention
    linear_backward(dout_.as<bf16>(), L.out, dr2_.as<bf16>(), A.o.as<bf16>(), n);
    const ops::QkvPointers qkv = ops::split_fused_qkv(A.qkv.get(), as);
    const ops::QkvPointers dqkv = ops::split_fused_qkv(dqkv_.get(), as);
    attention_->backward(as, {qkv.q, qkv.k, qkv.v, A.o.get(), dout_.get(), A.lse.as<float>(), dqkv.q, dqkv.k, dqkv.v},
                         st);
    if (c.pos == Pos::rope) ops::rope_backward(qk_view(dqkv_), inv_freq, st);
    linear_backward(dy_.as<bf16>(), L.qkv, dqkv_.as<bf16>(), A.y1.as<bf16>(), n);
    ops::add_norm_backward(nk, mat<bf16>(dnext_, n, d), G(L.norm1_w), G(L.norm1_b), mat<bf16>(dy_, n, d),
                           mat<bf16>(dr2_, n, d), mat<bf16>(A.r1, n, d), P(L.norm1_w), vec<float>(A.mean1, n),
                           vec<float>(A.rstd1, n), st);
  }
  ops::embedding_backward(G(layout_.embed), mat<bf16>(dnext_, n, d), tokens, st);
  if (c.pos == Pos::learned) ops::position_embedding_backward(G(layout_.pos_embed), mat<bf16>(dnext_, n, d), seq, st);

  float loss = 0;
  TB_CHECK(cudaMemcpyAsync(&loss, loss_.get(), sizeof(float), cudaMemcpyDeviceToHost, st));
  dc_.synchronize();
  return double(loss);
}

}  // namespace tb::model
