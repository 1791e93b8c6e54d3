// model/decoder_cuda.h: the dense decoder family (model/decoder_cpu.h is the spec) on one GPU through the
// ops/cuda kernels: bf16 weights and activations, fp32 (or bf16) weight gradients, optional activation recomputation.
// Data flow (n = batch * seq tokens, [rows, cols] row-major bf16 unless marked f32; ops in namespace tb::ops):
//   forward
//     x0 = embedding_forward(E, tokens) (+ position_embedding_add(P))          [n, d]
//     per layer:  y1, r1 = add_norm(x, resid)             (resid: none for layer 0; r1 = x + resid, saved)
//                 qkv = y1 Wqkv^T                          GEMM abt  [n, (H + 2G) hd]  (Q heads | K heads | V heads)
//                 rope_forward on the Q and K heads of qkv, in place (one call, a strided view that skips V)
//                 o, lse = CudnnAttention(qkv)             o [n, H hd], lse f32 [b, H, s]
//                   (FP8 attention: qkv8 = e4m3(qkv), o8, lse = CudnnFp8Attention(qkv8), o = bf16(o8); see Fp8Options)
//                 a = o Wout^T                             GEMM abt  [n, d]
//                   (a MLA layer, model/config.h MlaConfig: a = model/attention_mla_cuda.h's attention of y1 instead)
//                 y2, r2 = add_norm(a, r1)
//                 h = y2 W1^T                              GEMM abt  [n, ffn or 2 ffn]
//                 g = act(h)                               [n, ffn]
//                 x = g W2^T;  resid = r2                  GEMM abt  [n, d]
//     yf, rf = add_norm(x, resid);  loss = lm_head_cross_entropy(yf, Wlm)   (tied: Wlm is E)
//   backward (dnext: gradient of the sum r entering the next norm), each linear y = x W^T as
//     dx = dy W (GEMM ab, bf16)  and  dW += dy^T x (GEMM atb, fp32 or bf16, accumulated into the gradient slot):
//     dyf, dWlm += CE'(...);  dnext = add_norm_backward(dyf)
//     per layer, last first:  dg = dnext W2, dW2 += dnext^T g;  dh = act'(dg, h);  dy2 = dh W1, dW1 += dh^T y2
//                             dr2 = add_norm_backward(dy2, r2) + dnext
//                             do = dr2 Wout, dWout += dr2^T o;  dqkv = attention'(do, ...)
//                             rope_backward on the dQ and dK heads of dqkv;  dy1 = dqkv Wqkv, dWqkv += dqkv^T y1
//                             dnext = add_norm_backward(dy1, r1) + dr2
//     dE += embedding_backward(dnext, tokens)  (+ dP += position_embedding_backward(dnext))
// Parameters: ONE bf16 device buffer in model/param_layout.h's DenseLayout (the CPU decoder's), gradients ONE
// fp32 (set_grad_type: or bf16) device buffer of the trainable parameters only, in the layout's gradient order
// (model/params.h grad_offset; with share_grads_with_activations(): inside the activation arena). The trainable
// parameters are the layout's last grad_total elements in that order (every parameter in full training, the LoRA
// adapters when fine-tuning): gradient element g belongs to parameter element trainable_begin() + g, so the
// data-parallel partition (parallel/zero.h) of the gradients is one of those parameters too.
// Fine-tuning with LoRA (model/lora.h, model/lora_cuda.h): the base is frozen (no weight-gradient GEMM, no gradient,
// no embedding backward; in FP8 its weights are cast to E4M3 once, by the first fp8_begin_step(), with their own
// amax: MLPerf's FP8 parameters, and their BF16 copy is never updated), the adapters run in BF16 after their
// linears; their dropout masks follow the step counter (set_step_counter) and each micro-batch's first sequence in
// the step's batch (forward()).
// forward_backward ACCUMULATES grad_scale * dloss/dparams (the caller zeroes, as with CpuDecoder). Every slot must
// start 256-byte aligned in the bf16 buffer (offsets multiples of 128 elements: the cuBLASLt plans, norm and CE
// kernels assume it); the constructor refuses a config whose layout breaks that, saying which slot.
// Activations: ONE device arena per (batch, seq, activation sets), carved into 256-byte aligned pieces by the same
// code that sizes it (activation_bytes()). What each layer keeps for its backward depends on the recompute mode:
//   none:       r1 mean1 rstd1 y1 qkv o lse r2 mean2 rstd2 y2 h g          (per token: (7d + 2 kv + 2 or 3 ffn) bf16)
//   selective:  r1 mean1 rstd1 qkv o lse r2 mean2 rstd2 h  — the norm outputs y1, y2 and the activation output g
//               are recomputed in the backward (elementwise: ~1% more time). The attention core (the [s, s]
//               probabilities) is never stored in any mode: cuDNN's fused attention recomputes it in its backward.
//   full:       r1 only — the whole layer's forward is recomputed in the backward (one more forward per layer)
// FP8 attention (Fp8Options::attention) keeps the FP8 copies qkv8 and o8 (1 byte per element) instead of qkv and o.
// The rest lives in one shared copy (the layer being computed). The backward's gradient buffers are shared too;
// the MLP's dg and dh overwrite g and h in place.
// Graph capture: forward_backward_device enqueues only (no allocation, host sync or host read once prepare()
// ran for that batch and seq and one call planned the GEMMs), so a caller can capture it in a CUDA graph.
// Pipeline stages (train/pipeline_cuda.h): a decoder built with a LayerRange holds layers [first, last) of the model
// (model/param_layout.h's stage layout: the embedding only on the first stage, the final norm, LM head and loss only
// on the last; untied embeddings only). forward(slot, ...) and backward(slot, ...) run one micro-batch's halves
// separately; prepare(batch, seq, slots) keeps `slots` activation sets (what each layer keeps for its backward, and
// the last stage's final-norm statistics and LM-head gradient dyf), so up to `slots` micro-batches can be in
// flight between their forward and backward; the shared copies and the backward's scratch stay single. The stage
// boundary tensor is the residual sum h = x + resid [n/tp, d] (bf16, rounded as add_norm rounds it: the next stage's
// first add_norm takes it with no residual, and the last stage's final norm likewise, so a split model computes
// bitwise what the whole one does), and its gradient dh (the decoder's dnext at the boundary).
// forward_backward_device(...) == forward(0, ...) then backward(0, ...).
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "model/arena_plan.h"
#include "model/attention_cuda.h"
#include "model/attention_mla_cuda.h"
#include "model/config.h"
#include "model/decoder_common.h"
#include "model/linear_cuda.h"
#include "model/mlp_cuda.h"
#include "model/moe_stats.h"
#include "model/param_layout.h"
#include "model/recompute.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/attention_fp8.h"
#include "ops/cuda/context.h"
#include "ops/cuda/cross_entropy.h"
#include "ops/cuda/fp8.h"

