// parallel/decoder_cpu_parallel.cpp: one stage of the dense decoder on a TP x SP x CP rank (the .h has the data
// flow): the local layout and its buffers, the stage's forward and backward, the embedding and the LM head (the
// layers: parallel/decoder_cpu_parallel_layer.cpp). Backward, in reverse, with dnext the gradient of the sum
// h = x + resid leaving a layer (on this rank's rows):
//   last stage: per chunk of rows dz = CE'(yf Wlm^T);  dyf = dz Wlm;  dWlm += dz^T yf;  dnext = dnormf(dyf)
//   per layer, last first: the layer's backward (dnext in, dnext out)
//   first stage: dE[token of row] += dnext;  dP[position of row] += dnext
#include "parallel/decoder_cpu_parallel.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "model/decoder_common.h"
#include "ops/cpu/cross_entropy.h"
#include "ops/cpu/embedding.h"
#include "ops/cpu/norm.h"
#include "parallel/decoder_cpu_parallel_state.h"
#include "parallel/tensor_shard.h"

namespace tb::parallel {
namespace {

namespace cpu = tb::ops::cpu;
using model::detail::mat;
using model::detail::vec;

std::string str(std::int64_t v) { return std::to_string(v); }

}  // namespace

std::vector<std::int64_t> cp_positions(int cp, int rank, int seq) {
  TB_REQUIRE(cp >= 1 && rank >= 0 && rank < cp, "cp_positions: rank " + str(rank) + " of " + str(cp));
  std::vector<std::int64_t> pos;
  if (cp == 1) {
    for (int j = 0; j < seq; ++j) pos.push_back(j);
    return pos;
  }
  TB_REQUIRE(seq % (2 * cp) == 0, "context parallel: seq " + str(seq) + " must be divisible by 2·cp = " + str(2 * cp) +
                                      " (two load-balanced causal chunks per cp rank)");
  const int chunk = seq / (2 * cp);
  for (int c : {rank, 2 * cp - 1 - rank})
    for (int j = 0; j < chunk; ++j) pos.push_back(std::int64_t(c) * chunk + j);
  return pos;
}

template <class T>
ShardedCpuDecoder<T>::ShardedCpuDecoder(const model::ModelConfig& cfg, DecoderGroups groups, StageSpec stage)
    : cfg_(cfg),
      tp_(groups.tp),
      cp_(groups.cp),
      ep_(groups.ep && groups.ep->size() > 1 ? groups.ep : nullptr),
      first_(stage.first_layer),
      last_(stage.last_layer < 0 ? cfg.layers : stage.last_layer),
      sp_(stage.sequence_parallel),
      full_(model::dense_layout(cfg)) {
  const int tp = tp_.size();
  auto divides = [&](int v, const char* what) {
    TB_REQUIRE(v % tp == 0,
               std::string("CPU decoder: ") + what + " (" + str(v) + ") is not divisible by tp (" + str(tp) + ")");
  };
  divides(cfg_.heads, "heads");
  divides(cfg_.kv_heads, "kv_heads");
  divides(cfg_.ffn, "ffn");
  if (ep_) {
    const int ep = ep_->size();
    TB_REQUIRE(cfg_.moe.enabled() && cfg_.moe.experts % ep == 0, "CPU decoder: expert parallel over " + str(ep) +
                                                                     " ranks needs a MoE model whose experts (" +
                                                                     str(cfg_.moe.experts) + ") ep divides");
    TB_REQUIRE(tp == 1 || stage.sequence_parallel,
               "CPU decoder: expert parallel with tp > 1 needs sequence parallel (each tp rank routes its own rows)");
  }
  TB_REQUIRE((cfg_.moe.ep_proxy == 1 && cfg_.moe.token_share == 1) || (tp == 1 && cp_.size() == 1 && !ep_),
             "CPU decoder: a proxy of an expert-parallel rank (ep_proxy " + str(cfg_.moe.ep_proxy) + ", token_share " +
                 str(cfg_.moe.token_share) + ") runs on one rank; drop tp, cp and ep");
  TB_REQUIRE(0 <= first_ && first_ < last_ && last_ <= cfg_.layers,
             "CPU decoder: the stage's layers [" + str(first_) + ", " + str(last_) +
                 ") must be a non-empty part of the model's " + str(cfg_.layers));
  const std::int64_t hd = cfg_.head_dim, hl = cfg_.heads / tp, kvl = cfg_.kv_heads / tp;
  dims_ = {cfg_.d_model, hd, hl, kvl, hl * hd, kvl * hd, (hl + 2 * kvl) * hd, model::detail::fc1_rows(cfg_) / tp,
           cfg_.ffn / tp};
  inv_freq_ = model::detail::rope_inv_freq(cfg_);
  build_layout();
  params_.assign(local_.total, T(0));
  grads_.assign(local_.grad_total, T(0));
  scratch_ = std::make_unique<Scratch>();
  reset_moe_stats();
}

template <class T>
ShardedCpuDecoder<T>::~ShardedCpuDecoder() = default;

// The local layout is the CUDA backend's (tensor_shard.h): the slots of the tp shard's config, in the full
// layout's order; each is stacked from its parts of the full slot of the same name (one whole part when replicated).
template <class T>
void ShardedCpuDecoder<T>::build_layout() {
  const int tp = tp_.size();
  const int local_experts = ep_ ? cfg_.moe.experts / ep_->size() : -1;
  const model::ExpertRange experts =
      ep_ ? model::ExpertRange{ep_->rank() * local_experts, local_experts} : model::ExpertRange{};
  local_ = model::dense_layout(tp_shard_config(cfg_, tp), {first_, last_}, experts);
  rgrad_offset_.assign(local_.slots.size(), 0);
  replicated_.assign(local_.slots.size(), 0);
  std::size_t replicated = 0;
  for (std::size_t i = 0; i < local_.slots.size(); ++i) {
    const model::Slot& l = local_.slots[i];
    const model::Slot& f = full_.at(l.name);  // a tied embedding's copy on a last stage: embed.weight itself
    const std::int64_t full_cols = f.shape.size() == 2 ? f.shape[1] : 1;  // a vector is one column
    const bool expert = ep_ && f.tags.group == model::ParamGroup::expert, rep = tp_replicated(f) && !expert;
    std::size_t local_offset = l.offset;
    for (const SlotPart& p : tp_slot_parts(f, tp, tp_.rank())) {
      const std::size_t in_slot = std::size_t(p.row0 * full_cols + p.col0), local_in_slot = local_offset - l.offset;
      blocks_.push_back({f.name, f.offset + in_slot, local_offset, p.rows, p.cols, full_cols, rep, expert,
                         f.has_grad() ? f.grad_offset + in_slot : model::kNoGrad,
                         l.has_grad() ? l.grad_offset + local_in_slot : model::kNoGrad});
      local_offset += std::size_t(p.rows * p.cols);
    }
    TB_REQUIRE(local_offset == l.offset + l.size, "CPU decoder: the tp parts of " + l.name + " hold " +
                                                      str(std::int64_t(local_offset - l.offset)) +
                                                      " elements, its local slot " + str(std::int64_t(l.size)));
    // a partial sum over tp: a replicated slot's with SP, a whole LoRA factor's always
    const bool partial = rep && tp > 1 && l.has_grad() && (sp_ || l.tags.role == model::ParamRole::adapter);
    replicated_[i] = partial;
    if (partial) rgrad_offset_[i] = replicated, replicated += l.size;
  }
  reduce_replicated_ = replicated > 0;
  rgrads_.resize(replicated);
}

template <class T>
void ShardedCpuDecoder<T>::load_full(std::span<const T> full) {
  TB_REQUIRE(full.size() == full_.total, "CPU decoder: load_full got " + str(std::int64_t(full.size())) +
                                             " parameters, the model has " + str(std::int64_t(full_.total)));
  for (const ShardBlock& b : blocks_)
    for (std::int64_t i = 0; i < b.rows; ++i)
      std::copy_n(full.data() + b.full_offset + std::size_t(i * b.full_stride), b.cols,
                  params_.data() + b.local_offset + std::size_t(i * b.cols));
}

// Without tp every local slot is the full slot of its name (init_params draws by name and element, an ep rank's
// experts too): drawn in place.
template <class T>
void ShardedCpuDecoder<T>::init(std::uint64_t seed) {
  if (tp_.size() == 1) return model::init_params<T>(params_, local_, seed);
  std::vector<T> full(full_.total);
  model::init_params<T>(full, full_, seed);
  load_full(full);
}

template <class T>
void ShardedCpuDecoder<T>::add_grads_to_full(std::span<T> full) const {
  TB_REQUIRE(full.size() == full_.grad_total, "CPU decoder: add_grads_to_full got " +
                                                  str(std::int64_t(full.size())) + " elements, the model has " +
                                                  str(std::int64_t(full_.grad_total)) + " trainable");
  for (const ShardBlock& b : blocks_) {
    if ((b.tp_replicated && tp_.rank() != 0) || !b.trainable()) continue;
    for (std::int64_t i = 0; i < b.rows; ++i) {
      T* dst = full.data() + b.full_grad + std::size_t(i * b.full_stride);
      const T* src = grads_.data() + b.local_grad + std::size_t(i * b.cols);
      for (std::int64_t j = 0; j < b.cols; ++j) dst[j] += src[j];
    }
  }
}

template <class T>
void ShardedCpuDecoder<T>::zero_grads() {
  std::fill(grads_.begin(), grads_.end(), T(0));
}

template <class T>
void ShardedCpuDecoder<T>::set_lm_head_chunk(int tokens) {
  TB_REQUIRE(tokens >= 1, "CPU decoder: the LM-head chunk must be at least 1 token, got " + str(tokens));
  lm_head_chunk_ = tokens;
}

template <class T>
std::int64_t ShardedCpuDecoder<T>::activation_rows(int batch, int seq) const {
  const std::int64_t n = std::int64_t(batch) * seq / cp_.size();
  return sp_ ? n / tp_.size() : n;
}

template <class T>
void ShardedCpuDecoder<T>::check_batch(const MicroBatch& b) const {
  const int cp = cp_.size(), tp = tp_.size();
  TB_REQUIRE(b.batch >= 1 && b.seq >= 1 && b.seq <= cfg_.seq,
             "CPU decoder: batch " + str(b.batch) + " and seq " + str(b.seq) +
                 " must be >= 1, seq at most the model's " + str(cfg_.seq));
  TB_REQUIRE(cp == 1 || b.seq % (2 * cp) == 0, "CPU decoder: seq " + str(b.seq) +
                                                   " must be divisible by 2·cp = " + str(2 * cp) +
                                                   " (context parallel: two load-balanced causal chunks per cp rank)");
  const std::int64_t n = std::int64_t(b.batch) * b.seq / cp;
  TB_REQUIRE(!sp_ || n % tp == 0, "CPU decoder: sequence parallel splits the " + str(n) +
                                      " tokens of a cp rank (batch · seq / cp) over tp = " + str(tp) +
                                      ", which must divide them");
  const std::size_t full = std::size_t(b.batch) * std::size_t(b.seq);
  TB_REQUIRE(!is_first() || b.tokens.size() == full,
             "CPU decoder: the first stage needs batch · seq = " + str(std::int64_t(full)) + " tokens, got " +
                 str(std::int64_t(b.tokens.size())));
  TB_REQUIRE(!is_last() || b.targets.size() == full,
             "CPU decoder: the last stage needs batch · seq = " + str(std::int64_t(full)) + " targets, got " +
                 str(std::int64_t(b.targets.size())));
  if (is_first()) model::detail::check_ids(b.tokens, cfg_.vocab, "token");
  if (is_last()) model::detail::check_ids(b.targets, cfg_.vocab, "target");
  if (b.docs.packed()) {
    TB_REQUIRE(cp == 1, "CPU decoder: packed sequences with context parallel (cp " + str(cp) +
                            ") are not built: run packed data with --cp 1");
    TB_REQUIRE(b.docs.rows() == b.batch, "CPU decoder: packed documents of " + str(b.docs.rows()) +
                                             " rows for a micro-batch of " + str(b.batch));
    segment_offsets(b.docs, b.seq);  // checks the documents fit their rows
  }
  if (!b.loss_weights.empty()) {
    TB_REQUIRE(b.loss_weights.size() == full, "CPU decoder: " + str(std::int64_t(b.loss_weights.size())) +
                                                  " loss weights for batch · seq = " + str(std::int64_t(full)) +
                                                  " targets");
    for (double w : b.loss_weights)
      TB_REQUIRE(std::isfinite(w) && w >= 0, "CPU decoder: a loss weight is " + std::to_string(w) +
                                                 "; weights are finite and >= 0");
  }
}

template <class T>
TensorView<T> ShardedCpuDecoder<T>::P(int slot) {
  return model::detail::slot_view(params_, local_, slot);
}

// A partial sum over tp goes to rgrads_ (one backward's), reduced and added to grads_ at its end
// (end_replicated_grads); every other gradient accumulates in place. A frozen slot's view is empty: no gradient.
template <class T>
TensorView<T> ShardedCpuDecoder<T>::G(int slot) {
  if (slot < 0 || !local_.slots[std::size_t(slot)].has_grad()) return {};
  const model::Slot& s = local_.slots[std::size_t(slot)];
  T* p = replicated_[std::size_t(slot)] ? rgrads_.data() + rgrad_offset_[std::size_t(slot)]
                                        : grads_.data() + s.grad_offset;
  return s.shape.size() == 1 ? View(p, {s.shape[0]}) : View(p, {s.shape[0], s.shape[1]});
}

template <class T>
void ShardedCpuDecoder<T>::begin_replicated_grads() {
  if (reduce_replicated_) std::fill(rgrads_.begin(), rgrads_.end(), T(0));
}

// SP leaves partial sums over the tp ranks' token rows: all-reduced, then added (every tp rank adds the same).
template <class T>
void ShardedCpuDecoder<T>::end_replicated_grads() {
  if (!reduce_replicated_) return;
  tp_.all_reduce(std::span<T>(rgrads_));
  for (std::size_t i = 0; i < local_.slots.size(); ++i) {
    const model::Slot& s = local_.slots[i];
    if (!replicated_[i]) continue;
    const T* src = rgrads_.data() + rgrad_offset_[i];
    T* dst = grads_.data() + s.grad_offset;
    for (std::size_t j = 0; j < s.size; ++j) dst[j] += src[j];
  }
}

// The position of each residual-stream row on this rank (SP: rows [tp_rank * rows, ...) of the n tokens); packed
// rows: the position in its segment.
template <class T>
std::vector<std::int64_t> ShardedCpuDecoder<T>::row_positions(const State& s) const {
  const std::int64_t begin = sp_ ? tp_.rank() * s.rows : 0, sl = std::int64_t(s.pos.size());
  std::vector<std::int64_t> p(std::size_t(s.rows));
  for (std::int64_t i = 0; i < s.rows; ++i)
    p[std::size_t(i)] = s.seg_pos.empty() ? s.pos[std::size_t((begin + i) % sl)] : s.seg_pos[std::size_t(begin + i)];
  return p;
}

template <class T>
double ShardedCpuDecoder<T>::forward(int mb, const MicroBatch& b, std::span<const T> input, std::span<T> output) {
  return run_forward(mb, b, input, output, nullptr);
}

template <class T>
void ShardedCpuDecoder<T>::backward(int mb, std::span<const T> doutput, std::span<T> dinput, double grad_scale) {
  auto it = states_.find(mb);
  TB_REQUIRE(it != states_.end(), "CPU decoder: backward of micro-batch " + str(mb) + " without its forward");
  begin_replicated_grads();
  run_backward(*it->second, doutput, dinput, grad_scale);
  retire(mb);
}

template <class T>
void ShardedCpuDecoder<T>::drop(int mb) {
  if (states_.contains(mb)) retire(mb);
}

// A state for a new forward: a retired one (its buffers keep their capacity) or a new one.
template <class T>
std::unique_ptr<typename ShardedCpuDecoder<T>::State> ShardedCpuDecoder<T>::take_state() {
  if (spare_.empty()) return std::make_unique<State>();
  std::unique_ptr<State> s = std::move(spare_.back());
  spare_.pop_back();
  s->tokens.clear(), s->targets.clear(), s->seg_pos.clear(), s->weights.clear(), s->token_index.clear();
  s->head_done = false;
  return s;
}

template <class T>
void ShardedCpuDecoder<T>::retire(int mb) {
  auto it = states_.find(mb);
  spare_.push_back(std::move(it->second));
  states_.erase(it);
}

// The head's backward runs inside the forward (begin_replicated_grads first: it writes the LM head's gradient).
template <class T>
double ShardedCpuDecoder<T>::forward_backward(int mb, const MicroBatch& b, double grad_scale, std::span<const T> input,
                                              std::span<T> dinput) {
  TB_REQUIRE(is_last(), "CPU decoder: forward_backward runs on the last stage only (layers [" + str(first_) + ", " +
                            str(last_) + ") of " + str(cfg_.layers) + ")");
  begin_replicated_grads();
  const double loss = run_forward(mb, b, input, {}, &grad_scale);
  run_backward(*states_.at(mb), {}, dinput, grad_scale);
  retire(mb);
  return loss;
}

// head_grad_scale: run the LM head's backward too (forward_backward), with that scale.
template <class T>
double ShardedCpuDecoder<T>::run_forward(int mb, const MicroBatch& b, std::span<const T> input, std::span<T> output,
                                         const double* head_grad_scale) {
  TB_REQUIRE(!states_.contains(mb),
             "CPU decoder: micro-batch " + str(mb) + " is already in flight (forward twice without a backward)");
  check_batch(b);
  const std::size_t act = activation_size(b.batch, b.seq);
  TB_REQUIRE(is_first() || input.size() == act, "CPU decoder: a non-first stage needs an input of " +
                                                    str(std::int64_t(act)) + " elements, got " +
                                                    str(std::int64_t(input.size())));
  TB_REQUIRE(is_last() || output.size() == act, "CPU decoder: a non-last stage needs an output of " +
                                                    str(std::int64_t(act)) + " elements, got " +
                                                    str(std::int64_t(output.size())));
  std::unique_ptr<State> state = take_state();
  State& s = *state;
  s.batch = b.batch, s.seq = b.seq;
  s.n = std::int64_t(b.batch) * b.seq / cp_.size();
  s.rows = activation_rows(b.batch, b.seq);
  s.pos = cp_positions(cp_.size(), cp_.rank(), b.seq);
  s.step = b.step;
  for (std::int64_t bi = 0; bi < b.batch; ++bi)
    for (std::int64_t p : s.pos) {
      const std::size_t at = std::size_t(bi * b.seq + p);
      if (is_first()) s.tokens.push_back(b.tokens[at]);
      if (is_last()) s.targets.push_back(b.targets[at]);
      if (is_last() && !b.loss_weights.empty()) s.weights.push_back(b.loss_weights[at]);
      if (cfg_.lora.enabled()) s.token_index.push_back((b.first_sequence + bi) * b.seq + p);
    }
  if (b.docs.packed())  // (cp 1: the local tokens are the micro-batch's, in order)
    for (std::int32_t p : segment_positions(segment_offsets(b.docs, b.seq))) s.seg_pos.push_back(p);
  s.layers.resize(std::size_t(last_ - first_));

  const std::int64_t d = cfg_.d_model;
  CView x, resid;
  if (is_first()) {
    auto x0 = mat(scratch_->x0, s.rows, d);
    embed_forward(s, x0);
    x = x0;
  } else {
    x = CView(input.data(), {s.rows, d});
  }
  auto m = mat(scratch_->m, s.rows, d);  // a layer's MLP output, the x of the next
  for (int l = first_; l < last_; ++l) {
    layer_forward(s, l, x, resid, m);
    x = m;
    resid = CView(s.layers[std::size_t(l - first_)].r2.data(), {s.rows, d});
  }
  double loss = 0;
  if (is_last())
    loss = head_forward(s, x, resid, head_grad_scale);
  else
    for (std::size_t i = 0; i < act; ++i) output[i] = x.data()[i] + resid.data()[i];
  states_.emplace(mb, std::move(state));
  return loss;
}

template <class T>
void ShardedCpuDecoder<T>::run_backward(State& s, std::span<const T> doutput, std::span<T> dinput, double grad_scale) {
  const std::size_t act = activation_size(s.batch, s.seq);
  TB_REQUIRE(is_last() || doutput.size() == act, "CPU decoder: a non-last stage needs the output gradient of " +
                                                     str(std::int64_t(act)) + " elements, got " +
                                                     str(std::int64_t(doutput.size())));
  TB_REQUIRE(is_first() || dinput.size() == act, "CPU decoder: a non-first stage needs room for the input gradient, " +
                                                     str(std::int64_t(act)) + " elements, got " +
                                                     str(std::int64_t(dinput.size())));
  s.grad_scale = grad_scale;
  std::vector<T>& dnext_buf = scratch_->dnext;
  auto dnext = mat(dnext_buf, s.rows, cfg_.d_model);
  if (is_last())
    head_backward(s, dnext, grad_scale);
  else
    std::copy(doutput.begin(), doutput.end(), dnext.data());
  for (int l = last_ - 1; l >= first_; --l) layer_backward(s, l, dnext);
  if (is_first())
    embed_backward(s, dnext);
  else
    std::copy_n(dnext_buf.begin(), act, dinput.begin());
  end_replicated_grads();
}

// This rank's rows of the n local ids: with SP rows [tp_rank * rows, ...), else all n.
template <class T>
std::span<const std::int32_t> ShardedCpuDecoder<T>::row_ids(const State& s,
                                                            const std::vector<std::int32_t>& ids) const {
  const std::size_t begin = sp_ ? std::size_t(tp_.rank() * s.rows) : 0;
  return std::span<const std::int32_t>(ids).subspan(begin, std::size_t(s.rows));
}

// This rank's rows' loss weights (empty without weights).
template <class T>
std::span<const double> ShardedCpuDecoder<T>::row_weights(const State& s) const {
  if (s.weights.empty()) return {};
  const std::size_t begin = sp_ ? std::size_t(tp_.rank() * s.rows) : 0;
  return std::span<const double>(s.weights).subspan(begin, std::size_t(s.rows));
}

// What the head's result over this rank's rows is of the micro-batch's loss: rows / (batch seq) of its mean, or (loss
// weights) its weighted sum as it is.
template <class T>
double ShardedCpuDecoder<T>::head_share(const State& s) const {
  return s.weights.empty() ? double(s.rows) / (double(s.batch) * s.seq) : 1.0;
}

// x0 [rows, d] = E[tokens of the rows] (+ P at the rows' positions); E and P whole on every tp rank.
template <class T>
void ShardedCpuDecoder<T>::embed_forward(const State& s, View x0) {
  cpu::embedding_forward<T>(x0, P(local_.embed), row_ids(s, s.tokens));
  if (cfg_.pos == model::Pos::learned) cpu::position_embedding_add_at<T>(x0, P(local_.pos_embed), row_positions(s));
}

// (frozen: nothing to do)
template <class T>
void ShardedCpuDecoder<T>::embed_backward(const State& s, View dnext) {
  if (const View de = G(local_.embed); de.data()) cpu::embedding_backward<T>(de, dnext, row_ids(s, s.tokens));
  if (const View dp = G(local_.pos_embed); dp.data() && cfg_.pos == model::Pos::learned)
    cpu::position_embedding_backward_at<T>(dp, dnext, row_positions(s));
}

// yf = normf(x + resid) on this rank's rows, then the chunked LM head and cross-entropy (ops/cpu/cross_entropy.h)
// on them: lm_head_cross_entropy's mean over the rows times rows / (batch seq) is their share of the loss, and its
// gradient scale grad_scale · rows / (batch seq) makes dz = (softmax - onehot) · grad_scale / (batch seq); with loss
// weights, its weighted sum over the rows is their share as it is (head_share 1). With grad_scale (forward_backward)
// the head's backward runs here: dyf kept in the state, dWlm accumulated.
template <class T>
double ShardedCpuDecoder<T>::head_forward(State& s, CView x, CView resid, const double* grad_scale) {
  const std::int64_t d = dims_.d;
  auto yf = mat(s.yf, s.rows, d);
  cpu::add_norm_forward<T>(model::detail::norm_kind(cfg_.norm), yf, mat(s.rf, s.rows, d), vec(s.meanf, s.rows),
                           vec(s.rstdf, s.rows), x, resid, P(local_.final_norm_w), P(local_.final_norm_b),
                           cfg_.norm_eps);
  const double share = head_share(s);
  View dyf, dw;
  if (grad_scale) dyf = mat(s.dyf, s.rows, d), dw = G(local_.lm_head), s.head_done = true;
  const double mean = cpu::lm_head_cross_entropy<T>(dyf, dw, yf, P(local_.lm_head), row_ids(s, s.targets),
                                                    lm_head_chunk_, grad_scale ? *grad_scale * share : 1.0,
                                                    row_weights(s));
  double loss[1] = {mean * share};
  if (sp_ && tp_.size() > 1) tp_.all_reduce(std::span<double>(loss));
  if (cp_.size() > 1) cp_.all_reduce(std::span<double>(loss));
  return loss[0];
}

// dyf (recomputing each chunk's logits, unless forward_backward's forward already has it); dnext = dnormf(dyf).
template <class T>
void ShardedCpuDecoder<T>::head_backward(State& s, View dnext, double grad_scale) {
  const std::int64_t d = dims_.d;
  if (!s.head_done)
    cpu::lm_head_cross_entropy<T>(mat(s.dyf, s.rows, d), G(local_.lm_head), CView(s.yf.data(), {s.rows, d}),
                                  P(local_.lm_head), row_ids(s, s.targets), lm_head_chunk_,
                                  grad_scale * head_share(s), row_weights(s));
  cpu::add_norm_backward<T>(model::detail::norm_kind(cfg_.norm), dnext, G(local_.final_norm_w), G(local_.final_norm_b),
                            mat(s.dyf, s.rows, d), {}, mat(s.rf, s.rows, d), P(local_.final_norm_w),
                            vec(s.meanf, s.rows), vec(s.rstdf, s.rows));
}

template class ShardedCpuDecoder<float>;
template class ShardedCpuDecoder<double>;

}  // namespace tb::parallel
