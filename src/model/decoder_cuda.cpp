// model/decoder_cuda.cpp: forward and backward of the dense decoder on one GPU (see the .h for the data flow).
#include "model/decoder_cuda.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "model/decoder_common.h"
#include "model/grad_sharing.h"
#include "model/position_pieces.h"
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

void check_ids(const std::int32_t* ids, std::int64_t n, int vocab, const char* what) {
  for (std::int64_t i = 0; i < n; ++i)
    TB_REQUIRE(ids[i] >= 0 && ids[i] < vocab, std::string("CUDA decoder: ") + what + " " + std::to_string(ids[i]) +
                                                  " at index " + std::to_string(i) + " is outside the vocabulary [0, " +
                                                  std::to_string(vocab) + ")");
}

// Bytes rounded up to whole 256-byte blocks (the alignment the GEMM, norm and cross-entropy kernels assume).
constexpr std::size_t pad256(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

// Tokens per LM-head chunk: FP8 keeps two FP8 copies of a chunk's logit gradients beside its bf16 logits, so half
// the bf16 chunk takes the same scratch.
int lm_head_chunk(bool fp8) { return fp8 ? ops::kLmHeadFp8Chunk : ops::kLmHeadDefaultChunk; }

}  // namespace

CudaDecoder::CudaDecoder(ops::DeviceContext& dc, const ModelConfig& cfg, Recompute recompute, bool deterministic,
                         Fp8Options fp8, std::size_t buffer_elems, LayerRange stage)
    : dc_(dc), cfg_(cfg), layout_(model::dense_layout(cfg, stage)), recompute_(recompute), fp8_(fp8),
      deterministic_(deterministic) {
  cfg_.validate();
  TB_REQUIRE(!fp8_.attention || fp8_.enabled,
             "CUDA decoder: FP8 attention (Fp8Options::attention) needs the FP8 linear layers (Fp8Options::enabled)");
  TB_REQUIRE(fp8_.grad == DType::e5m2 || fp8_.grad == DType::e4m3,
             "CUDA decoder: the FP8 gradient format (Fp8Options::grad) must be e5m2 or e4m3, got " +
                 std::string(dtype_name(fp8_.grad)));
  const std::string problem = model::cuda_layout_problem(cfg_, layout_);
  TB_REQUIRE(problem.empty(), "CUDA decoder: " + problem);
  for (const DenseLayout::Layer& L : layout_.layers)
    linears_.push_back({LinearCuda(layout_, L.qkv), LinearCuda(layout_, L.out), LinearCuda(layout_, L.fc1),
                        LinearCuda(layout_, L.fc2)});
  dc_.activate();
  buffer_elems_ = std::max(buffer_elems, layout_.total);
  params_ = ops::DeviceBuffer(dc_.device(), buffer_elems_ * sizeof(bf16));
  grads_ = ops::DeviceBuffer(dc_.device(), buffer_elems_ * grad_size());
  grads_ptr_ = grads_.get();
  TB_CHECK(cudaMemsetAsync(params_.as<bf16>() + layout_.total, 0, (buffer_elems_ - layout_.total) * sizeof(bf16),
                           dc_.stream()));
  zero_grads();
  if (cfg_.pos == Pos::rope) {
    const std::vector<double> inv = detail::rope_inv_freq(cfg_);
    inv_freq_ = ops::DeviceBuffer(dc_.device(), inv.size() * sizeof(float));
    ops::upload_rope_inv_freq(TensorView<float>(inv_freq_.as<float>(), {std::int64_t(inv.size())}), inv, dc_.stream());
  }
  attention_ = std::make_unique<ops::CudnnAttention>(dc_.device());
  if (fp8_.enabled) {
    TB_REQUIRE(cfg_.d_model % 16 == 0 && cfg_.ffn % 16 == 0 && cfg_.q_dim() % 16 == 0,
               "CUDA decoder: FP8 GEMMs need d_model, ffn and heads x head_dim to be multiples of 16");
    fp8_weights_ = ops::DeviceBuffer(dc_.device(), fp8_weight_bytes(layout_));
    const int h = fp8_.delayed ? fp8_.history : 1;
    fp8_fwd_ = std::make_unique<ops::Fp8Scales>(dc_.device(), 8 * layers(), h, dc_.stream());
    fp8_bwd_ = std::make_unique<ops::Fp8Scales>(dc_.device(), 4 * layers(), h, dc_.stream());
    // Linear i = 4 l + k (k: Lin) of the layers: its W and W^T back to back in the buffer, its input and weight slots
    // 2i and 2i + 1 of the forward table, its output gradient slot i of the backward table.
    std::size_t bytes = 0;
    for (int l = 0, i = 0; l < layers(); ++l)
      for (int k = 0; k < 4; ++k, ++i) {
        LinearCuda::Fp8State& f = linear(l, k).fp8;
        f.w = fp8_weights_.as<std::uint8_t>() + bytes;
        f.wt = f.w + pad256(linear(l, k).weight().size);
        f.x = fp8_fwd_->meta(2 * i), f.w_scale = fp8_fwd_->meta(2 * i + 1), f.dy = fp8_bwd_->meta(i);
        bytes += 2 * pad256(linear(l, k).weight().size);
      }
  }
  if (fp8_head()) {
    TB_REQUIRE(cfg_.vocab % 16 == 0,
               "CUDA decoder: the FP8 LM head needs a vocabulary that is a multiple of 16, got " +
                   std::to_string(cfg_.vocab) + "; leave the LM head in BF16");
    fp8_head_w_ = ops::DeviceBuffer(dc_.device(), fp8_lm_head_bytes(cfg_));
    fp8_head_ = std::make_unique<ops::Fp8Scales>(dc_.device(), 3, 1, dc_.stream());  // W, x, dlogits
  }
  if (fp8_.attention) fp8_attention_setup();
  if (fp8_.attention_emulate) {
    TB_REQUIRE(fp8_.enabled && !fp8_.attention && recompute_ == Recompute::none,
               "CUDA decoder: the FP8 attention emulation (a diagnostic of BF16 attention) needs FP8, not FP8 "
               "attention itself, and no recompute");
    fp8_emulate_scales_ = std::make_unique<ops::Fp8Scales>(dc_.device(), 2, 1, dc_.stream());
  }
  dc_.synchronize();
}

std::size_t CudaDecoder::fp8_weight_bytes(const ModelConfig& cfg) { return fp8_weight_bytes(model::dense_layout(cfg)); }

std::size_t CudaDecoder::fp8_weight_bytes(const DenseLayout& L) {
  std::size_t bytes = 0;
  for (const DenseLayout::Layer& layer : L.layers)
    for (int i : {layer.qkv, layer.out, layer.fc1, layer.fc2}) bytes += 2 * pad256(L.slots[std::size_t(i)].size);
  return bytes;
}

std::size_t CudaDecoder::fp8_lm_head_bytes(const ModelConfig& cfg) {
  return 2 * pad256(std::size_t(cfg.vocab) * std::size_t(cfg.d_model));
}

LinearEnv CudaDecoder::env() const {
  return {dc_,      fp8_,      tp_,     params_.as<bf16>(), grads_ptr_, grad_type_, overwrite_linear_grads_,
          s_.xq,    s_.dyq,    s_.dyqt, s_.part,            s_.dyl,     on_op};
}

float* CudaDecoder::fused_amax(const ops::Fp8Meta& m) {
  if (!fp8_.enabled || fp8_.delayed) return nullptr;
  TB_CHECK(cudaMemsetAsync(m.amax, 0, sizeof(float), dc_.stream()));
  return m.amax;
}