namespace tb::model {

// FP8 linear layers (ops/cuda/fp8.h): every projection and MLP GEMM in FP8 — forward E4M3 x E4M3 with fast
// accumulation, dgrad E5M2 (dY) x E4M3 (W^T), wgrad E5M2 (dY^T) x E4M3 (X^T) into fp32 — the "hybrid" format; with
// grad = e4m3 ("all-E4M3") every gradient named E5M2 here and below is E4M3 instead — with per-tensor scales:
// current (each tensor's own amax, one extra read of it) or delayed (the max, or most recent, of the last
// `history` step amaxes, recorded by the casts; fp8_end_step() rolls the histories). The weights' FP8 copies
// (W and W^T) are made by fp8_begin_step(), once per optimizer step. Attention, norms and the loss stay in BF16; the
// LM head too unless `lm_head` (then its three GEMMs run in FP8 with current scaling of W, x and the logits'
// gradient, in both recipes; W's copies made with the layers'). Saved for the backward: the inputs' transposed FP8
// copies (X^T) instead of the BF16 inputs. The producers of the GEMM inputs emit them where they can (tp 1): with
// delayed scaling the pre-norms and the MLP activation write the FP8 input and its transpose themselves; with current
// scaling they, the activation backward and the norm backwards record the amax of what they write (pre_norm(),
// model::fp8_fused_amax(), fused_grad_amax()).
// `attention`: attention through cuDNN's FP8 SDPA too (ops/cuda/attention_fp8.h; model/attention_fp8_cuda.cpp
// has the formulas): the fused qkv after RoPE cast to E4M3 (current scaling, one scale for q, k and v); o comes out
// E4M3 and is dequantised to bf16 for the out-projection; the backward casts dO to E5M2 (current scaling) and
// dequantises dq, dk, dv (E5M2) into the bf16 dqkv. o, dS, dq, dk and dv are scaled by delayed scaling in both recipes
// (history `history`, `most_recent`, `margin`; the first step at scale 1), P at the fixed 448. Context parallel and
// the deterministic backward are refused; cuDNN on Hopper takes head_dim 128 only.
// Tensor parallel with sequence parallelism (Megatron's column/row-parallel attention and MLP), set before
// prepare(): the decoder's config is then this rank's shard (heads, kv_heads and ffn divided by `size`; d_model and
// vocab whole) and the residual stream, norms, embedding lookup, LM head and loss run on this rank's n / size token
// rows (rows [rank n/size, (rank+1) n/size) of the micro-batch). Embedding and LM head are replicated (the LM head
// split by tokens instead of by vocabulary: the same FLOPs per rank, no cross-entropy communication, V·d more
// weights per rank); the caller sums their gradients and the norms' (partial: this rank's rows) over the group.
// Per layer, with Y = all_gather(y) written in place around this rank's block:
//   y1 = norm1(r1) -> Y1 -> qkv, attention (local heads), out -> reduce_scatter -> r2, y2 = add_norm2 -> Y2 ->
//   fc1, act, fc2 -> reduce_scatter -> x
// backward: all_gather of the output gradient before fc2's and out's backward, reduce_scatter of the input
// gradients of fc1 and qkv. Both ops are enqueued on the decoder's stream (the critical path), except with
// reduce_scatter_async: the backward's reduce-scatters then start beside the stream after the input gradient's GEMM
// and overlap the weight gradient's GEMM (Megatron's overlap of the grad-input reduce-scatter with wgrad);
// wait_async() makes the stream wait for the one started last. With the async ops the forward overlaps too (BF16
// inputs; FP8 casts the whole gathered input first): a column-parallel GEMM computes this rank's own rows while
// all_gather_async brings the others', then the rest; with tp 2 a row-parallel GEMM computes the other rank's rows
// first, sends them (exchange_async: this rank's block of the partial sums goes out, the other rank's partial of
// this rank's rows comes in) while it computes its own, and adds the two (the reduce-scatter, as a sum of two).
struct TensorParallelOps {
  int size = 1, rank = 0;
  std::function<void(__nv_bfloat16* full, std::size_t local_elems)> all_gather;  // in place: rank's block -> full
  std::function<void(const __nv_bfloat16* full, __nv_bfloat16* local, std::size_t local_elems)> reduce_scatter;
  std::function<void(const __nv_bfloat16* full, __nv_bfloat16* local, std::size_t local_elems)> reduce_scatter_async;
  std::function<void(__nv_bfloat16* full, std::size_t local_elems)> all_gather_async;
  std::function<void(const __nv_bfloat16* send, __nv_bfloat16* recv, std::size_t local_elems)> exchange_async;
  std::function<void()> wait_async;
};

// Context parallel, set before prepare(): of every sequence (seq_full tokens, 2 size chunks of c = seq_full / (2 size))
// this rank holds chunks rank and 2 size - 1 - rank (load-balanced causal work), and the decoder's batch x seq are its
// local rows [batch, 2 chunks, c] (seq = seq_full / size; the caller lays the tokens out so). Everything but attention
// is row-local; per layer the K and V of all ranks are all-gathered into natural order and each local chunk attends
// to the keys of positions up to its own (cuDNN, kv_seq > seq: bottom-right causal); in the backward the chunks' dK, dV
// over the whole sequence are summed and reduce-scattered back to their owners. RoPE runs at absolute positions.
// Loss and gradients as with tensor parallel: this rank's rows' mean loss, gradients scaled by 1 / size; the caller
// sums the gradients over the cp ranks (the data-parallel reduction over dp x cp).
struct ContextParallelOps {
  int size = 1, rank = 0;
  std::function<void(const __nv_bfloat16* local, __nv_bfloat16* all, std::size_t local_elems)> all_gather;
  std::function<void(const __nv_bfloat16* all, __nv_bfloat16* local, std::size_t local_elems)> reduce_scatter;
};

// One micro-batch's packed rows and loss weights, on the device (train/step_cuda.h uploads them with the tokens), for
// forward(), backward() and forward_backward_device():
//   positions     [n] int32: each token's position in its segment (core/packing.h segment_positions): RoPE
//   cu_seqlens    [segments + 1] int32: the segment offsets (core/packing.h segment_offsets) padded to prepare()'s
//                 segment capacity by repeating the last one (empty segments): attention within each segment
//   loss_weights  [n] f32: the LM loss is sum_r w_r CE_r instead of the mean (ops/cuda/cross_entropy.h; train/data.h
//                 loss_weights: a loss mask over the step's counted tokens); the head's gradients then are scaled by
//                 grad_scale alone, the weights being each row's share of the whole micro-batch (not of a tp or cp rank)
// positions and cu_seqlens are null unless prepare() had a segment capacity; loss_weights may be null.
// Packed rows run with the BF16 attention, RoPE, cp 1 and a BF16 LM head when weighted (the rest is refused).
struct PackedInputs {
  const std::int32_t* positions = nullptr;
  const std::int32_t* cu_seqlens = nullptr;
  const float* loss_weights = nullptr;
};

// Fp8Options::attention_emulate bits.
enum Fp8AttentionEmulate : unsigned { kEmulateQkv = 1, kEmulateO = 2 };

struct Fp8Options {
  bool enabled = false;
  bool delayed = false;
  int history = 16;
  bool most_recent = false;  // delayed: amax of the last step only (else the max over the history)
  int margin = 0;
  bool lm_head = false;      // the LM head's three GEMMs in FP8 too (ops/cuda/cross_entropy.h: current scaling)
  bool attention = false;    // attention through cuDNN's FP8 SDPA too (needs enabled)
  // A diagnostic of where FP8 attention costs accuracy: BF16 attention whose inputs q, k, v (kEmulateQkv) and/or output
  // O (kEmulateO) are rounded to E4M3 and back, as FP8 attention stores them (one current scale per tensor); the
  // softmax, P and the backward stay BF16. Needs enabled, not attention; no context parallel, no recompute. Its scratch
  // (tokens x (q + 2 kv) bytes) is outside the memory estimate.
  unsigned attention_emulate = 0;
  DType grad = DType::e5m2;  // the gradients' format: e5m2 ("hybrid", as Transformer Engine) or e4m3 (all-E4M3)
  bool grad_stochastic = false;  // the linear layers' output gradients rounded stochastically to FP8 (else nearest)
  DType head_grad = DType::e5m2;  // lm_head: the logit gradients' format (trainbench train: `grad` unless told)
  bool head_stochastic = false;   // lm_head: its logit gradients rounded stochastically to FP8
  unsigned head_gemms = ops::kHeadAllGemms;  // lm_head: which of its GEMMs run in FP8 (ops::LmHeadGemm bits)
};

class CudaDecoder {
 public:
  using bf16 = __nv_bfloat16;

