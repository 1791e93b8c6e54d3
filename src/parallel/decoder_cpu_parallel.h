// parallel/decoder_cpu_parallel.h: the dense decoder (model/decoder_cpu.h has the math) on the CPU reference ops, in
// float or double, as one pipeline stage on one rank of a tensor- (TP), sequence- (SP) and context-parallel (CP)
// mesh. The one CPU copy of the layer math: with groups of one rank (comm::make_self_communicator()) and one stage
// holding every layer it is the single-rank reference (model::CpuDecoder wraps exactly that); on a mesh it is the
// reference the parallel layouts are checked against (every layout gives the single-rank loss and gradients).
//
// Stage: layers [first, last). The first stage (first == 0) owns the embedding (and learned positions), the last
// (last == layers) the final norm, the LM head and the loss. Between stages the residual stream crosses as one
// tensor h = x + resid (the MLP output plus its residual: the r1 of the next layer, or the rf of the final norm),
// [rows, d_model] with rows = activation_rows(): a non-first stage reads h as input, a non-last stage writes it;
// backward takes dh and (non-first) returns the input's dh.
//
// Token order. forward() takes the whole micro-batch, tokens and targets [batch, seq]. CP rank r (of cp) holds
// chunks r and 2cp-1-r of every sequence (2cp chunks of seq / 2cp tokens; load-balanced causal attention):
// local positions pos[j], j < seq / cp. Its n = batch * seq / cp tokens are ordered (b, j) row-major. Without SP
// every TP rank holds all n rows of the residual stream; with SP, TP rank t holds rows [t n/tp, (t+1) n/tp).
//
// Per layer, with W_* this TP rank's shard (Megatron):
//   r1 = x + resid;  y1 = norm1(r1)                                  [rows]
//   Y1 = gather(y1)                                                   [n]  (SP: all-gather over tp)
//   q|k|v = Y1 Wqkv^T  (heads/tp query heads, kv_heads/tp K and V heads);  rope at the tokens' positions
//   K, V = all-gather of k, v over cp, reordered to natural positions  [batch, seq]
//   o = attention(q at pos, K, V)  (causal by absolute position)
//   r2 = reduce(o Wout^T) + r1;  y2 = norm2(r2)                        reduce: SP reduce-scatter, else all-reduce
//   x = reduce(act(gather(y2) Wfc1^T) Wfc2^T);  resid = r2             (swiglu: rank holds gate AND up rows)
// Embedding, LM head and loss run on this rank's rows with the whole (replicated) E, P and Wlm, as the CUDA backend
// does (model/decoder_cuda.h): with SP each tp rank takes its n/tp token rows, without SP every tp rank all n.
//   x0[i] = E[token of row i] (+ P[position of row i])
//   yf = normf(x + resid);  per chunk c of at most lm_head_chunk rows (default 256):
//     z_c = yf_c Wlm^T  [chunk, vocab];  loss += sum_rows (lse(z_c) - z_c[target]) / (batch seq)
//     dz_c = (softmax(z_c) - onehot(target)) * grad_scale / (batch seq);  dyf_c = dz_c Wlm;  dWlm += dz_c^T yf_c
//   (with loss weights w: w_row instead of 1 / (batch seq), in the loss and in dz_c)
//   the loss summed over cp (and over tp with SP; without SP every tp rank has the same) is the single-rank mean.
// Packed rows (MicroBatch::docs; cp 1): positions are each token's in its segment (RoPE, learned positions) and a
//   query attends to the keys of its segment up to itself (ops/cpu/attention.h's packed forms); the rest is row-local.
//   The head needs no communication. forward() keeps yf, not the logits: backward() recomputes each chunk's z (at
//   most [chunk, vocab] logits exist at once); forward_backward() runs the head's forward and backward in one pass.
// Backward mirrors it: the backward of gather is reduce (SP: reduce-scatter; else all-reduce), of reduce is gather
// (SP: all-gather; else identity); dK, dV of all keys are reordered and reduce-scattered over cp to their owners.
//
// Parameters: this rank's part of model::dense_layout(cfg, {first, last}), in local_layout() =
// dense_layout(tp_shard_config(cfg, tp), {first, last}) (parallel/tensor_shard.h: the same slot names in the same
// order; qkv and fc1 hold this rank's rows, out and fc2 its columns; embedding, positions, norms and LM head whole),
// and one flat buffer (params()); grads() holds the trainable slots' gradients only, in the layout's gradient order
// (model/params.h grad_offset: every slot without LoRA, the adapters with it). With tp = 1 and every layer that is
// dense_layout(cfg) itself. Gradients ACCUMULATE (grad_scale * dloss/dparams; the caller zeroes). A frozen slot gets
// none: a frozen linear runs no weight-gradient product, a frozen embedding no backward at all.
//   tp-replicated slots (embedding, positions, norms, LM head): with SP their gradients are partial sums over token
//     rows, all-reduced over tp at the end of each backward; without SP every tp rank computes the same full-token
//     gradient. Either way every tp rank holds the same value and add_grads_to_full() counts tp rank 0's copy only.
//     A LoRA factor held whole (A of a column-parallel linear, B of a row-parallel one, model/lora.h) has a partial
//     sum over the tp ranks in either case: it is all-reduced over tp at the end of each backward too.
// LoRA (model/lora.h): each adapter runs after its linear, on the same input (SP: the gathered one) and into the same
// output (a row-parallel linear's partial sums, reduced with them); its dropout mask is keyed by the micro-batch's
// first_sequence and step (MicroBatch), so every layout draws the single rank's masks.
//   over cp (and dp) every gradient is partial (this rank's tokens): the optimizer reduces it over dp x cp.
//   tied embeddings: the LM head is the embedding when one stage is both first and last; a last stage that is not
//     first keeps its own copy of the embedding (slot embed.weight, local_layout().lm_head; its gradient goes to
//     embed.weight in add_grads_to_full; a pipeline sums the two copies' gradients between the first and last stage).
// Multi-head latent attention (model/config.h MlaConfig; parallel/decoder_cpu_parallel_mla.cpp): a MLA layer computes
// its latents on this rank's rows with the replicated W_dq, W_dkv and latent norms (tp-replicated slots as above),
// gathers them over tp (SP), and runs the up projections on its heads / tp heads (W_uq, W_ukv column parallel, W_o
// row parallel); its keys and values cross cp as the dense layer's do.
// Mixture of Experts (model/config.h MoeConfig; parallel/decoder_cpu_parallel_moe.cpp): a MoE layer's MLP runs on this
// rank's rows with the router and shared experts whole on every tp rank (expert tensor parallel 1, tp-replicated
// slots as above; no gather or reduce around it). Its load-balancing losses count the tokens of the whole
// micro-batch: the per-expert counts and probability sums are all-reduced over cp (and tp with SP) first, so every
// layout has the single rank's losses and gradients; capacity (capacity_factor > 0) applies to each rank's own rows.
// The losses add to the gradient (scaled like the LM loss by grad_scale), not to the returned loss: moe_stats() has
// them. Routed experts: without expert parallel (groups.ep null or of one rank) all E on every rank, tp-replicated;
// with ep > 1 (parallel/mesh.h's ep group; SP when tp > 1, each tp rank routing its own rows) ep rank r holds
// experts [r E/ep, (r+1) E/ep) (local_layout() has their slots only) and the layer dispatches as Megatron-Core's
// all-to-all dispatcher: route locally, count pairs per expert, exchange the counts over ep, all-to-all the permuted
// rows to their experts' owners, run the local experts, all-to-all the outputs back, unpermute (backward: the same
// exchanges of the gradients). An expert's gradient then sums the rows of its ep group's micro-batches: partial over
// the edp group (the ranks holding it), added by every holder in add_grads_to_full and reduced over edp by the
// trainer. Every rank of an ep group must run the same layers' forwards and backwards in the same order.
// Activations are kept per micro-batch id from forward() until backward() (or drop()) of that id, so a pipeline
// schedule may run several forwards before their backwards.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/packing.h"
#include "core/tensor.h"
#include "model/config.h"
#include "model/moe_stats.h"
#include "model/param_layout.h"
#include "ops/cpu/moe.h"