// The scaling slot of each linear's input per activation set. Delayed scaling: one slot per linear for every set (its
// scale is fixed for the whole step; the casts of every micro-batch record into one amax, as with accumulation on
// one set). Current scaling: a slot per set, since the scale the forward computes is read again by the weight
// gradient of the same micro-batch, and another micro-batch in flight (pipeline) must not overwrite it.
void CudaDecoder::fp8_assign_input_scales(int slots) {
  const int L = layers();
  if (!fp8_.delayed && slots > 1 && (!fp8_inputs_ || fp8_inputs_->tensors() < 4 * L * (slots - 1)))
    fp8_inputs_ = std::make_unique<ops::Fp8Scales>(dc_.device(), 4 * L * (slots - 1), 1, dc_.stream());
  for (int set = 0; set < slots; ++set)
    for (int l = 0; l < L; ++l)
      for (int k = 0; k < 4; ++k) {
        const int i = l * 4 + k;
        acts_[std::size_t(set * L + l)].lin[k].xs =
            set == 0 || fp8_.delayed ? linear(l, k).fp8.x : fp8_inputs_->meta(4 * L * (set - 1) + i);
      }
}

std::vector<CudaDecoder::Fp8WeightCopy> CudaDecoder::fp8_weight_copies() const {
  std::vector<Fp8WeightCopy> out;
  if (!fp8_.enabled || !fp8_.delayed) return out;
  for (const LayerLinears& M : linears_)
    for (const LinearCuda* lin : {&M.qkv, &M.out, &M.fc1, &M.fc2})
      out.push_back({lin->weight().offset, lin->weight().size, lin->weight_cast(fp8_.margin)});
  return out;
}

void CudaDecoder::fp8_begin_step() {
  if (!fp8_.enabled) return;
  dc_.activate();
  if (!fp8_weights_by_optimizer_ || fp8_weights_stale_) {
    const LinearEnv e = env();
    for (const LayerLinears& M : linears_)
      for (const LinearCuda* lin : {&M.qkv, &M.out, &M.fc1, &M.fc2}) lin->cast_weight(e);
  }
  fp8_weights_stale_ = false;
  if (fp8_head()) {  // current scaling whatever the recipe
    const Slot& w = layout_.slots[std::size_t(layout_.lm_head)];
    ops::Fp8CastArgs a;
    a.x = params_.as<bf16>() + w.offset, a.rows = w.shape[0], a.cols = w.shape[1], a.type = DType::e4m3;
    a.q = fp8_head_w_.get(), a.qt = fp8_head_w_.as<std::uint8_t>() + fp8_lm_head_bytes(cfg_) / 2;
    fp8_scaled_cast(a, fp8_head_->meta(0), /*delayed=*/false, /*amax_ready=*/false);
  }
  mark("fp8 weight casts");
}

void CudaDecoder::fp8_end_step() {
  if (!fp8_.enabled) return;
  std::vector<std::pair<const ops::Fp8Scales*, DType>> delayed;  // the histories this step rolls
  if (fp8_.delayed) delayed = {{fp8_fwd_.get(), DType::e4m3}, {fp8_bwd_.get(), fp8_.grad}};
  if (fp8_attention()) {  // o, dS, dq, dk, dv: delayed in both recipes
    delayed.emplace_back(fp8_attn_o_.get(), DType::e4m3);
    delayed.emplace_back(fp8_attn_grad_.get(), fp8_.grad);
  }
  const auto algo = fp8_.most_recent ? ops::AmaxAlgo::most_recent : ops::AmaxAlgo::max;
  if (fp8_reduce_amax)
    for (const auto& [f, type] : delayed) fp8_reduce_amax(f->base(), std::size_t(f->tensors()) * f->slot_stride());
  for (const auto& [f, type] : delayed) ops::fp8_update_scales(*f, type, algo, fp8_.margin, dc_.stream());
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
  fp8_weights_stale_ = true;
  dc_.activate();
  TB_CHECK(cudaMemcpyAsync(params_.get(), bits.data(), bits.size() * sizeof(std::uint16_t), cudaMemcpyHostToDevice,
                           dc_.stream()));
  dc_.synchronize();  // bits is freed on return
}