  using Recompute = model::Recompute;

  // deterministic: cuDNN's deterministic attention backward (bitwise repeatable runs; slower).
  // buffer_elems: a gradient buffer of this many elements (>= the layout's grad_total; the tail, zeroed, is padding
  // for a data-parallel partition, parallel/zero.h), and a parameter buffer as much longer as the frozen parameters
  // are; 0: the layout's sizes.
  // stage: the layers this decoder holds (a pipeline stage; default: the whole model); cfg is the whole model's.
  CudaDecoder(ops::DeviceContext& dc, const ModelConfig& cfg, Recompute recompute = Recompute::none,
              bool deterministic = false, Fp8Options fp8 = {}, std::size_t buffer_elems = 0, LayerRange stage = {});
  ~CudaDecoder();
  CudaDecoder(const CudaDecoder&) = delete;
  CudaDecoder& operator=(const CudaDecoder&) = delete;

  const ModelConfig& config() const { return cfg_; }
  const DenseLayout& dense_layout() const { return layout_; }
  int layers() const { return int(layout_.layers.size()); }  // this stage's layers
  bool first_stage() const { return layout_.has_embedding(); }
  bool last_stage() const { return layout_.has_head(); }

  // host_params: layout total elements, in CpuDecoder::params() order; rounded to bf16 (nearest even).
  void load_params(std::span<const float> host_params);
  std::vector<float> params_to_host();  // the bf16 parameters, widened
  std::vector<float> grads_to_host();   // the gradients (bf16 ones widened): grad_total elements, gradient order
  // Where the trainable parameters start in params_device() (gradient element g is parameter element this + g).
  std::size_t trainable_begin() const { return layout_.total - layout_.grad_total; }
  // LoRA's dropout: the optimizer step, a device int64 read by every dropout kernel (a captured step reads each
  // replay's); unset, the decoder's own, which forward_backward() sets.
  void set_step_counter(const std::int64_t* step) { step_ = step; }
  void zero_grads();
  // Zeroes only the gradients that kernels accumulate into (embeddings, norms) and makes the next forward_backward
  // WRITE the linear layers' and the LM head's weight gradients (GEMM beta = 0) instead of adding to them: the
  // start of an optimizer step without a memset of every gradient (saves 4P bytes of writes and the GEMMs' reads
  // of the old values). Later calls accumulate as usual.
  void zero_grads_for_overwrite();