namespace tb::parallel {

struct EpPlan;

// The groups a stage talks to (build them from parallel::Mesh: {mesh.tp(), mesh.cp(), &mesh.ep()}; size-1 groups are
// fine; ep null: no expert parallel).
struct DecoderGroups {
  comm::Communicator& tp;
  comm::Communicator& cp;
  comm::Communicator* ep = nullptr;
};

struct StageSpec {
  int first_layer = 0;
  int last_layer = -1;             // exclusive; -1: all layers
  bool sequence_parallel = false;  // residual stream on n / tp rows per tp rank (tp == 1: changes nothing)
};

// A 2-D block of the full parameter buffer held by this rank, stored contiguously ([rows, cols] row-major) in the
// local buffer: full element (i, j) of the block is full[full_offset + i * full_stride + j].
struct ShardBlock {
  std::string name;  // the full slot (model::dense_layout name)
  std::size_t full_offset = 0, local_offset = 0;
  std::int64_t rows = 0, cols = 0, full_stride = 0;
  bool tp_replicated = false;  // the same values on every tp rank: counted once (tp rank 0)
  bool expert = false;         // a routed expert held by this ep rank only (ep > 1): its gradient partial over edp
  // The block in the gradient buffers (model::kNoGrad: frozen): the full model's and the local one's.
  std::size_t full_grad = model::kNoGrad, local_grad = model::kNoGrad;
  bool trainable() const { return local_grad != model::kNoGrad; }
};

// A micro-batch: tokens and targets [batch, seq] row-major, the whole sequences (every cp rank passes the same).
// The first stage reads tokens, the last targets; either may be empty on a stage that does not need it.
// Packed rows (core/packing.h): docs gives each row's documents; attention then runs per segment and positions restart
// in each (every stage reads it; context parallel refuses it). loss_weights [batch, seq] (optional, the last stage's):
// the loss is sum_r w_r CE_r instead of the mean over batch · seq (ops/cpu/cross_entropy.h; train/data.h's weights).
// LoRA's dropout: the micro-batch's first sequence in the step's global batch and the step (1-based) key its masks.
struct MicroBatch {
  std::span<const std::int32_t> tokens, targets;
  int batch = 1, seq = 0;
  Documents docs = {};
  std::span<const double> loss_weights = {};
  std::int64_t first_sequence = 0, step = 1;
};

using model::MoeStats;  // what the stage's MoE layers routed (model/moe_stats.h)

// The positions held by cp rank `rank` of `cp` in a sequence of `seq` tokens: chunks rank and 2cp-1-rank of
// seq / 2cp tokens each (cp == 1: 0, 1, ..., seq-1).
std::vector<std::int64_t> cp_positions(int cp, int rank, int seq);

template <class T>
class ShardedCpuDecoder {
 public:
  ShardedCpuDecoder(const model::ModelConfig& cfg, DecoderGroups groups, StageSpec stage = {});
  ~ShardedCpuDecoder();
  ShardedCpuDecoder(const ShardedCpuDecoder&) = delete;
  ShardedCpuDecoder& operator=(const ShardedCpuDecoder&) = delete;