// n elements of type t (f32 or bf16) from the device, as floats (bf16 widened).
static std::vector<float> to_host_floats(ops::DeviceContext& dc, const void* src, std::size_t n, DType t) {
  std::vector<float> out(n);
  std::vector<std::uint16_t> bits(t == DType::bf16 ? n : 0);
  void* dst = t == DType::bf16 ? static_cast<void*>(bits.data()) : out.data();
  dc.activate();
  TB_CHECK(cudaMemcpyAsync(dst, src, n * dtype_size(t), cudaMemcpyDeviceToHost, dc.stream()));
  dc.synchronize();
  for (std::size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_float(bits[i]);
  return out;
}

std::vector<float> CudaDecoder::params_to_host() {
  return to_host_floats(dc_, params_.get(), layout_.total, DType::bf16);
}

std::vector<float> CudaDecoder::grads_to_host() {
  TB_REQUIRE(grads_ptr_, "CUDA decoder: grads_to_host() of shared gradients before prepare()");
  return to_host_floats(dc_, grads_ptr_, layout_.total, grad_type_);
}

void CudaDecoder::set_grad_type(DType t) {
  TB_REQUIRE(t == DType::f32 || t == DType::bf16,
             "CUDA decoder: gradients are f32 or bf16, got " + std::string(dtype_name(t)));
  TB_REQUIRE(batch_ == 0, "CUDA decoder: set_grad_type() must come before prepare()");
  if (t == grad_type_) return;
  grad_type_ = t;
  if (share_grads_) return;  // allocated with the arena
  dc_.activate();
  grads_ = ops::DeviceBuffer();
  grads_ = ops::DeviceBuffer(dc_.device(), buffer_elems_ * grad_size());
  grads_ptr_ = grads_.get();
  zero_grads();
}

float* CudaDecoder::grads_device() const {
  TB_REQUIRE(grad_type_ == DType::f32, "CUDA decoder: grads_device() is the fp32 gradients; these are bf16");
  return static_cast<float*>(grads_ptr_);
}

void CudaDecoder::zero_grads_for_overwrite() {
  dc_.activate();
  std::vector<bool> linear(layout_.slots.size(), false), lazy(layout_.slots.size(), false);
  for (const DenseLayout::Layer& L : layout_.layers)
    for (int i : {L.qkv, L.out, L.fc1, L.fc2}) linear[std::size_t(i)] = true;
  if (last_stage()) linear[std::size_t(layout_.lm_head)] = true;  // the first LM head call writes it (tied: first)
  for (int i : shared_grad_slots()) lazy[std::size_t(i)] = true;
  for (std::size_t i = 0; i < layout_.slots.size(); ++i)
    if (!linear[i] && !lazy[i]) zero_grad_slot(int(i));
  overwrite_linear_grads_ = overwrite_head_grad_ = true;
}

void CudaDecoder::zero_grad_slot(int i) {
  if (i < 0) return;
  const Slot& s = layout_.slots[std::size_t(i)];
  TB_CHECK(cudaMemsetAsync(grad_at(s.offset), 0, s.size * grad_size(), dc_.stream()));
}

// A layer's norm weights and biases (-1: absent): the gradients its backward accumulates into.
static std::array<int, 4> norm_slots(const DenseLayout::Layer& L) {
  return {L.norm1_w, L.norm1_b, L.norm2_w, L.norm2_b};
}

std::vector<int> CudaDecoder::shared_grad_slots() const {
  if (!share_grads_) return {};
  std::vector<int> out;
  for (const DenseLayout::Layer& L : layout_.layers)
    for (int i : norm_slots(L))
      if (i >= 0) out.push_back(i);
  if (!cfg_.tied_embeddings)
    for (int i : {layout_.embed, layout_.pos_embed})
      if (i >= 0) out.push_back(i);
  return out;
}

void CudaDecoder::zero_grads() {
  TB_REQUIRE(grads_ptr_, "CUDA decoder: zero_grads() of shared gradients before prepare()");
  dc_.activate();
  TB_CHECK(cudaMemsetAsync(grads_ptr_, 0, buffer_elems_ * grad_size(), dc_.stream()));
}

CudaDecoder::ArenaParts CudaDecoder::arena_parts(const ModelConfig& c, LayerRange stage, int slots) {
  const int last = stage.last < 0 ? c.layers : stage.last;
  return {last - stage.first, slots, stage.first == 0, last == c.layers};
}

CudaDecoder::ArenaSize CudaDecoder::carve(const ModelConfig& c, const ArenaParts& parts, int batch, int seq,
                                          Recompute rc, const Fp8Options& fp8_options, int tp, std::byte* base,
                                          std::vector<LayerActs>* acts, std::vector<HeadActs>* heads, Scratch* S,
                                          const std::vector<std::size_t>* block_at) {
  const bool fp8 = fp8_options.enabled, fp8_head = fp8 && fp8_options.lm_head;
  const std::size_t n = std::size_t(batch) * std::size_t(seq);
  const std::size_t nl = n / std::size_t(tp);  // the residual stream's rows on this rank (sequence parallel)
  const std::size_t d = std::size_t(c.d_model), qd = std::size_t(c.q_dim());
  const std::size_t width = qd + 2 * std::size_t(c.kv_dim());
  const std::size_t ffn = std::size_t(c.ffn), fc1_rows = c.act == Act::swiglu ? 2 * ffn : ffn;
  std::size_t used = 0;
  auto take_bytes = [&](std::size_t bytes) -> void* {
    used = pad256(used);
    void* p = base ? static_cast<void*>(base + used) : nullptr;
    used += bytes;
    return p;
  };
  auto bf = [&](std::size_t elems) { return static_cast<bf16*>(take_bytes(elems * sizeof(bf16))); };
  auto f32 = [&](std::size_t elems) { return static_cast<float*>(take_bytes(elems * sizeof(float))); };

  // What every layer keeps (see the header) in one block per (set, layer); the shared copy of the rest after them.
  const bool sel = rc == Recompute::selective, full = rc == Recompute::full;
  const bool fp8_attn = fp8 && fp8_options.attention;  // its backward reads qkv8 and o8; out's wgrad reads X^T
  auto u8 = [&](std::size_t elems) { return static_cast<std::uint8_t*>(take_bytes(elems)); };
  auto carve_fields = [&](LayerActs& A, bool per_layer) {  // per_layer: the kept fields; else the shared copy's
    auto field = [&](auto LayerActs::*member, std::size_t elems, bool kept, auto alloc) {
      if (kept == per_layer) A.*member = alloc(elems);
    };
    field(&LayerActs::r1, nl * d, true, bf);
    field(&LayerActs::mean1, nl, !full, f32);
    field(&LayerActs::rstd1, nl, !full, f32);
    field(&LayerActs::y1, n * d, !sel && !full && !fp8, bf);  // FP8: the weight gradients read X^T instead
    field(&LayerActs::qkv, n * width, !full && !fp8_attn, bf);
    field(&LayerActs::o, n * qd, !full && !fp8_attn, bf);
    field(&LayerActs::lse, n * std::size_t(c.heads), !full, f32);
    field(&LayerActs::r2, nl * d, !full, bf);
    field(&LayerActs::mean2, nl, !full, f32);
    field(&LayerActs::rstd2, nl, !full, f32);
    field(&LayerActs::y2, n * d, !sel && !full && !fp8, bf);
    field(&LayerActs::h, n * fc1_rows, !full, bf);
    field(&LayerActs::g, n * ffn, !sel && !full && !fp8, bf);
    if (fp8_attn) {
      field(&LayerActs::qkv8, n * width, !full, u8);
      field(&LayerActs::o8, n * qd, !full, u8);
    }
    const std::size_t xt_cols[4] = {d, qd, d, ffn};  // FP8: the inputs of qkv, out, fc1, fc2
    for (int k = 0; k < 4 && fp8; ++k)
      if (!full == per_layer) A.lin[k].xt = u8(n * xt_cols[k]);
  };
  std::vector<LayerActs> layers(std::size_t(parts.layers) * std::size_t(parts.slots));  // every set's layers
  std::size_t block = 0;
  for (std::size_t i = 0; i < layers.size(); ++i) {  // back to back, or where block_at says (used resumes after)
    const std::size_t next = used, at = block_at ? (*block_at)[i] : pad256(used);
    used = at;
    carve_fields(layers[i], true);
    block = pad256(used) - at;
    if (block_at) used = next;
  }
  const std::size_t blocks_end = pad256(used);
  LayerActs shared{};
  carve_fields(shared, false);
  auto fill_shared = [&](auto LayerActs::*member) {
    for (LayerActs& A : layers)
      if (!(A.*member)) A.*member = shared.*member;
  };
  fill_shared(&LayerActs::r1), fill_shared(&LayerActs::mean1), fill_shared(&LayerActs::rstd1);
  fill_shared(&LayerActs::y1), fill_shared(&LayerActs::qkv), fill_shared(&LayerActs::o), fill_shared(&LayerActs::lse);
  fill_shared(&LayerActs::r2), fill_shared(&LayerActs::mean2), fill_shared(&LayerActs::rstd2);
  fill_shared(&LayerActs::y2), fill_shared(&LayerActs::h), fill_shared(&LayerActs::g);
  fill_shared(&LayerActs::qkv8), fill_shared(&LayerActs::o8);
  for (LayerActs& A : layers)
    for (int k = 0; k < 4; ++k)
      if (!A.lin[k].xt) A.lin[k].xt = shared.lin[k].xt;

  std::vector<HeadActs> head_sets(parts.head ? std::size_t(parts.slots) : 0);
  for (HeadActs& H : head_sets) H.rf = bf(nl * d), H.dyf = bf(nl * d), H.meanf = f32(nl), H.rstdf = f32(nl);

  Scratch s{};
  s.tokens = static_cast<std::int32_t*>(take_bytes(n * sizeof(std::int32_t)));
  s.targets = static_cast<std::int32_t*>(take_bytes(n * sizeof(std::int32_t)));
  if (parts.embedding) s.x0 = bf(nl * d);
  s.m = bf(nl * d);
  if (parts.head) s.yf = bf(nl * d);
  s.loss = f32(1);
  s.dnext = bf(n * d), s.dr2 = bf(n * d), s.dy = bf(n * d);
  s.dout = bf(n * qd), s.dqkv = bf(n * width);  // dg and dh live in g and h (see layer_backward)
  if (tp > 1) s.part = bf(n * d), s.dyl = bf(nl * d);
  if (fp8_attn) s.dout8 = u8(n * qd), s.dqkv8 = u8(n * width);
  s.ce_bytes = parts.head ? ops::lm_head_ce_scratch(std::int64_t(nl), c.vocab, c.d_model, lm_head_chunk(fp8_head),
                                                   fp8_head)
                                .bytes
                          : 0;
  // The LM head's scratch and the FP8 linears' (xq, dyq, dyq^T) share bytes: the head runs between the layers'
  // forward and backward, on the same stream, while no linear holds its FP8 scratch.
  const std::size_t widest_in = std::max({d, qd, ffn}), widest_out = std::max({width, d, fc1_rows});
  const std::size_t fp8_bytes = fp8 ? pad256(n * widest_in) + 2 * pad256(n * widest_out) : 0;
  s.ce = take_bytes(std::max(s.ce_bytes, fp8_bytes));
  if (fp8 && base) {
    auto* at = static_cast<std::uint8_t*>(s.ce);
    s.xq = at, s.dyq = at + pad256(n * widest_in), s.dyqt = s.dyq + pad256(n * widest_out);
  }
  s.norm_ws_bytes = ops::norm_backward_workspace_bytes(std::int64_t(nl), c.d_model);
  s.norm_ws = take_bytes(s.norm_ws_bytes);
  s.embed_ws_bytes =
      parts.embedding ? ops::embedding_backward_workspace_bytes(std::int64_t(nl), c.vocab, c.d_model) : 0;
  s.embed_ws = take_bytes(s.embed_ws_bytes);
  if (acts) *acts = std::move(layers);
  if (heads) *heads = std::move(head_sets);
  if (S) *S = s;
  return {pad256(used), pad256(used) - blocks_end, block};
}

std::size_t CudaDecoder::activation_bytes(const ModelConfig& cfg, int batch, int seq, Recompute recompute,
                                          const Fp8Options& fp8, int tp, LayerRange stage, int slots) {
  return carve(cfg, arena_parts(cfg, stage, slots), batch, seq, recompute, fp8, tp, nullptr, nullptr, nullptr,
               nullptr)
      .total;
}

// model/grad_sharing.h for this layout: block k may overlap the gradients below layer k's (tied: above the
// embedding's, which the LM head accumulates first).
static GradSharing plan_grad_sharing(const DenseLayout& L, bool tied, std::size_t block, std::size_t grad_size) {
  auto begin = [&](std::size_t l) {
    return std::int64_t(L.slots[std::size_t(L.layers[l].norm1_w)].offset * grad_size);
  };
  std::vector<std::int64_t> free_end;
  for (std::size_t l = 0; l < L.layers.size(); ++l) free_end.push_back(begin(l));
  return place_blocks_over_grads(std::int64_t(block), tied && !L.layers.empty() ? begin(0) : 0, free_end);
}

std::size_t CudaDecoder::shared_arena_bytes(const ModelConfig& cfg, int batch, int seq, Recompute recompute,
                                            const Fp8Options& fp8, int tp, DType grads) {
  const ArenaSize size =
      carve(cfg, arena_parts(cfg, {}, 1), batch, seq, recompute, fp8, tp, nullptr, nullptr, nullptr, nullptr);
  const GradSharing g = plan_grad_sharing(model::dense_layout(cfg), cfg.tied_embeddings, size.block, dtype_size(grads));
  return size.rest + std::size_t(g.below);
}

void CudaDecoder::share_grads_with_activations() {
  TB_REQUIRE(batch_ == 0, "CUDA decoder: share_grads_with_activations() must come before prepare()");
  share_grads_ = true;
  grads_ = ops::DeviceBuffer();  // the gradients hold nothing between steps: their bytes come back with the arena
  grads_ptr_ = nullptr;
}

void CudaDecoder::set_tensor_parallel(TensorParallelOps tp) {
  TB_REQUIRE(batch_ == 0, "CUDA decoder: set_tensor_parallel() must come before prepare()");
  TB_REQUIRE(tp.size >= 1 && tp.rank >= 0 && tp.rank < tp.size, "CUDA decoder: tensor-parallel rank out of range");
  if (tp.size > 1) {
    TB_REQUIRE(tp.all_gather && tp.reduce_scatter, "CUDA decoder: tensor parallel needs all_gather and reduce_scatter");
  }
  tp_ = std::move(tp);
}

CudaDecoder::bf16* CudaDecoder::own(bf16* full, std::int64_t local_rows) const {
  return full + std::size_t(tp_.rank) * std::size_t(local_rows) * std::size_t(cfg_.d_model);
}

void CudaDecoder::tp_gather(bf16* full, std::int64_t local_rows) {
  if (tp_.size == 1) return;
  tp_.all_gather(full, std::size_t(local_rows) * std::size_t(cfg_.d_model));
  mark("tp all-gather");
}

void CudaDecoder::tp_scatter(const bf16* full, bf16* local, std::int64_t local_rows) {
  tp_.reduce_scatter(full, local, std::size_t(local_rows) * std::size_t(cfg_.d_model));
  mark("tp reduce-scatter");
}

std::function<void()> CudaDecoder::tp_scatter_async(const bf16* full, bf16* local, std::int64_t local_rows) {
  if (tp_.size == 1 || !tp_.reduce_scatter_async) return {};
  return [this, full, local, local_rows] {
    tp_.reduce_scatter_async(full, local, std::size_t(local_rows) * std::size_t(cfg_.d_model));
  };
}

void CudaDecoder::tp_wait(const bf16* full, bf16* local, std::int64_t local_rows) {
  if (tp_.size == 1) return;
  if (!tp_.reduce_scatter_async) return tp_scatter(full, local, local_rows);  // not started: now, on the stream
  tp_.wait_async();
  mark("tp reduce-scatter (overlapped)");
}

std::size_t CudaDecoder::attention_workspace_bytes() const {
  return attention_->workspace_bytes() + (fp8_attention_ ? fp8_attention_->workspace_bytes() : 0);
}

void CudaDecoder::prepare(int batch, int seq, int slots) {
  const ModelConfig& c = cfg_;
  TB_REQUIRE(batch >= 1 && seq >= 1, "CUDA decoder: batch and seq must be >= 1, got batch " + std::to_string(batch) +
                                         " seq " + std::to_string(seq));
  TB_REQUIRE(seq <= c.seq, "CUDA decoder: seq " + std::to_string(seq) + " is longer than the model's " +
                               std::to_string(c.seq) + " positions");
  TB_REQUIRE(slots >= 1, "CUDA decoder: prepare() needs at least one activation set, got " + std::to_string(slots));
  if (batch == batch_ && seq == seq_ && slots <= slots_) return;
  slots = std::max(slots, batch == batch_ && seq == seq_ ? slots_ : 1);
  dc_.activate();
  dc_.synchronize();  // the old arena may still be in use
  arena_ = ops::DeviceBuffer();
  TB_REQUIRE(std::int64_t(batch) * seq % tp_.size == 0,
             "CUDA decoder: batch x seq (" + std::to_string(std::int64_t(batch) * seq) +
                 " tokens) must divide by the tensor-parallel size " + std::to_string(tp_.size) + " (sequence parallel)");
  TB_REQUIRE(!fp8_head() || std::int64_t(batch) * seq / tp_.size % 16 == 0,
             "CUDA decoder: the FP8 LM head needs a multiple of 16 tokens per rank, got " +
                 std::to_string(std::int64_t(batch) * seq / tp_.size) + "; leave the LM head in BF16");
  TB_REQUIRE(!share_grads_ || cp_.size == 1,
             "CUDA decoder: gradients that share the activations' memory need cp = 1 (each rank the whole sequence)");
  TB_REQUIRE(!share_grads_ || slots == 1,
             "CUDA decoder: gradients that share the activations' memory allow one activation set, not " +
                 std::to_string(slots) + " (a pipeline schedule keeps several micro-batches in flight)");
  const ArenaParts parts{layers(), slots, first_stage(), last_stage()};
  const ArenaSize size = carve(c, parts, batch, seq, recompute_, fp8_, tp_.size, nullptr, nullptr, nullptr, nullptr);
  if (!share_grads_) {
    arena_ = ops::DeviceBuffer(dc_.device(), size.total);
    carve(c, parts, batch, seq, recompute_, fp8_, tp_.size, static_cast<std::byte*>(arena_.get()), &acts_, &heads_,
          &s_);
  } else {  // [rest | below | gradients], the layer blocks over the gradients and below them
    const GradSharing g = plan_grad_sharing(layout_, cfg_.tied_embeddings, size.block, grad_size());
    const std::size_t at = size.rest + std::size_t(g.below);
    arena_ = ops::DeviceBuffer(dc_.device(), at + buffer_elems_ * grad_size());
    auto* base = static_cast<std::byte*>(arena_.get());
    grads_ptr_ = base + at;
    std::vector<std::size_t> block_at;
    for (std::int64_t o : g.block_at) block_at.push_back(std::size_t(std::int64_t(at) + o));
    carve(c, parts, batch, seq, recompute_, fp8_, tp_.size, base, &acts_, &heads_, &s_, &block_at);
  }
  if (fp8_.enabled) fp8_assign_input_scales(slots);
  if (fp8_attention())
    fp8_attention_prepare(batch, seq, slots);  // qkv8's scaling slots and the FP8 attention plans
  else if (cp_.size > 1)
    cp_prepare(batch, seq);  // its scratch and the two chunks' attention plans
  else
    attention_->plan(attention_shape(batch, seq));  // may grow its workspace
  if (fp8_.attention_emulate) {
    TB_REQUIRE(cp_.size == 1, "CUDA decoder: the FP8 attention emulation takes no context parallel");
    const std::size_t n = std::size_t(batch) * std::size_t(seq);
    fp8_emulate_buf_ = ops::DeviceBuffer(dc_.device(), n * std::size_t(cfg_.q_dim() + 2 * cfg_.kv_dim()));
  }
  batch_ = batch;
  seq_ = seq;
  slots_ = slots;
}

ops::AttentionShape CudaDecoder::attention_shape(int batch, int seq) const {
  return ops::fused_qkv_attention(batch, seq, cfg_.heads, cfg_.kv_heads, cfg_.head_dim, deterministic_);
}

TensorView<const bf16> CudaDecoder::P(int slot) const {
  return TensorView<const bf16>(detail::slot_view(params_.as<bf16>(), layout_, slot));
}
template <class T>
TensorView<T> CudaDecoder::G(int slot) const {
  TB_REQUIRE(dtype_of<T>() == grad_type_, "CUDA decoder: internal: gradient view of the wrong type");
  return detail::slot_view(static_cast<T*>(grads_ptr_), layout_, slot);
}

TensorView<bf16> CudaDecoder::qk_view(bf16* fused_qkv, int batch, int seq) const {
  const std::int64_t hd = cfg_.head_dim, width = cfg_.q_dim() + 2 * std::int64_t(cfg_.kv_dim());
  return TensorView<bf16>(fused_qkv, Shape{batch, seq, cfg_.heads + cfg_.kv_heads, hd},
                          Shape{seq * width, width, hd, 1}, 4);
}

TensorView<const float> CudaDecoder::inv_freq() const {
  if (cfg_.pos != Pos::rope) return {};
  return TensorView<const float>(inv_freq_.as<float>(), {cfg_.head_dim / 2});
}

ops::Activation CudaDecoder::activation() const {
  switch (cfg_.act) {
    case Act::swiglu: return ops::Activation::swiglu;
    case Act::gelu: return ops::Activation::gelu;
    case Act::sqrelu: break;
  }
  return ops::Activation::sqrelu;
}

ops::Fp8CastArgs CudaDecoder::fp8_delayed_cast(const ops::Fp8Meta& m, DType type, std::int64_t rows,
                                               std::int64_t cols, std::uint8_t* q, std::uint8_t* qt) const {
  return model::fp8_delayed_cast(m, type, rows, cols, q, qt, fp8_.margin);
}

ops::Fp8CastArgs CudaDecoder::fp8_input_cast(const LayerActs& A, int k, std::int64_t rows, std::int64_t cols,
                                             bool transpose_only) const {
  return fp8_delayed_cast(A.lin[k].xs, DType::e4m3, rows, cols, transpose_only ? nullptr : s_.xq, A.lin[k].xt);
}

void CudaDecoder::fp8_activation_forward(const LayerActs& A, std::int64_t rows, bool transpose_only) {
  const std::int64_t fc1_rows = cfg_.act == Act::swiglu ? 2 * cfg_.ffn : cfg_.ffn;
  ops::activation_forward_fp8(activation(), {A.h, {rows, fc1_rows}},
                              fp8_input_cast(A, kFc2, rows, cfg_.ffn, transpose_only), dc_.stream());
}

void CudaDecoder::fp8_activation_backward(int l, const LayerActs& A, std::int64_t rows) {
  const std::int64_t fc1_rows = cfg_.act == Act::swiglu ? 2 * cfg_.ffn : cfg_.ffn;
  ops::Fp8CastArgs cast = fp8_delayed_cast(linears_[std::size_t(l)].fc1.fp8.dy, fp8_.grad, rows, fc1_rows, s_.dyq,
                                           s_.dyqt);
  cast.stochastic = fp8_.grad_stochastic;
  ops::activation_backward_fp8(activation(), {A.g, {rows, cfg_.ffn}}, {A.h, {rows, fc1_rows}}, cast, dc_.stream());
}

LinearInput CudaDecoder::pre_norm(int l, int k, const bf16* x, const bf16* resid, const LayerActs& A,
                                  std::int64_t rows) {
  const DenseLayout::Layer& L = layout_.layers[std::size_t(l)];
  const NormKind nk = norm_kind(cfg_.norm);
  const float eps = float(cfg_.norm_eps);
  const std::int64_t d = cfg_.d_model;
  const bool first = k == kQkv;
  bf16* const y = first ? A.y1 : A.y2;
  const TensorView<bf16> r(first ? A.r1 : A.r2, {rows, d});
  const TensorView<float> mean(first ? A.mean1 : A.mean2, {rows}), rstd(first ? A.rstd1 : A.rstd2, {rows});
  const TensorView<const bf16> xv(x, {rows, d});
  const TensorView<const bf16> rv = resid ? TensorView<const bf16>(resid, {rows, d}) : TensorView<const bf16>();
  const TensorView<const bf16> w = P(first ? L.norm1_w : L.norm2_w), b = P(first ? L.norm1_b : L.norm2_b);
  const bool whole = fp8_.enabled && tp_.size == 1;
  LinearInput input = LinearInput::bf16;
  if (whole && fp8_.delayed) {
    ops::add_norm_forward_fp8(nk, fp8_input_cast(A, k, rows, d, false), r, mean, rstd, xv, rv, w, b, eps,
                              dc_.stream());
    input = LinearInput::cast;
  } else {
    float* amax = whole ? fused_amax(A.lin[k].xs) : nullptr;
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

float* CudaDecoder::fused_grad_amax(int l, int k) {
  return fp8_.enabled && tp_.size == 1 && l >= 0 ? fused_amax(linear(l, k).fp8.dy) : nullptr;
}

double CudaDecoder::forward_backward(const std::int32_t* host_tokens, const std::int32_t* host_targets, int batch,
                                     int seq, double grad_scale) {
  TB_REQUIRE(first_stage() && last_stage(),
             "CUDA decoder: forward_backward() runs the whole model; a pipeline stage runs forward() and backward()");
  prepare(batch, seq);
  const std::int64_t n = std::int64_t(batch) * seq;
  check_ids(host_tokens, n, cfg_.vocab, "token");
  check_ids(host_targets, n, cfg_.vocab, "target");
  cudaStream_t st = dc_.stream();
  TB_CHECK(cudaMemcpyAsync(s_.tokens, host_tokens, std::size_t(n) * sizeof(std::int32_t), cudaMemcpyHostToDevice, st));
  TB_CHECK(
      cudaMemcpyAsync(s_.targets, host_targets, std::size_t(n) * sizeof(std::int32_t), cudaMemcpyHostToDevice, st));
  if (share_grads_) zero_grads_for_overwrite();  // the gradients are written, never accumulated
  fp8_begin_step();
  forward_backward_device(s_.tokens, s_.targets, batch, seq, grad_scale, s_.loss);
  fp8_end_step();
  float loss = 0;
  TB_CHECK(cudaMemcpyAsync(&loss, s_.loss, sizeof(float), cudaMemcpyDeviceToHost, st));
  dc_.synchronize();
  return double(loss);
}

void CudaDecoder::layer_forward(int l, const bf16* x_in, const bf16* resid_in, const LayerActs& A, int batch, int seq,
                                bool to_fc1_act) {
  const ModelConfig& c = cfg_;
  cudaStream_t st = dc_.stream();
  const std::int64_t n = std::int64_t(batch) * seq, ffn = c.ffn;
  const std::int64_t fc1_rows = c.act == Act::swiglu ? 2 * ffn : ffn;
  const ops::AttentionShape as = attention_shape(batch, seq);
  const std::int64_t nl = n / tp_.size;  // the residual stream's rows (sequence parallel)

  const LayerLinears& M = linears_[std::size_t(l)];
  const LinearEnv e = env();
  M.qkv.forward(e, A.qkv, A.y1, A.lin[kQkv], n, pre_norm(l, kQkv, x_in, resid_in, A, nl));
  if (cp_.size > 1) {  // this rank's chunks against every rank's keys (model/decoder_cp_cuda.cpp)
    if (c.pos == Pos::rope) cp_rope(A.qkv, batch, seq, false);
    cp_attention_forward(A, batch, seq);
  } else {
    if (c.pos == Pos::rope) {
      ops::rope_forward(qk_view(A.qkv, batch, seq), inv_freq(), st);
      mark("rope fwd");
    }
    if (fp8_attention()) {
      fp8_attention_forward(l, A, batch, seq);
    } else {
      const std::int64_t qd = c.q_dim(), width = qd + 2 * std::int64_t(c.kv_dim());
      if (fp8_.attention_emulate & kEmulateQkv) fp8_attention_emulate(A.qkv, n, width, 0);
      const ops::QkvPointers qkv = ops::split_fused_qkv(A.qkv, as);
      attention_->forward(as, {qkv.q, qkv.k, qkv.v, A.o, A.lse}, st);
      mark("attention fwd");
      if (fp8_.attention_emulate & kEmulateO) fp8_attention_emulate(A.o, n, qd, 1);
    }
  }
  M.out.forward(e, s_.m, A.o, A.lin[kOut], n);  // the attention output lands in m (free until the MLP)
  M.fc1.forward(e, A.h, A.y2, A.lin[kFc1], n, pre_norm(l, kFc1, s_.m, A.r1, A, nl));
  // FP8: fc2's weight gradient reads X^T, which a recompute (to_fc1_act) must refresh too, without the GEMM.
  if (fp8_.enabled && fp8_.delayed) {  // the scale is known: the activation emits fc2's FP8 input; g is not written
    fp8_activation_forward(A, n, to_fc1_act);
    mark("activation fwd");
    if (to_fc1_act) return;
    M.fc2.forward(e, s_.m, nullptr, A.lin[kFc2], n, LinearInput::cast);
  } else {
    float* g_amax = fused_amax(A.lin[kFc2].xs);  // current scaling: fc2's input amax from the activation's output
    ops::activation_forward(activation(), {A.g, {n, ffn}}, {A.h, {n, fc1_rows}}, st, g_amax);
    mark("activation fwd");
    if (to_fc1_act) {
      if (fp8_.enabled) M.fc2.cast_input(e, A.g, n, A.lin[kFc2].xs, g_amax != nullptr, nullptr, A.lin[kFc2].xt);
      return;
    }
    M.fc2.forward(e, s_.m, A.g, A.lin[kFc2], n, g_amax ? LinearInput::amax_ready : LinearInput::bf16);
  }
}

bool CudaDecoder::layer_backward(int l, const LayerActs& A, int batch, int seq, bool dnext_amax_ready) {
  const ModelConfig& c = cfg_;
  const DenseLayout::Layer& L = layout_.layers[std::size_t(l)];
  const LayerLinears& M = linears_[std::size_t(l)];
  cudaStream_t st = dc_.stream();
  const std::int64_t n = std::int64_t(batch) * seq, d = c.d_model, ffn = c.ffn;
  const std::int64_t fc1_rows = c.act == Act::swiglu ? 2 * ffn : ffn;
  const NormKind nk = norm_kind(c.norm);
  const float eps = float(c.norm_eps);
  const ops::AttentionShape as = attention_shape(batch, seq);
  const ops::Workspace norm_ws{s_.norm_ws, s_.norm_ws_bytes};
  const bool sel = recompute_ == Recompute::selective && !fp8_.enabled;  // FP8 saves X^T: nothing to recompute
  const std::int64_t nl = n / tp_.size;
  bf16* const dy_local = tp_.size > 1 ? s_.dyl : s_.dy;  // an input gradient after the reduce-scatter
  // The layer's output gradient arrives in this rank's block of dnext: gathered to all n rows for fc2's backward.
  tp_gather(s_.dnext, nl);

  if (recompute_ == Recompute::full) {  // the whole forward again, from the saved layer input
    layer_forward(l, A.r1, nullptr, A, batch, seq, true);
    mark("recompute");
  }
  // MLP
  if (sel) {
    ops::norm_forward(nk, {own(A.y2, nl), {nl, d}}, {A.mean2, {nl}}, {A.rstd2, {nl}}, {A.r2, {nl, d}}, P(L.norm2_w),
                      P(L.norm2_b), eps, st);
    tp_gather(A.y2, nl);
    ops::activation_forward(activation(), {A.g, {n, ffn}}, {A.h, {n, fc1_rows}}, st);
    mark("recompute");
  }
  // In place: dg over g (fc2's weight gradient reads g first), dh over h (the activation backward reads each element
  // before writing it); neither is needed afterwards.
  const LinearEnv e = env();  // (after a full recompute: its forward ran with the same env)
  M.fc2.backward(e, A.g, s_.dnext, A.g, A.lin[kFc2], n, {}, dnext_amax_ready);
  const bf16* dh = A.h;  // fc1's output gradient, in place over h; null: emitted in FP8 (s_.dyq, s_.dyqt) instead
  bool dh_amax_ready = false;
  if (fp8_.enabled && fp8_.delayed) {  // the scale is known: the backward writes fc1's FP8 output gradient itself
    fp8_activation_backward(l, A, n);
    dh = nullptr;
  } else {
    float* dh_amax = fp8_.enabled ? fused_amax(M.fc1.fp8.dy) : nullptr;  // fc1's output gradient scale
    ops::activation_backward(activation(), {A.h, {n, fc1_rows}}, {A.g, {n, ffn}}, {A.h, {n, fc1_rows}}, st,
                             dh_amax);
    dh_amax_ready = dh_amax != nullptr;
  }
  mark("activation bwd");
  M.fc1.backward(e, s_.dy, dh, A.y2, A.lin[kFc1], n, tp_scatter_async(s_.dy, s_.dyl, nl), dh_amax_ready);
  tp_wait(s_.dy, s_.dyl, nl);
  float* dr2_amax = fused_grad_amax(l, kOut);  // the out-projection's output gradient
  with_grad_type([&]<class T>(std::type_identity<T>) {
    ops::add_norm_backward(nk, {own(s_.dr2, nl), {nl, d}}, G<T>(L.norm2_w), G<T>(L.norm2_b), {dy_local, {nl, d}},
                           {own(s_.dnext, nl), {nl, d}}, {A.r2, {nl, d}}, P(L.norm2_w), {A.mean2, {nl}},
                           {A.rstd2, {nl}}, st, norm_ws, dr2_amax);
  });
  mark("norm bwd");
  tp_gather(s_.dr2, nl);
  // attention
  M.out.backward(e, s_.dout, s_.dr2, A.o, A.lin[kOut], n, {}, dr2_amax != nullptr);
  if (cp_.size > 1) {
    cp_attention_backward(A, batch, seq);
    if (c.pos == Pos::rope) cp_rope(s_.dqkv, batch, seq, true);
  } else {
    if (fp8_attention()) {
      fp8_attention_backward(l, A, batch, seq);
    } else {
      const ops::QkvPointers qkv = ops::split_fused_qkv(A.qkv, as);
      const ops::QkvPointers dqkv = ops::split_fused_qkv(s_.dqkv, as);
      attention_->backward(as, {qkv.q, qkv.k, qkv.v, A.o, s_.dout, A.lse, dqkv.q, dqkv.k, dqkv.v}, st);
      mark("attention bwd");
    }
    if (c.pos == Pos::rope) {
      ops::rope_backward(qk_view(s_.dqkv, batch, seq), inv_freq(), st);
      mark("rope bwd");
    }
  }
  if (sel) {
    ops::norm_forward(nk, {own(A.y1, nl), {nl, d}}, {A.mean1, {nl}}, {A.rstd1, {nl}}, {A.r1, {nl, d}}, P(L.norm1_w),
                      P(L.norm1_b), eps, st);
    tp_gather(A.y1, nl);
    mark("recompute");
  }
  M.qkv.backward(e, s_.dy, s_.dqkv, A.y1, A.lin[kQkv], n, tp_scatter_async(s_.dy, s_.dyl, nl));
  tp_wait(s_.dy, s_.dyl, nl);
  float* dnext_amax = fused_grad_amax(l - 1, kFc2);  // the layer below's fc2 output gradient
  with_grad_type([&]<class T>(std::type_identity<T>) {
    ops::add_norm_backward(nk, {own(s_.dnext, nl), {nl, d}}, G<T>(L.norm1_w), G<T>(L.norm1_b), {dy_local, {nl, d}},
                           {own(s_.dr2, nl), {nl, d}}, {A.r1, {nl, d}}, P(L.norm1_w), {A.mean1, {nl}},
                           {A.rstd1, {nl}}, st, norm_ws, dnext_amax);
  });
  mark("norm bwd");
  return dnext_amax != nullptr;
}

std::size_t CudaDecoder::slot_end(int i) const {
  return i < 0 ? 0 : layout_.slots[std::size_t(i)].offset + layout_.slots[std::size_t(i)].size;
}

std::size_t CudaDecoder::layer_end(int l) const {
  const DenseLayout::Layer& L = layout_.layers[std::size_t(l)];
  std::size_t e = 0;
  for (int i : {L.norm1_w, L.norm1_b, L.qkv, L.out, L.norm2_w, L.norm2_b, L.fc1, L.fc2}) e = std::max(e, slot_end(i));
  return e;
}

std::size_t CudaDecoder::layer_begin(int l) const {
  return layout_.slots[std::size_t(layout_.layers[std::size_t(l)].norm1_w)].offset;
}

void CudaDecoder::check_prepared(int slot, const char* what) const {
  TB_REQUIRE(batch_ > 0, std::string("CUDA decoder: ") + what + " without prepare()");
  TB_REQUIRE(slot >= 0 && slot < slots_, std::string("CUDA decoder: ") + what + " of activation set " +
                                             std::to_string(slot) + ", but prepare() made " + std::to_string(slots_));
}

void CudaDecoder::forward_backward_device(const std::int32_t* tokens, const std::int32_t* targets, int batch, int seq,
                                          double grad_scale, float* loss_out) {
  TB_REQUIRE(batch == batch_ && seq == seq_,
             "CUDA decoder: forward_backward_device(batch " + std::to_string(batch) + ", seq " + std::to_string(seq) +
                 ") without prepare() for those sizes");
  TB_REQUIRE(first_stage() && last_stage(),
             "CUDA decoder: forward_backward_device() runs the whole model; a pipeline stage runs forward() and "
             "backward()");
  forward(0, tokens, targets, nullptr, nullptr, grad_scale, loss_out);
  backward(0, tokens, nullptr, nullptr);
}

void CudaDecoder::forward(int slot, const std::int32_t* tokens_in, const std::int32_t* targets, const bf16* in,
                          bf16* out, double grad_scale, float* loss_out) {
  check_prepared(slot, "forward()");
  TB_REQUIRE(!share_grads_ || overwrite_linear_grads_,
             "CUDA decoder: with gradients sharing the activations' memory, every step writes them afresh: call "
             "zero_grads_for_overwrite() before each forward");
  TB_REQUIRE(first_stage() == (in == nullptr) && last_stage() == (out == nullptr),
             "CUDA decoder: forward() takes an input activation exactly when it is not the first stage, and writes "
             "one exactly when it is not the last");
  const ModelConfig& c = cfg_;
  const int batch = batch_, seq = seq_;
  dc_.activate();
  cudaStream_t st = dc_.stream();
  const std::int64_t n = std::int64_t(batch) * seq, d = c.d_model;
  const std::int64_t nl = n / tp_.size;  // this rank's token rows (sequence parallel; tp 1: all)

  const bf16* x = in;  // a stage's input h enters its first add_norm with no residual: r1 = h
  if (first_stage()) {
    const TensorView<const std::int32_t> tokens(tokens_in + std::size_t(tp_.rank) * std::size_t(nl), {nl});
    params_needed(std::max(slot_end(layout_.embed), slot_end(layout_.pos_embed)));
    ops::embedding_forward({s_.x0, {nl, d}}, P(layout_.embed), tokens, st);
    if (c.pos == Pos::learned)  // this rank's rows start at row rank nl of the [batch, seq] local tokens
      for (const PositionPiece& p : position_pieces(tp_.rank * nl, nl, n, seq, cp_.size, cp_.rank))
        ops::position_embedding_add({s_.x0 + std::size_t(p.row * d), {p.rows, d}}, P(layout_.pos_embed), c.seq, st,
                                    p.position);
    mark("embedding fwd");
    x = s_.x0;
  }
  const bf16* resid = nullptr;
  for (int l = 0; l < layers(); ++l) {
    const LayerActs& A = acts(slot, l);
    params_needed(layer_end(l));
    layer_forward(l, x, resid, A, batch, seq, false);
    x = s_.m;
    resid = A.r2;
  }
  if (!last_stage()) {  // the boundary: h = x + resid, what the next layer's add_norm would have formed
    ops::residual_add({out, {nl, d}}, {x, {nl, d}}, {resid, {nl, d}}, st);
    mark("stage output");
    return;
  }
  const HeadActs& H = heads_[std::size_t(slot)];
  const NormKind nk = norm_kind(c.norm);
  params_needed(layout_.total);
  ops::add_norm_forward(nk, {s_.yf, {nl, d}}, {H.rf, {nl, d}}, {H.meanf, {nl}}, {H.rstdf, {nl}}, {x, {nl, d}},
                        resid ? TensorView<const bf16>(resid, {nl, d}) : TensorView<const bf16>(),
                        P(layout_.final_norm_w), P(layout_.final_norm_b), float(c.norm_eps), st);
  mark("norm fwd");

  // ---- LM head + cross-entropy (forward and its backward in one call: dyf, dWlm), on this rank's rows: their mean
  // loss, and gradients scaled by 1 / (tp cp): the sum over those ranks is the gradient of the micro-batch's mean.
  const std::int32_t* my_targets = targets + std::size_t(tp_.rank) * std::size_t(nl);
  const auto head_scale = float(grad_scale / (tp_.size * cp_.size));
  if (fp8_head()) {
    ops::LmHeadFp8 w;
    w.wq = fp8_head_w_.as<std::uint8_t>(), w.wqt = w.wq + fp8_lm_head_bytes(cfg_) / 2;
    w.w_scale_inv = fp8_head_->meta(0).scale_inv, w.x = fp8_head_->meta(1), w.dlogits = fp8_head_->meta(2);
    w.margin = fp8_.margin, w.grad = fp8_.head_grad, w.stochastic = fp8_.head_stochastic;
    w.fp8_gemms = fp8_.head_gemms;
    w.w_bf16 = P(layout_.lm_head).data();
    with_grad_type([&]<class T>(std::type_identity<T>) {
      ops::lm_head_cross_entropy_fp8(dc_, {H.dyf, {nl, d}}, G<T>(layout_.lm_head), {s_.yf, {nl, d}}, w, c.vocab,
                                     my_targets, lm_head_chunk(true), head_scale, loss_out, {s_.ce, s_.ce_bytes},
                                     overwrite_head_grad_);
    });
  } else {
    with_grad_type([&]<class T>(std::type_identity<T>) {
      ops::lm_head_cross_entropy(dc_, {H.dyf, {nl, d}}, G<T>(layout_.lm_head), {s_.yf, {nl, d}}, P(layout_.lm_head),
                                 my_targets, lm_head_chunk(false), head_scale, loss_out, {s_.ce, s_.ce_bytes},
                                 overwrite_head_grad_);
    });
  }
  overwrite_head_grad_ = false;  // later micro-batches of the step accumulate (a pipeline runs several forwards
                                 // before the first backward: the flag of the linears would still be set)
  mark("lm head + cross-entropy");
}

void CudaDecoder::backward(int slot, const std::int32_t* tokens_in, const bf16* dout, bf16* din) {
  check_prepared(slot, "backward()");
  TB_REQUIRE(last_stage() == (dout == nullptr) && first_stage() == (din == nullptr),
             "CUDA decoder: backward() takes an output gradient exactly when it is not the last stage, and writes an "
             "input gradient exactly when it is not the first");
  const ModelConfig& c = cfg_;
  const int batch = batch_, seq = seq_;
  dc_.activate();
  cudaStream_t st = dc_.stream();
  const std::int64_t n = std::int64_t(batch) * seq, d = c.d_model;
  const std::int64_t nl = n / tp_.size;
  const std::size_t boundary_bytes = std::size_t(nl) * std::size_t(d) * sizeof(bf16);

  bool dnext_amax = false;  // the gradient in s_.dnext came with the next layer's fc2 amax (fused_grad_amax)
  if (last_stage()) {
    const HeadActs& H = heads_[std::size_t(slot)];
    float* amax = fused_grad_amax(layers() - 1, 3);
    with_grad_type([&]<class T>(std::type_identity<T>) {
      ops::add_norm_backward(norm_kind(c.norm), {own(s_.dnext, nl), {nl, d}}, G<T>(layout_.final_norm_w),
                             G<T>(layout_.final_norm_b), {H.dyf, {nl, d}}, {}, {H.rf, {nl, d}},
                             P(layout_.final_norm_w), {H.meanf, {nl}}, {H.rstdf, {nl}}, st,
                             {s_.norm_ws, s_.norm_ws_bytes}, amax);
    });
    mark("norm bwd");
    dnext_amax = amax != nullptr;
    grads_ready(layout_.slots[std::size_t(layout_.final_norm_w)].offset);
  } else {  // dh of this stage's output h: the gradient of the sum entering the next norm, as dnext
    TB_CHECK(cudaMemcpyAsync(own(s_.dnext, nl), dout, boundary_bytes, cudaMemcpyDeviceToDevice, st));
    mark("stage output gradient");
  }
  for (int l = layers() - 1; l >= 0; --l) {
    if (share_grads_)  // the norms' gradients accumulate; until now their bytes held activations
      for (int i : norm_slots(layout_.layers[std::size_t(l)])) zero_grad_slot(i);
    dnext_amax = layer_backward(l, acts(slot, l), batch, seq, dnext_amax);
    grads_ready(layer_begin(l));
  }
  if (first_stage()) {
    const std::int32_t* my_tokens = tokens_in + std::size_t(tp_.rank) * std::size_t(nl);
    EmbeddingRows rows{own(s_.dnext, nl), my_tokens, nl, s_.embed_ws, s_.embed_ws_bytes};
    std::int64_t first_row = tp_.rank * nl;  // the rows' place: in the local rows (this cp rank's), or gathered (tp,
    int first_rank = cp_.rank;                // then dp x cp: blocks of the local rows of cp rank 0, 1, ...)
    if (gather_embedding_rows) rows = gather_embedding_rows(rows.dnext, my_tokens, nl), first_row = 0, first_rank = 0;
    if (share_grads_ && !c.tied_embeddings) zero_grad_slot(layout_.embed), zero_grad_slot(layout_.pos_embed);
    with_grad_type([&]<class T>(std::type_identity<T>) {
      ops::embedding_backward(G<T>(layout_.embed), {rows.dnext, {rows.rows, d}}, {rows.tokens, {rows.rows}}, st,
                              {rows.workspace, rows.workspace_bytes});
      if (c.pos == Pos::learned)
        for (const PositionPiece& p : position_pieces(first_row, rows.rows, n, seq, cp_.size, first_rank))
          ops::position_embedding_backward(G<T>(layout_.pos_embed),
                                           {rows.dnext + std::size_t(p.row * d), {p.rows, d}}, c.seq, st, p.position);
    });
    mark("embedding bwd");
  } else {  // the first layer's r1 was the input h: its gradient is dnext
    TB_CHECK(cudaMemcpyAsync(din, own(s_.dnext, nl), boundary_bytes, cudaMemcpyDeviceToDevice, st));
    mark("stage input gradient");
  }
  grads_ready(0);
  overwrite_linear_grads_ = false;
}

}  // namespace tb::model