  bf16* params_device() const { return params_.as<bf16>(); }
  // The gradients' element type: fp32 (default) or bf16 (set_grad_type: half the bytes written by the weight
  // gradients' GEMMs and read by the optimizer; every kernel sums in fp32 and rounds once when it stores). Before
  // prepare(); the gradient buffer is reallocated (and zeroed) in the new type.
  void set_grad_type(DType t);
  DType grad_type() const { return grad_type_; }
  float* grads_device() const;  // the fp32 gradients (refused when bf16); moves at prepare() when shared (below)
  void* grad_at(std::size_t flat) const {  // element `flat` of the gradients, of grad_type()
    return static_cast<std::byte*>(grads_ptr_) + flat * grad_size();
  }

  // tokens, targets: [batch, seq] row-major host arrays, values in [0, vocab) (checked on the host);
  // 1 <= seq <= config().seq. Returns the mean cross-entropy (synchronizes the stream). step: LoRA's dropout (the
  // sequences are the step's first).
  double forward_backward(const std::int32_t* host_tokens, const std::int32_t* host_targets, int batch, int seq,
                          double grad_scale = 1.0, std::int64_t step = 1);

  // FP8 only (no-ops otherwise): cast the weights to their FP8 copies (call after every weight update, before the
  // forward: the start of an optimizer step); roll the delayed-scaling histories (call after the step's last
  // micro-batch).
  void fp8_begin_step();
  void fp8_end_step();
  bool fp8() const { return fp8_.enabled; }
  // Delayed scaling: the linear layers' FP8 weight copies as fp8_begin_step() casts them (W and W^T, E4M3, each
  // weight's delayed scale), for an optimizer that writes them in its own update (ops::AdamWTensor::fp8_copy); flat
  // and count: the weight in params_device(). Empty without FP8 or with current scaling (its scale needs the new
  // weight's amax first). After fp8_weights_from_optimizer(), fp8_begin_step() casts them only while they are stale:
  // the first step, and after load_params().
  struct Fp8WeightCopy {
    std::size_t flat = 0, count = 0;
    ops::Fp8CastArgs cast;
  };
  std::vector<Fp8WeightCopy> fp8_weight_copies() const;
  void fp8_weights_from_optimizer() { fp8_weights_by_optimizer_ = true; }