  const model::ModelConfig& config() const { return cfg_; }
  int first_layer() const { return first_; }
  int last_layer() const { return last_; }
  bool is_first() const { return first_ == 0; }
  bool is_last() const { return last_ == cfg_.layers; }

  // Parameters: the full model's flat buffer (model::dense_layout(cfg) order) in, this rank's part kept;
  // init(seed) loads the initial values of model::init_params.
  void load_full(std::span<const T> full);
  void init(std::uint64_t seed);
  // Adds this rank's gradient shard into a full-size gradient buffer (dense_layout(cfg).grad_total elements; tp-
  // replicated slots on tp rank 0 only), so the sum over the tp and cp ranks of every stage is the full model's
  // gradient (with expert parallel: over the ranks of the stage's ep groups, each on its own micro-batches: the
  // gradient of their sum).
  void add_grads_to_full(std::span<T> full) const;
  std::span<T> params() { return params_; }
  std::span<T> grads() { return grads_; }
  std::span<const T> params() const { return params_; }
  std::span<const T> grads() const { return grads_; }
  const model::DenseLayout& local_layout() const { return local_; }
  std::span<const ShardBlock> shard_blocks() const { return blocks_; }  // one per part of a full slot, local order
  void zero_grads();

  // Token rows per LM-head chunk: at most [chunk, vocab] logits exist at once (default 256).
  void set_lm_head_chunk(int tokens);

