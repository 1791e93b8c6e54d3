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
#include "model/moe_mlp_cuda.h"
#include "model/position_pieces.h"
#include "ops/cuda/activation.h"
#include "ops/cuda/cross_entropy.h"
#include "ops/cuda/embedding.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/norm.h"
#include "ops/cuda/rope.h"
#include "ops/cuda/segments.h"

namespace tb::model {
namespace {

using bf16 = __nv_bfloat16;
void check_ids(const std::int32_t* ids, std::int64_t n, int vocab, const char* what) {
  for (std::int64_t i = 0; i < n; ++i)
    TB_REQUIRE(ids[i] >= 0 && ids[i] < vocab, std::string("CUDA decoder: ") + what + " " + std::to_string(ids[i]) +
                                                  " at index " + std::to_string(i) + " is outside the vocabulary [0, " +
                                                  std::to_string(vocab) + ")");
}

}  // namespace

CudaDecoder::CudaDecoder(ops::DeviceContext& dc, const ModelConfig& cfg, Recompute recompute, bool deterministic,
                         Fp8Options fp8, std::size_t buffer_elems, LayerRange stage)
    : dc_(dc), cfg_(cfg), layout_(model::dense_layout(cfg, stage)), policy_{recompute, fp8.enabled}, fp8_(fp8),
      deterministic_(deterministic) {
  cfg_.validate();
  TB_REQUIRE(!fp8_.attention || fp8_.enabled,
             "CUDA decoder: FP8 attention (Fp8Options::attention) needs the FP8 linear layers (Fp8Options::enabled)");
  TB_REQUIRE(!fp8_.attention || !cfg_.lora.enabled(),
             "CUDA decoder: FP8 attention with LoRA adapters: the adapter on attn.out reads the attention output in "
             "BF16, which FP8 attention does not keep (Fp8Options::attention off)");
  TB_REQUIRE(fp8_.grad == DType::e5m2 || fp8_.grad == DType::e4m3,
             "CUDA decoder: the FP8 gradient format (Fp8Options::grad) must be e5m2 or e4m3, got " +
                 std::string(dtype_name(fp8_.grad)));
  const std::string problem = model::cuda_layout_problem(cfg_, layout_);
  TB_REQUIRE(problem.empty(), "CUDA decoder: " + problem);
  TB_REQUIRE(!cfg_.is_mla() || !fp8_.enabled,
             "CUDA decoder: a multi-head latent attention model runs in BF16 only so far (FP8 MLA is not built: "
             "Fp8Options::enabled off)");
  for (const Slot& sl : layout_.slots)  // the trainable parameters: the layout's last ones, in the gradients' order
    TB_REQUIRE(!sl.has_grad() || sl.offset == trainable_begin() + sl.grad_offset,
               "CUDA decoder: the trainable parameters must be the layout's last, in the gradients' order; " + sl.name +
                   " is not");
  linears_ = make_linears(layout_, cfg_);
  for (const DenseLayout::Layer& L : layout_.layers) {
    mlas_.push_back(L.mla() ? std::make_unique<MlaAttentionCuda>(cfg_, layout_, L) : nullptr);
    mlps_.push_back(make_mlp(cfg_, layout_, L));
  }
  dc_.activate();
  buffer_elems_ = std::max(buffer_elems, layout_.grad_total);
  const std::size_t param_elems = trainable_begin() + buffer_elems_;  // (the tail: the partition's padding, zeroed)
  params_ = ops::DeviceBuffer(dc_.device(), param_elems * sizeof(bf16));
  grads_ = ops::DeviceBuffer(dc_.device(), buffer_elems_ * grad_size());
  grads_ptr_ = grads_.get();
  TB_CHECK(cudaMemsetAsync(params_.as<bf16>() + layout_.total, 0, (param_elems - layout_.total) * sizeof(bf16),
                           dc_.stream()));
  zero_grads();
  own_step_ = ops::DeviceBuffer(dc_.device(), sizeof(std::int64_t));
  const std::int64_t one = 1;
  TB_CHECK(cudaMemcpy(own_step_.get(), &one, sizeof(one), cudaMemcpyHostToDevice));
  if (fp8_.enabled) {
    TB_REQUIRE(cfg_.d_model % 16 == 0 && cfg_.ffn % 16 == 0 && cfg_.q_dim() % 16 == 0,
               "CUDA decoder: FP8 GEMMs need d_model, ffn and heads x head_dim to be multiples of 16");
    fp8_weights_ = ops::DeviceBuffer(dc_.device(), fp8_weight_bytes(layout_));
    const int h = fp8_.delayed ? fp8_.history : 1;
    fp8_fwd_ = std::make_unique<ops::Fp8Scales>(dc_.device(), 2 * linear_count(), h, dc_.stream());
    fp8_bwd_ = std::make_unique<ops::Fp8Scales>(dc_.device(), linear_count(), h, dc_.stream());
    // Linear i of the layers (layer_linears' order, layer by layer): its W and W^T back to back in the buffer, its
    // input and weight slots 2i and 2i + 1 of the forward table, its output gradient slot i of the backward table. A
    // frozen weight's scale is slot i of a table of its own, which no delayed-scaling update touches: its FP8 copies
    // are cast once (current scaling: its own amax) and must be read with that scale ever after.
    fp8_frozen_ = std::make_unique<ops::Fp8Scales>(dc_.device(), linear_count(), 1, dc_.stream());
    std::size_t bytes = 0;
    int i = 0;
    for (int l = 0; l < layers(); ++l)
      for (LinearCuda* lin : layer_linears(l)) {
        LinearCuda::Fp8State& f = lin->fp8;
        f.w = fp8_weights_.as<std::uint8_t>() + bytes;
        f.wt = f.w + pad256(lin->weight().size);
        f.x = fp8_fwd_->meta(2 * i), f.dy = fp8_bwd_->meta(i);
        f.w_scale = lin->trainable() ? fp8_fwd_->meta(2 * i + 1) : fp8_frozen_->meta(i);
        bytes += 2 * pad256(lin->weight().size);
        ++i;
      }
  }
  if (fp8_head()) {
    TB_REQUIRE(cfg_.vocab % 16 == 0,
               "CUDA decoder: the FP8 LM head needs a vocabulary that is a multiple of 16, got " +
                   std::to_string(cfg_.vocab) + "; leave the LM head in BF16");
    fp8_head_w_ = ops::DeviceBuffer(dc_.device(), fp8_lm_head_bytes(cfg_));
    fp8_head_ = std::make_unique<ops::Fp8Scales>(dc_.device(), 3, 1, dc_.stream());  // W, x, dlogits
  }
  TB_REQUIRE(!fp8_.attention_emulate || (fp8_.enabled && !fp8_.attention && policy_.mode == Recompute::none),
             "CUDA decoder: the FP8 attention emulation (a diagnostic of BF16 attention) needs FP8, not FP8 attention "
             "itself, and no recompute");
  if (cfg_.is_mla())
    mla_shared_ = std::make_unique<MlaShared>(dc_, cfg_, deterministic_);
  else
    attention_ = fp8_attention() ? make_fp8_attention(attention_setup()) : make_bf16_attention(attention_setup());
  dc_.synchronize();
}

LinearEnv CudaDecoder::env() const {
  LinearEnv e{dc_,   fp8_,   tp_,     params_.as<bf16>(), grads_ptr_, grad_type_, overwrite_linear_grads_,
              s_.xq, s_.dyq, s_.dyqt, s_.part,            s_.dyl,     on_op};
  e.lora_ws = s_.lora_ws, e.lora_t = s_.lora_t, e.lora_dz = s_.lora_dz;
  e.step = step_ ? step_ : own_step_.as<std::int64_t>();
  e.rows = {running_first_sequence_, seq_, seq_ * cp_.size, cp_.size, cp_.rank, 0, 0};
  return e;
}

std::vector<std::optional<CudaDecoder::LayerLinears>> CudaDecoder::make_linears(const DenseLayout& layout,
                                                                                  const ModelConfig& cfg) {
  std::vector<std::optional<LayerLinears>> out;
  for (const DenseLayout::Layer& L : layout.layers)
    if (L.mla())
      out.emplace_back();
    else
      out.push_back(LayerLinears{LinearCuda(layout, L.qkv, L.qkv_lora, cfg.lora),
                                 LinearCuda(layout, L.out, L.out_lora, cfg.lora)});
  return out;
}

// The scaling slot of each linear's input per activation set. Delayed scaling: one slot per linear for every set (its
// scale is fixed for the whole step; the casts of every micro-batch record into one amax, as with accumulation on
// one set). Current scaling: a slot per set, since the scale the forward computes is read again by the weight
// gradient of the same micro-batch, and another micro-batch in flight (pipeline) must not overwrite it.
void CudaDecoder::fp8_assign_input_scales(int slots) {
  const int N = linear_count();
  if (!fp8_.delayed && slots > 1 && (!fp8_inputs_ || fp8_inputs_->tensors() < N * (slots - 1)))
    fp8_inputs_ = std::make_unique<ops::Fp8Scales>(dc_.device(), N * (slots - 1), 1, dc_.stream());
  for (int set = 0; set < slots; ++set) {
    int i = 0;  // the linear's index over the layers
    for (int l = 0; l < layers(); ++l) {
      const std::vector<LinearCuda*> lins = layer_linears(l);
      for (std::size_t k = 0; k < lins.size(); ++k, ++i)
        linear_saved(set, l, int(k)).xs =
            set == 0 || fp8_.delayed ? lins[k]->fp8.x : fp8_inputs_->meta(N * (set - 1) + i);
    }
  }
}

std::vector<CudaDecoder::Fp8WeightCopy> CudaDecoder::fp8_weight_copies() const {
  std::vector<Fp8WeightCopy> out;
  if (!fp8_.enabled || !fp8_.delayed) return out;
  for (int l = 0; l < layers(); ++l)
    for (const LinearCuda* lin : layer_linears(l))
      if (lin->trainable()) out.push_back({lin->weight().offset, lin->weight().size, lin->weight_cast(fp8_.margin)});
  return out;
}

// The trainable weights' FP8 copies every step (unless the optimizer writes them); the frozen ones' once, with their
// own amax (current scaling in either recipe: their scale never changes after), and again only after load_params().
void CudaDecoder::fp8_begin_step() {
  if (!fp8_.enabled) return;
  dc_.activate();
  const LinearEnv e = env();
  for (int l = 0; l < layers(); ++l)
    for (const LinearCuda* lin : layer_linears(l)) {
      if (lin->trainable() && (!fp8_weights_by_optimizer_ || fp8_weights_stale_)) lin->cast_weight(e, fp8_.delayed);
      if (!lin->trainable() && fp8_frozen_stale_) lin->cast_weight(e, false);
    }
  fp8_weights_stale_ = fp8_frozen_stale_ = false;
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
  if (attention_) attention_->delayed_tables(delayed);  // FP8 attention's: delayed in both recipes
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
  fp8_weights_stale_ = fp8_frozen_stale_ = true;
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
  return to_host_floats(dc_, grads_ptr_, layout_.grad_total, grad_type_);
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
  for (std::size_t i = 0; i < layout_.slots.size(); ++i)  // (GEMMs write them: linears and LoRA's factors)
    if (layout_.slots[i].tags.role == ParamRole::linear || layout_.slots[i].tags.role == ParamRole::adapter)
      linear[i] = true;
  if (last_stage()) linear[std::size_t(layout_.lm_head)] = true;  // the first LM head call writes it (tied: first)
  for (int i : shared_grad_slots()) lazy[std::size_t(i)] = true;
  for (std::size_t i = 0; i < layout_.slots.size(); ++i)
    if (!linear[i] && !lazy[i]) zero_grad_slot(int(i));
  overwrite_linear_grads_ = overwrite_head_grad_ = true;
}

void CudaDecoder::zero_grad_slot(int i) {
  if (i < 0 || !layout_.slots[std::size_t(i)].has_grad()) return;
  const Slot& s = layout_.slots[std::size_t(i)];
  TB_CHECK(cudaMemsetAsync(grad_at(s.grad_offset), 0, s.size * grad_size(), dc_.stream()));
}

// A layer's norm weights and biases, MLA's latent norms included (-1: absent): the gradients its backward
// accumulates into.
static std::array<int, 6> norm_slots(const DenseLayout::Layer& L) {
  return {L.norm1_w, L.norm1_b, L.norm2_w, L.norm2_b, L.q_norm, L.kv_norm};
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

void CudaDecoder::set_tensor_parallel(TensorParallelOps tp) {
  TB_REQUIRE(batch_ == 0, "CUDA decoder: set_tensor_parallel() must come before prepare()");
  TB_REQUIRE(tp.size >= 1 && tp.rank >= 0 && tp.rank < tp.size, "CUDA decoder: tensor-parallel rank out of range");
  if (tp.size > 1) {
    TB_REQUIRE(tp.all_gather && tp.reduce_scatter, "CUDA decoder: tensor parallel needs all_gather and reduce_scatter");
    TB_REQUIRE(!cfg_.moe.enabled(), "CUDA decoder: a Mixture-of-Experts model runs with tensor parallel 1 so far");
    TB_REQUIRE(!cfg_.is_mla(), "CUDA decoder: a multi-head latent attention model runs with tensor parallel 1 so far "
                               "(the CPU decoder runs every layout)");
  }
  tp_ = std::move(tp);
}

void CudaDecoder::set_context_parallel(ContextParallelOps cp) {
  TB_REQUIRE(batch_ == 0, "CUDA decoder: set_context_parallel() must come before prepare()");
  TB_REQUIRE(cp.size >= 1 && cp.rank >= 0 && cp.rank < cp.size, "CUDA decoder: context-parallel rank out of range");
  if (cp.size > 1) {
    TB_REQUIRE(cp.all_gather && cp.reduce_scatter, "CUDA decoder: context parallel needs all_gather and reduce_scatter");
    TB_REQUIRE(!cfg_.moe.enabled(), "CUDA decoder: a Mixture-of-Experts model runs with context parallel 1 so far");
    TB_REQUIRE(!cfg_.is_mla(), "CUDA decoder: a multi-head latent attention model runs with context parallel 1 so "
                               "far (the CPU decoder runs every layout)");
    TB_REQUIRE(!fp8_attention(), "CUDA decoder: FP8 attention does not combine with context parallel (cuDNN's FP8 "
                                 "attention has no bottom-right causal mask on Hopper): leave it off");
  }
  cp_ = std::move(cp);
  if (cp_.size > 1) attention_ = make_cp_attention(attention_setup(), cp_);
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
  return attention_ ? attention_->workspace_bytes() : mla_shared_->workspace_bytes();
}

TensorView<const bf16> CudaDecoder::P(int slot) const {
  return TensorView<const bf16>(detail::slot_view(params_.as<bf16>(), layout_, slot));
}
template <class T>
TensorView<T> CudaDecoder::G(int slot) const {  // (frozen: empty, no gradient wanted)
  TB_REQUIRE(dtype_of<T>() == grad_type_, "CUDA decoder: internal: gradient view of the wrong type");
  if (slot < 0 || !layout_.slots[std::size_t(slot)].has_grad()) return {};
  const Slot& s = layout_.slots[std::size_t(slot)];
  T* p = static_cast<T*>(grads_ptr_) + s.grad_offset;
  return s.shape.size() == 1 ? TensorView<T>(p, {s.shape[0]}) : TensorView<T>(p, {s.shape[0], s.shape[1]});
}
template TensorView<float> CudaDecoder::G<float>(int) const;
template TensorView<bf16> CudaDecoder::G<bf16>(int) const;

double CudaDecoder::forward_backward(const std::int32_t* host_tokens, const std::int32_t* host_targets, int batch,
                                     int seq, double grad_scale, std::int64_t step) {
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
  if (!step_)  // (the copy completes before this call returns: it synchronizes)
    TB_CHECK(cudaMemcpyAsync(own_step_.get(), &step, sizeof(step), cudaMemcpyHostToDevice, st));
  if (share_grads_) zero_grads_for_overwrite();  // the gradients are written, never accumulated
  fp8_begin_step();
  forward_backward_device(s_.tokens, s_.targets, batch, seq, grad_scale, s_.loss);
  fp8_end_step();
  float loss = 0;
  TB_CHECK(cudaMemcpyAsync(&loss, s_.loss, sizeof(float), cudaMemcpyDeviceToHost, st));
  dc_.synchronize();
  return double(loss);
}

std::size_t CudaDecoder::slot_end(int i) const {
  if (i < 0 || !layout_.slots[std::size_t(i)].has_grad()) return 0;
  return layout_.slots[std::size_t(i)].grad_offset + layout_.slots[std::size_t(i)].size;
}

// A layer's trainable slots are contiguous in the gradient buffer (model/param_layout.h; LoRA's adapters after every
// other slot, layer by layer): they end where the next layer's (or the final norm, or the last stage's tied embedding
// copy after it) begin.
std::size_t CudaDecoder::layer_end(int l) const {
  if (l + 1 < layers()) return layer_begin(l + 1);
  const Slot* fn = last_stage() ? &layout_.slots[std::size_t(layout_.final_norm_w)] : nullptr;
  return fn && fn->has_grad() ? fn->grad_offset : layout_.grad_total;
}

std::size_t CudaDecoder::layer_begin(int l) const { return layout_.layers[std::size_t(l)].grad_begin(layout_); }

void CudaDecoder::check_prepared(int slot, const char* what) const {
  TB_REQUIRE(batch_ > 0, std::string("CUDA decoder: ") + what + " without prepare()");
  TB_REQUIRE(slot >= 0 && slot < slots_, std::string("CUDA decoder: ") + what + " of activation set " +
                                             std::to_string(slot) + ", but prepare() made " + std::to_string(slots_));
}

void CudaDecoder::forward_backward_device(const std::int32_t* tokens, const std::int32_t* targets, int batch, int seq,
                                          double grad_scale, float* loss_out, const PackedInputs* packed,
                                          std::int64_t first_sequence) {
  TB_REQUIRE(batch == batch_ && seq == seq_,
             "CUDA decoder: forward_backward_device(batch " + std::to_string(batch) + ", seq " + std::to_string(seq) +
                 ") without prepare() for those sizes");
  TB_REQUIRE(first_stage() && last_stage(),
             "CUDA decoder: forward_backward_device() runs the whole model; a pipeline stage runs forward() and "
             "backward()");
  forward(0, tokens, targets, nullptr, nullptr, grad_scale, loss_out, packed, first_sequence);
  backward(0, tokens, nullptr, nullptr, packed);
}

// Packed rows: the micro-batch's segment tables in activation set `slot` (filled from its offsets by its forward, read
// again by its backward) and the rows the blocks hand to the attention core.
void CudaDecoder::begin_rows(int slot, const PackedInputs* packed, bool fill) {
  rows_ = nullptr;
  if (segments_ == 0) {
    TB_REQUIRE(!packed || (!packed->positions && !packed->cu_seqlens),
               "CUDA decoder: a micro-batch of packed rows, but prepare() had no segment capacity");
    return;
  }
  TB_REQUIRE(packed && packed->positions && packed->cu_seqlens,
             "CUDA decoder: prepared for packed rows; each micro-batch needs its positions and segment offsets "
             "(PackedInputs)");
  void* tables =
      static_cast<std::byte*>(segment_tables_.get()) + std::size_t(slot) * ops::segment_table_bytes(segments_);
  if (fill)
    ops::fill_segment_tables(tables, packed->cu_seqlens, segments_, cfg_.q_dim() + 2 * std::int64_t(cfg_.kv_dim()),
                             cfg_.q_dim(), cfg_.heads, dc_.stream());
  packed_rows_ = {packed->positions, ops::segment_tables(tables, segments_)};
  rows_ = &packed_rows_;
}

void CudaDecoder::forward(int slot, const std::int32_t* tokens_in, const std::int32_t* targets, const bf16* in,
                          bf16* out, double grad_scale, float* loss_out, const PackedInputs* packed,
                          std::int64_t first_sequence) {
  check_prepared(slot, "forward()");
  first_sequence_[std::size_t(slot)] = running_first_sequence_ = first_sequence;
  TB_REQUIRE(!share_grads_ || overwrite_linear_grads_,
             "CUDA decoder: with gradients sharing the activations' memory, every step writes them afresh: call "
             "zero_grads_for_overwrite() before each forward");
  TB_REQUIRE(first_stage() == (in == nullptr) && last_stage() == (out == nullptr),
             "CUDA decoder: forward() takes an input activation exactly when it is not the first stage, and writes "
             "one exactly when it is not the last");
  const ModelConfig& c = cfg_;
  const int batch = batch_, seq = seq_;
  grad_scale_ = grad_scale;
  dc_.activate();
  cudaStream_t st = dc_.stream();
  const std::int64_t n = std::int64_t(batch) * seq, d = c.d_model;
  const std::int64_t nl = n / tp_.size;  // this rank's token rows (sequence parallel; tp 1: all)
  begin_rows(slot, packed, true);

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
    layer_forward(l, slot, x, resid, A, batch, seq, false);
    x = s_.m;
    resid = A.r2;
  }
  if (!last_stage()) {  // the boundary: h = x + resid, what the next layer's add_norm would have formed
    ops::residual_add({out, {nl, d}}, {x, {nl, d}}, {resid, {nl, d}}, st);
    mark("stage output");
    return;
  }
  const HeadActs& H = heads_[std::size_t(slot)];
  const ops::NormKind nk = detail::norm_kind(c.norm);
  params_needed(layout_.grad_total);
  ops::add_norm_forward(nk, {s_.yf, {nl, d}}, {H.rf, {nl, d}}, {H.meanf, {nl}}, {H.rstdf, {nl}}, {x, {nl, d}},
                        resid ? TensorView<const bf16>(resid, {nl, d}) : TensorView<const bf16>(),
                        P(layout_.final_norm_w), P(layout_.final_norm_b), float(c.norm_eps), st);
  mark("norm fwd");

  // ---- LM head + cross-entropy (forward and its backward in one call: dyf, dWlm), on this rank's rows: their mean
  // loss, and gradients scaled by 1 / (tp cp): the sum over those ranks is the gradient of the micro-batch's mean.
  // With loss weights: their weighted sum, the weights already each row's share of the micro-batch.
  const std::int32_t* my_targets = targets + std::size_t(tp_.rank) * std::size_t(nl);
  const float* my_weights =
      packed && packed->loss_weights ? packed->loss_weights + std::size_t(tp_.rank) * std::size_t(nl) : nullptr;
  const auto head_scale = float(my_weights ? grad_scale : grad_scale / (tp_.size * cp_.size));
  TB_REQUIRE(!my_weights || !fp8_head(),
             "CUDA decoder: loss weights (packed data's loss mask) with the FP8 LM head are not built: leave the LM head "
             "in BF16");
  if (fp8_head()) {
    ops::LmHeadFp8 w;
    w.wq = fp8_head_w_.as<std::uint8_t>(), w.wqt = w.wq + fp8_lm_head_bytes(cfg_) / 2;
    w.w_scale_inv = fp8_head_->meta(0).scale_inv, w.x = fp8_head_->meta(1), w.dlogits = fp8_head_->meta(2);
    w.margin = fp8_.margin, w.grad = fp8_.head_grad, w.stochastic = fp8_.head_stochastic;
    w.fp8_gemms = fp8_.head_gemms;
    w.w_bf16 = P(layout_.lm_head).data();
    with_grad_type([&]<class T>(std::type_identity<T>) {
      ops::lm_head_cross_entropy_fp8(dc_, {H.dyf, {nl, d}}, G<T>(layout_.lm_head), {s_.yf, {nl, d}}, w, c.vocab,
                                     my_targets, ops::lm_head_chunk(true), head_scale, loss_out, {s_.ce, s_.ce_bytes},
                                     overwrite_head_grad_);
    });
  } else {
    with_grad_type([&]<class T>(std::type_identity<T>) {
      ops::lm_head_cross_entropy(dc_, {H.dyf, {nl, d}}, G<T>(layout_.lm_head), {s_.yf, {nl, d}}, P(layout_.lm_head),
                                 my_targets, ops::lm_head_chunk(false), head_scale, loss_out, {s_.ce, s_.ce_bytes},
                                 overwrite_head_grad_, my_weights);
    });
  }
  overwrite_head_grad_ = false;  // later micro-batches of the step accumulate (a pipeline runs several forwards
                                 // before the first backward: the flag of the linears would still be set)
  mark("lm head + cross-entropy");
}

void CudaDecoder::backward(int slot, const std::int32_t* tokens_in, const bf16* dout, bf16* din,
                           const PackedInputs* packed) {
  check_prepared(slot, "backward()");
  begin_rows(slot, packed, false);
  running_first_sequence_ = first_sequence_[std::size_t(slot)];
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
    float* amax = fused_grad_amax(mlp_output_linear(layers() - 1));
    with_grad_type([&]<class T>(std::type_identity<T>) {
      ops::add_norm_backward(detail::norm_kind(c.norm), {own(s_.dnext, nl), {nl, d}}, G<T>(layout_.final_norm_w),
                             G<T>(layout_.final_norm_b), {H.dyf, {nl, d}}, {}, {H.rf, {nl, d}},
                             P(layout_.final_norm_w), {H.meanf, {nl}}, {H.rstdf, {nl}}, st,
                             {s_.norm_ws, s_.norm_ws_bytes}, amax);
    });
    mark("norm bwd");
    dnext_amax = amax != nullptr;
    if (const Slot& fn = layout_.slots[std::size_t(layout_.final_norm_w)]; fn.has_grad()) grads_ready(fn.grad_offset);
  } else {  // dh of this stage's output h: the gradient of the sum entering the next norm, as dnext
    TB_CHECK(cudaMemcpyAsync(own(s_.dnext, nl), dout, boundary_bytes, cudaMemcpyDeviceToDevice, st));
    mark("stage output gradient");
  }
  for (int l = layers() - 1; l >= 0; --l) {
    if (share_grads_)  // the norms' gradients accumulate; until now their bytes held activations
      for (int i : norm_slots(layout_.layers[std::size_t(l)])) zero_grad_slot(i);
    dnext_amax = layer_backward(l, slot, acts(slot, l), batch, seq, dnext_amax);
    grads_ready(layer_begin(l));
  }
  if (first_stage() && layout_.slots[std::size_t(layout_.embed)].has_grad()) {
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
  } else if (!first_stage()) {  // the first layer's r1 was the input h: its gradient is dnext (frozen embedding: none)
    TB_CHECK(cudaMemcpyAsync(din, own(s_.dnext, nl), boundary_bytes, cudaMemcpyDeviceToDevice, st));
    mark("stage input gradient");
  }
  grads_ready(0);
  overwrite_linear_grads_ = false;
}

}  // namespace tb::model

namespace tb::model {

MoeStats CudaDecoder::moe_stats() const {
  MoeStats s;
  for (const auto& mlp : mlps_)
    if (const auto* moe = dynamic_cast<const MoeMlpCuda*>(mlp.get())) moe->add_stats(s, dc_.stream());
  return s;
}

void CudaDecoder::reset_moe_stats() {
  for (const auto& mlp : mlps_)
    if (auto* moe = dynamic_cast<MoeMlpCuda*>(mlp.get())) moe->reset_stats(dc_.stream());
}

void CudaDecoder::update_expert_bias(const std::function<void(float*, std::size_t)>& sum_loads) {
  for (const auto& mlp : mlps_)
    if (auto* moe = dynamic_cast<MoeMlpCuda*>(mlp.get())) moe->update_expert_bias(sum_loads, dc_.stream());
}

std::vector<float> CudaDecoder::expert_bias() const {
  std::vector<float> out;
  for (const auto& mlp : mlps_)
    if (const auto* moe = dynamic_cast<const MoeMlpCuda*>(mlp.get())) moe->append_expert_bias(out, dc_.stream());
  return out;
}

}  // namespace tb::model