  // Sizes the activation arena (`slots` activation sets, at least) and plans attention for (batch, seq); allocates
  // (synchronizing) when they change or more slots are asked for. segments > 0: packed rows of at most that many
  // segments per micro-batch (PackedInputs), the attention planned for them.
  void prepare(int batch, int seq, int slots = 1, int segments = 0);
  int slots() const { return slots_; }
  int segments() const { return segments_; }
  // Tensor parallel (see TensorParallelOps); before the first prepare(). Raises for what it does not support yet.
  void set_tensor_parallel(TensorParallelOps tp);
  int tp_size() const { return tp_.size; }
  // Context parallel (see ContextParallelOps); before the first prepare().
  void set_context_parallel(ContextParallelOps cp);
  // Gradients that share the activations' memory (model/grad_sharing.h); before the first prepare(). One
  // micro-batch per optimizer step, one activation set, no context parallel: layer k's saved activations sit in the
  // bytes of gradients written after its backward (the earlier layers', untied: the embedding's), so the arena
  // mostly disappears into the gradient buffer. It frees the separate gradient buffer at once (grads_device() is
  // null until prepare(), which allocates the arena with the gradients inside). Every forward_backward overwrites
  // the gradients (the caller calls zero_grads_for_overwrite() before each forward; forward_backward() does it
  // itself) and they stay valid until the next forward: read them (clip, AdamW, the data- and tensor-parallel
  // reductions) in between. Bit-identical to separate buffers.
  void share_grads_with_activations();
  bool shares_grads() const { return share_grads_; }
  // The bytes such an arena needs beyond the gradient buffer (cfg: this rank's shard of the whole model; one
  // activation set).
  static std::size_t shared_arena_bytes(const ModelConfig& cfg, int batch, int seq, Recompute recompute,
                                        const Fp8Options& fp8 = {}, int tp = 1, DType grads = DType::f32);
  // Enqueues one micro-batch on dc's stream: tokens, targets device [batch, seq] (unchecked: an id outside the
  // vocabulary gives a NaN loss); *loss_out (device) = the mean cross-entropy. prepare(batch, seq) first.
  void forward_backward_device(const std::int32_t* tokens, const std::int32_t* targets, int batch, int seq,
                               double grad_scale, float* loss_out, const PackedInputs* packed = nullptr,
                               std::int64_t first_sequence = 0);
  // The halves of forward_backward_device, for a pipeline schedule; the micro-batch's activations live in activation
  // set `slot` (< slots()) from forward until its backward. Sizes are prepare()'s.
  //   forward: first stage: reads tokens (in null); else in = the previous stage's h [boundary_rows(), d].
  //            last stage: final norm, LM head and cross-entropy: *loss_out = the mean loss, the LM head's gradient
  //            accumulated (grad_scale) and dyf kept for backward (out null); else out = h [boundary_rows(), d].
  //   backward: last stage: from the kept dyf (dout null); else dout = dh [boundary_rows(), d].
  //             first stage: embedding gradient from tokens (din null); else din = the input's dh.
  // packed: the micro-batch's packed rows and loss weights (PackedInputs), the same to its forward and backward.
  // first_sequence: the micro-batch's first sequence in the step's batch (LoRA's dropout masks; its backward draws
  // them again).
  void forward(int slot, const std::int32_t* tokens, const std::int32_t* targets, const bf16* in, bf16* out,
               double grad_scale, float* loss_out, const PackedInputs* packed = nullptr,
               std::int64_t first_sequence = 0);
  void backward(int slot, const std::int32_t* tokens, const bf16* dout, bf16* din,
                const PackedInputs* packed = nullptr);
  // Rows of the stage boundary tensor h (and dh) for prepare()'s sizes: batch x seq / tp (sequence parallel).
  std::int64_t boundary_rows() const { return std::int64_t(batch_) * seq_ / tp_.size; }

  // Device bytes of the activation arena (and backward scratch) for these sizes, without allocating.
  // stage, slots: a pipeline stage's layers and its activation sets (prepare()'s slots).
  static std::size_t activation_bytes(const ModelConfig& cfg, int batch, int seq, Recompute recompute,
                                      const Fp8Options& fp8 = {}, int tp = 1, LayerRange stage = {}, int slots = 1);
  static std::size_t fp8_weight_bytes(const ModelConfig& cfg);  // the W and W^T FP8 copies of the layers
  static std::size_t fp8_weight_bytes(const DenseLayout& layout);
  static std::size_t fp8_lm_head_bytes(const ModelConfig& cfg);  // and of the LM head (Fp8Options::lm_head)
  std::size_t activation_bytes() const { return arena_.bytes(); }
  std::size_t attention_workspace_bytes() const;

  // Mixture of Experts: what the MoE layers routed since reset_moe_stats() (synchronizes; empty for a dense model).
  MoeStats moe_stats() const;
  void reset_moe_stats();
  // Aux-loss-free balancing (MoeConfig::bias_update_rate > 0; nothing otherwise), once per optimizer step: each MoE
  // layer's load since the last update (device floats [E]) passed to sum_loads (the sum over the data-parallel
  // ranks, in place; enqueued), then its bias updated and the load zeroed (ops/cuda/moe.h). expert_bias(): the MoE
  // layers' bias, layer after layer (synchronizes).
  void update_expert_bias(const std::function<void(float*, std::size_t)>& sum_loads);
  std::vector<float> expert_bias() const;