  // Rows of the residual stream on this rank (n, or n / tp with SP) and the elements of a stage's input/output.
  std::int64_t activation_rows(int batch, int seq) const;
  std::size_t activation_size(int batch, int seq) const {
    return std::size_t(activation_rows(batch, seq)) * std::size_t(cfg_.d_model);
  }

  // Runs the stage on micro-batch `mb` and keeps its activations. Non-first stages read `input`, non-last ones
  // write `output` (activation_size() elements each). Returns the micro-batch's mean loss on the last stage
  // (every rank of the stage gets it), 0 elsewhere.
  double forward(int mb, const MicroBatch& b, std::span<const T> input = {}, std::span<T> output = {});
  // The backward of micro-batch `mb` (frees its activations). Non-last stages read `doutput`, non-first ones
  // write `dinput`; the last stage scales the loss gradient by grad_scale, and so does every stage the gradient of its
  // MoE layers' load-balancing losses (a pipeline passes every stage the same grad_scale).
  void backward(int mb, std::span<const T> doutput = {}, std::span<T> dinput = {}, double grad_scale = 1.0);
  // forward() then backward() of micro-batch `mb` on a last stage, the LM head's forward and backward fused (its
  // logits computed once). Returns the loss; non-first stages read `input` and write `dinput`.
  double forward_backward(int mb, const MicroBatch& b, double grad_scale = 1.0, std::span<const T> input = {},
                          std::span<T> dinput = {});
  void drop(int mb);  // forget a forward that will not be backpropagated
  const MoeStats& moe_stats() const { return moe_stats_; }
  void reset_moe_stats();
  // Aux-loss-free balancing (MoeConfig::bias_update_rate > 0; empty spans otherwise): the stage's MoE layers' expert
  // bias [MoE layers, E], and the pairs their forwards routed to each expert since the last update (the trainer sums
  // them over the data-parallel ranks before update_expert_bias(), which applies the update and zeroes them).
  std::span<const double> expert_bias() const { return expert_bias_; }
  std::span<double> expert_load() { return expert_load_; }
  void update_expert_bias();
  std::size_t in_flight() const { return states_.size(); }