  // Called after each op is enqueued with its name ("gemm fwd", "attention bwd", ...): bench/op_profile.h's
  // OpProfiler::mark records an event there. Empty: no calls.
  std::function<void(std::string_view)> on_op;
  // Data-parallel overlap (train/trainer_cuda.cpp): called while forward_backward_device enqueues, in stream order.
  // on_params_needed(end): the next forward part reads parameters below flat offset `end` (ascending over a call);
  // on_grads_ready(from): every gradient at flat offset >= `from` is final for this call (descending; 0 last).
  std::function<void(std::size_t end)> on_params_needed;
  std::function<void(std::size_t from)> on_grads_ready;
  // Data or tensor parallel with untied embeddings: the rows the embedding backward accumulates, from every rank (the
  // caller all-gathers this rank's dnext [rows, d] and tokens [rows] over tp, then dp: whole micro-batches, so the
  // learned positions' gradient is taken from them as well), with a workspace for that many rows. Unset: local.
  struct EmbeddingRows {
    const bf16* dnext;
    const std::int32_t* tokens;
    std::int64_t rows;
    void* workspace;
    std::size_t workspace_bytes;
  };
  std::function<EmbeddingRows(const bf16* dnext, const std::int32_t* tokens, std::int64_t rows)> gather_embedding_rows;
  // FP8 delayed scaling over ranks that hold the same layers (data, tensor and context parallel): called by
  // fp8_end_step() with each scaling buffer (`floats` device floats, Fp8Scales' slots) before the scale update; the
  // caller replaces it by its elementwise max over those ranks (in stream order). The ranks' buffers are equal but
  // for the amaxes, so every rank then derives the scales one GPU would from the whole batch and whole tensors
  // (Transformer Engine's amax reduction). Unset: each rank scales by its own amaxes.
  std::function<void(float* buffer, std::size_t floats)> fp8_reduce_amax;