 private:
  struct LayerActs;
  struct State;
  struct Scratch;
  struct Dims {  // this tp rank's widths: heads, kv heads, q / kv columns, fused qkv, fc1 rows, ffn
    std::int64_t d, hd, hl, kvl, ql, kvdl, width, fc1l, ffl;
  };
  using View = TensorView<T>;
  using CView = TensorView<const T>;
  void build_layout();
  void check_batch(const MicroBatch& b) const;
  double run_forward(int mb, const MicroBatch& b, std::span<const T> input, std::span<T> output,
                     const double* head_grad_scale);
  void run_backward(State& s, std::span<const T> doutput, std::span<T> dinput, double grad_scale);
  std::unique_ptr<State> take_state();
  void retire(int mb);
  void begin_replicated_grads();
  void end_replicated_grads();
  View P(int slot);
  View G(int slot);
  CView gather_rows(std::vector<T>& buf, CView local, std::int64_t n);
  void reduce_rows(View dst, const std::vector<T>& partial, std::int64_t n);
  void gather_kv(const State& s, const std::vector<T>& qkv, std::int64_t col, std::int64_t width, std::vector<T>& kv);
  void scatter_dkv(const State& s, const std::vector<T>& dkv, std::int64_t col, std::int64_t width,
                   std::vector<T>& dqkv);
  std::vector<std::int64_t> row_positions(const State& s) const;
  std::span<const std::int32_t> row_ids(const State& s, const std::vector<std::int32_t>& ids) const;
  std::span<const double> row_weights(const State& s) const;
  double head_share(const State& s) const;
  void embed_forward(const State& s, View x0);
  void layer_forward(State& s, int l, CView x, CView resid, View out);
  void attention_forward(const State& s, LayerActs& A);
  void rope(const State& s, View x, bool backward) const;
  void attend(const State& s, View o, View lse, CView q, CView k, CView v) const;
  void attend_backward(const State& s, View dq, View dk, View dv, CView dout, CView q, CView k, CView v, CView o,
                       CView lse) const;
  void attention_backward(const State& s, LayerActs& A, std::vector<T>& dout, std::vector<T>& dqkv);
  double head_forward(State& s, CView x, CView resid, const double* grad_scale);
  void head_backward(State& s, View dnext, double grad_scale);
  void layer_backward(State& s, int l, View dnext);
  void mla_forward(const State& s, const model::DenseLayout::Layer& L, LayerActs& A, CView y1, View out);
  void mla_backward(const State& s, const model::DenseLayout::Layer& L, LayerActs& A, View dr2, View dy);
  void moe_forward(const State& s, const model::DenseLayout::Layer& L, LayerActs& A, CView x, View out);
  void moe_backward(const State& s, const model::DenseLayout::Layer& L, LayerActs& A, CView dy, View dx);
  void moe_losses(const State& s, LayerActs& A);
  int moe_index(const State& s, const LayerActs& A) const;
  void ep_plan(EpPlan& plan, const ops::cpu::Dispatch& D);
  void ep_dispatch(const EpPlan& plan, const std::vector<T>& rows, std::vector<T>& expert_major);
  void ep_combine(const EpPlan& plan, const std::vector<T>& expert_major, std::vector<T>& rows);
  void experts_forward(const model::DenseLayout::Layer& L, std::span<const std::int64_t> offsets, LayerActs& A,
                       const std::vector<T>& in, std::vector<T>& out);
  void experts_backward(const model::DenseLayout::Layer& L, std::span<const std::int64_t> offsets, LayerActs& A,
                        const std::vector<T>& in, const std::vector<T>& dout, std::vector<T>& din);
  void reduce_over_tokens(std::span<double> v);
  void embed_backward(const State& s, View dnext);
  // LoRA: the adapters of the linear in `slot` of layer L (its output y, or its input gradient dx, on this rank).
  void lora_forward(const State& s, const model::DenseLayout::Layer& L, LayerActs& A, int slot, CView x, View y);
  void lora_backward(const State& s, const model::DenseLayout::Layer& L, LayerActs& A, int slot, CView x, CView dy,
                     View dx);

  model::ModelConfig cfg_;
  comm::Communicator& tp_;
  comm::Communicator& cp_;
  comm::Communicator* ep_;  // non-null only with ep > 1
  int first_, last_;
  bool sp_;
  Dims dims_;
  std::vector<double> inv_freq_;
  model::DenseLayout full_, local_;
  std::vector<ShardBlock> blocks_;
  int lm_head_chunk_ = 256;
  // The trainable slots whose gradient is a partial sum over tp (the replicated ones with SP over tp > 1, LoRA's whole
  // factors at tp > 1): one backward's gradients go to rgrads_ (slot i at rgrad_offset_[i]), are all-reduced over tp
  // and added to grads_ at its end. Otherwise (and for the sharded slots) straight into grads_.
  bool reduce_replicated_ = false;
  std::vector<std::uint8_t> replicated_;  // per local slot: its gradient is reduced over tp (above)
  std::vector<std::size_t> rgrad_offset_;
  std::vector<T> params_, grads_, rgrads_;
  std::map<int, std::unique_ptr<State>> states_;
  // Buffers kept across calls (no allocation per micro-batch once warm): retired states and one call's scratch.
  std::vector<std::unique_ptr<State>> spare_;
  std::unique_ptr<Scratch> scratch_;
  MoeStats moe_stats_;
  std::vector<double> expert_bias_, expert_load_;  // [stage MoE layers, E] with a bias update rate
};

extern template class ShardedCpuDecoder<float>;
extern template class ShardedCpuDecoder<double>;

}  // namespace tb::parallel