 private:
  struct LayerActs {  // device pointers into the arena: per layer, or the shared copy (see above); the MLP's are its own
    bf16 *r1, *y1, *r2, *y2;
    float *mean1, *rstd1, *mean2, *rstd2;
    AttentionActs attn;  // the attention core's (model/attention_cuda.h)
    LinearSaved lin[2];  // what qkv and out (Lin) keep: FP8 X^T and its scale (fp8_assign_input_scales)
  };
  struct HeadActs {  // per activation set, last stage only: the final norm's sum and statistics, the LM head's dyf
    bf16 *rf, *dyf;
    float *meanf, *rstdf;
  };
  struct Scratch {  // shared by all layers
    std::int32_t *tokens, *targets;
    bf16 *x0, *m, *yf, *dnext, *dr2, *dy, *dout, *dqkv;
    bf16 *part, *dyl;  // tensor parallel: a row-parallel GEMM's partial output [n, d]; dy reduce-scattered [n/tp, d]
    float *loss;
    void *ce, *norm_ws, *embed_ws;
    std::uint8_t *xq, *dyq, *dyqt;  // FP8 scratch: a linear's input, its output gradient and that transposed (in
                                    // the bytes at ce: the LM head never runs while a linear holds them)
    std::uint8_t *dout8, *dqkv8;    // FP8 attention's backward: dO [n, H hd] and dq|dk|dv [n, (H + 2G) hd]
    void* lora_ws;                // LoRA (LinearEnv): the adapters' workspace (LoraCuda::workspace_bytes),
    bf16 *lora_t, *lora_dz;       // an unfused input gradient's part [n, in], dz [adapters][n, r]
    std::size_t ce_bytes, norm_ws_bytes, embed_ws_bytes;
  };
  // What an arena holds: `layers` layers' activations in `slots` sets; the embedding's and the head's scratch.
  struct ArenaParts {
    int layers = 0, slots = 1;
    bool embedding = true, head = true;
  };
  // The arena's bytes: `total` = the (set, layer) blocks back to back (each `block` bytes), then `rest` (the shared
  // copy, the head sets, the scratch).
  struct ArenaSize {
    std::size_t total = 0, rest = 0, block = 0;
  };
  // Carves (or, with base null, only sizes) the arena for batch x seq tokens: per (set, layer) a block of what the
  // layer keeps (its own fields, then its MLP's), the shared copy (a union over the layers), the head sets and the
  // scratch. acts: slot-major (set k's layer l at k * layers + l); heads: one per set (head only). block_at (byte
  // offsets from base, one per block): where the blocks go instead (gradient sharing); the rest then starts at base.
  // A grouped-query layer's attention linears (model/linear_cuda.h), and the index of each in LayerActs::lin; none for
  // a MLA layer.
  enum Lin { kQkv, kOut };
  struct LayerLinears {
    LinearCuda qkv, out;
  };
  static std::vector<std::optional<LayerLinears>> make_linears(const DenseLayout& layout, const ModelConfig& cfg);
  // linears, mlps: the layers' attention linears and MLPs, which plan their own fields.
  // mlas: each layer's MLA attention (null for a grouped-query layer), which plans its own fields too.
  static ArenaSize carve(const ModelConfig& c, const ArenaParts& parts, int batch, int seq,
                         const RecomputePolicy& policy, const Fp8Options& fp8, int tp,
                         std::span<const std::optional<LayerLinears>> linears,
                         std::span<const std::unique_ptr<MlpCuda>> mlps,
                         std::span<const std::unique_ptr<MlaAttentionCuda>> mlas, std::byte* base,
                         std::vector<LayerActs>* acts, std::vector<HeadActs>* heads, Scratch* scratch,
                         const std::vector<std::size_t>* block_at = nullptr);
  // A layer's own fields (the norms', and with gqa, lin, the attention core's and its qkv and out linears') in the
  // pass; y2_bf16: the MLP reads y2 in BF16 in its backward.
  static void plan_layer(ArenaPlan& a, const PlanPass& pass, std::span<LayerActs> sets, const ModelConfig& c,
                         std::size_t n, std::size_t nl, const RecomputePolicy& policy, bool fp8_attention,
                         const LayerLinears* lin, bool y2_bf16);
  // Whether layer l's MLP reads its input y2 in BF16 in the backward (a router: always; else its input linear's say).
  static bool mlp_reads_bf16_input(const MlpCuda& mlp, bool fp8);
  static ArenaParts arena_parts(const ModelConfig& c, LayerRange stage, int slots);
  // Sizes the arena of a decoder not built (the memory estimate): its modules made for the sizing only.
  static ArenaSize size_arena(const ModelConfig& cfg, LayerRange stage, int slots, int batch, int seq,
                              Recompute recompute, const Fp8Options& fp8, int tp);
  // acts_ is layer-major: layer l's activation sets side by side.
  std::size_t act_index(int slot, int l) const {
    return std::size_t(l) * (acts_.size() / layout_.layers.size()) + std::size_t(slot);
  }
  const LayerActs& acts(int slot, int l) const { return acts_[act_index(slot, l)]; }
  // Offsets in the gradient buffer (the trainable parameters) for the data-parallel hooks: where a slot's gradient
  // ends (0: frozen), where layer l's trainable parameters end, and where they start (grad_total: none).
  std::size_t slot_end(int slot) const;
  std::size_t layer_end(int l) const;
  std::size_t layer_begin(int l) const;
  void zero_grad_slot(int slot);              // one gradient slot (slot < 0: none)
  std::vector<int> shared_grad_slots() const;  // sharing: the accumulated slots the backward zeroes just in time
  void params_needed(std::size_t end) {
    if (on_params_needed) on_params_needed(end);
  }
  void grads_ready(std::size_t from) {
    if (on_grads_ready) on_grads_ready(from);
  }
  void check_prepared(int slot, const char* what) const;
  void mark(std::string_view op) {
    if (on_op) on_op(op);
  }
  TensorView<const bf16> P(int slot) const;  // a parameter slot (empty for -1: absent)
  template <class T>
  TensorView<T> G(int slot) const;  // its gradient (T: the gradients' type, float or bf16)
  template <class F>
  void with_grad_type(F&& f) const {  // f(std::type_identity<T>{}), T the gradients' element type
    ops::with_float_type(grad_type_, std::forward<F>(f));
  }
  std::size_t grad_size() const { return dtype_size(grad_type_); }
  std::vector<std::optional<LayerLinears>> linears_;  // per layer of this decoder (none for a MLA layer)
  std::vector<std::unique_ptr<MlaAttentionCuda>> mlas_;  // per layer: its MLA attention (null: grouped-query)
  std::unique_ptr<MlaShared> mla_shared_;                // what the MLA layers share (a MLA model)
  std::vector<std::unique_ptr<MlpCuda>> mlps_;           // per layer: its MLP (model/mlp_cuda.h)
  MlaCall mla_call(const LinearEnv& e) {
    return {e, policy_, *mla_shared_, {s_.norm_ws, s_.norm_ws_bytes}, batch_, seq_};
  }
  // Every linear of layer l in a fixed order (qkv and out, or the MLA attention's, then its MLP's): the FP8 tables'
  // order. linear_saved: what activation set `set` keeps for the layer's linear k of that order.
  std::vector<LinearCuda*> layer_linears(int l);
  std::vector<const LinearCuda*> layer_linears(int l) const;
  LinearSaved& linear_saved(int set, int l, int k);
  int linear_count() const;                     // of all the layers
  LinearEnv env() const;                        // what the linears read of this decoder for one call
  MlpCall mlp_call(const LinearEnv& e, std::int64_t rows) const { return {e, policy_, rows, seq_, grad_scale_}; }
  // The pre-norm of a layer (first: norm1 before attention; else norm2 before the MLP): r = x + residual (r = x
  // without one), y = norm(r) into A.y1 / A.y2. `fused`: what the linear reading y keeps (null: y is read in BF16).
  // With FP8 at tp 1 (y whole on this rank) and `fused`, the norm feeds the GEMM's FP8 input: delayed scaling writes
  // s_.xq and fused->xt itself (y is not written), current scaling records y's amax. With tp > 1 in BF16 y's all-gather
  // starts beside the stream (gathering). Returns how the linear takes y.
  LinearInput pre_norm(int l, bool first, const LinearSaved* fused, const bf16* x, const bf16* resid,
                       const LayerActs& A, std::int64_t rows);
  // Current scaling at tp 1: the output-gradient amax slot of `lin` zeroed for the kernel producing that gradient (a
  // norm backward) to record into; null otherwise (and for a null lin).
  float* fused_grad_amax(const LinearCuda* lin);
  // The linear of layer l's MLP whose output gradient a norm backward may record the amax of (null: none, l < 0).
  const LinearCuda* mlp_output_linear(int l);
  // model::fp8_scaled_cast with this decoder's device and margin.
  void fp8_scaled_cast(ops::Fp8CastArgs a, const ops::Fp8Meta& m, bool delayed, bool amax_ready) {
    model::fp8_scaled_cast(dc_, fp8_.margin, a, m, delayed, amax_ready);
  }
  void fp8_assign_input_scales(int slots);
  // The block (model/block_cuda.cpp). Its forward from x (+ resid) into A and activation set `set` of its MLP; the
  // MLP's output into scratch m unless `recompute_only` (full recompute: what the backward reads, without the output).
  void layer_forward(int l, int set, const bf16* x, const bf16* resid, const LayerActs& A, int batch, int seq,
                     bool recompute_only);
  // dnext_amax_ready: the gradient arriving in s_.dnext came with the MLP output linear's amax (fused_grad_amax);
  // returns whether the gradient it leaves in s_.dnext does (for layer l - 1).
  bool layer_backward(int l, int set, const LayerActs& A, int batch, int seq, bool dnext_amax_ready);

  ops::DeviceContext& dc_;
  ModelConfig cfg_;
  DenseLayout layout_;
  std::size_t buffer_elems_ = 0;      // gradient elements, >= layout_.grad_total (params: trainable_begin() more)
  ops::DeviceBuffer params_, grads_;  // bf16, grad_type_ (grads_ empty when shared)
  void* grads_ptr_ = nullptr;         // grads_, or its place in the arena (share_grads_)
  DType grad_type_ = DType::f32;
  bool share_grads_ = false;

  RecomputePolicy policy_;
  Fp8Options fp8_;
  ops::DeviceBuffer fp8_weights_;                       // per linear: W (E4M3) then W^T (LinearCuda::Fp8State)
  bool fp8_weights_by_optimizer_ = false;               // fp8_weights_from_optimizer()
  bool fp8_weights_stale_ = true;                       // the bf16 weights changed since fp8_weights_ were cast
  std::unique_ptr<ops::Fp8Scales> fp8_fwd_, fp8_bwd_;   // fwd: x at 2i, W at 2i + 1 (E4M3); bwd: dy at i (E5M2)
  std::unique_ptr<ops::Fp8Scales> fp8_frozen_;          // frozen weights' W scales (current, cast once: no update)
  bool fp8_frozen_stale_ = true;                        // the frozen weights' FP8 copies are not cast yet
  std::unique_ptr<ops::Fp8Scales> fp8_inputs_;          // current scaling, activation sets 1..: x of linear i
  ops::DeviceBuffer fp8_head_w_;                        // Fp8Options::lm_head: the LM head's W, then W^T (E4M3)
  std::unique_ptr<ops::Fp8Scales> fp8_head_;            // its W, x, dlogits slots (current scaling)
  bool fp8_head() const { return fp8_.enabled && fp8_.lm_head && last_stage(); }
  bool fp8_attention() const { return fp8_.enabled && fp8_.attention; }
  // The attention core of every grouped-query layer (model/attention_cuda.h): BF16, FP8, or context parallel
  // (set_context_parallel); null for a MLA model.
  std::unique_ptr<AttentionCore> attention_;
  AttentionSetup attention_setup() const { return {dc_, cfg_, fp8_, deterministic_, layers(), on_op}; }
  bool overwrite_linear_grads_ = false;  // set by zero_grads_for_overwrite() for the next forward_backward
  bool overwrite_head_grad_ = false;     // and for the next LM head call (in forward(): the step's first)
  TensorParallelOps tp_;
  ContextParallelOps cp_;
  bf16* own(bf16* full, std::int64_t local_rows) const;  // this rank's block of a [n, d] buffer (tp 1: full)
  void tp_gather(bf16* full, std::int64_t local_rows);   // no-op at tp 1
  void tp_scatter(const bf16* full, bf16* local, std::int64_t local_rows);
  // An input gradient's reduce-scatter started after its dgrad GEMM, overlapping the wgrad GEMM (empty: tp 1, or no
  // async op: tp_wait() runs it on the stream then); tp_wait(): the stream waits for it.
  std::function<void()> tp_scatter_async(const bf16* full, bf16* local, std::int64_t local_rows);
  void tp_wait(const bf16* full, bf16* local, std::int64_t local_rows);
  bool deterministic_;

  // Packed rows: per activation set the segment tables of its micro-batch (ops/cuda/segments.h), filled by forward()
  // from PackedInputs::cu_seqlens; rows_: the rows of the micro-batch being run (null: not packed), which the blocks
  // hand to the attention core.
  int segments_ = 0;
  ops::DeviceBuffer segment_tables_;
  PackedRows packed_rows_{};
  const PackedRows* rows_ = nullptr;
  void begin_rows(int slot, const PackedInputs* packed, bool fill);

  // LoRA's dropout: the step counter (step_, or own_step_ of forward_backward()) and the running micro-batch's first
  // sequence (first_sequence_[slot] from its forward to its backward).
  const std::int64_t* step_ = nullptr;
  ops::DeviceBuffer own_step_;
  std::vector<std::int64_t> first_sequence_;
  std::int64_t running_first_sequence_ = 0;

  // Activations and gradient scratch for batch_ x seq_ tokens.
  int batch_ = 0, seq_ = 0, slots_ = 0;
  double grad_scale_ = 1;  // the running forward's (a MoE layer's load-balancing losses scale with it)
  ops::DeviceBuffer arena_;
  std::vector<LayerActs> acts_;
  std::vector<HeadActs> heads_;
  Scratch s_{};
};

}  // namespace tb::model
