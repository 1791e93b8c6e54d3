// parallel/trainer_cpu.cpp: the multi-rank CPU trainer (parallel/trainer_cpu.h has the data flow). The step in
// order: pipeline over the micro-batches (chunk grads), pack into the flat buffer, sum the tied embedding copies,
// reduce-scatter over dp x cp, one world all-reduce for [loss, norm^2], clip, AdamW on the shard, all-gather,
// make the replicas bitwise equal, unpack into the chunks.
#include "parallel/trainer_cpu.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"
#include "model/decoder_common.h"
#include "ops/cpu/adamw.h"
#include "parallel/pipeline.h"
#include "parallel/pipeline_schedule.h"

namespace tb::parallel {
namespace {

std::size_t round_up(std::size_t x, std::size_t m) { return (x + m - 1) / m * m; }

// Every check of the spec, before any communication (the same inputs give the same verdict on every rank).
model::ModelConfig validated(const comm::Communicator& world, const model::ModelConfig& cfg,
                             const ParallelTrainSpec& spec) {
  cfg.validate();
  spec.hyper.validate();
  TB_REQUIRE(spec.micro_batch >= 1 && spec.global_batch >= 1,
             fmt::format("parallel trainer: micro-batch ({}) and global batch ({}) must be at least 1",
                         spec.micro_batch, spec.global_batch));
  validate_layout(spec.mesh, cfg, world.size(), spec.micro_batch, spec.global_batch);
  validate_pipeline({spec.mesh.pp, spec.mesh.vp, spec.global_batch / (spec.micro_batch * spec.mesh.dp)});
  return cfg;
}

}  // namespace

bool decays(const model::Slot& s) {
  return s.tags.decay;
}

void OptimizerHyper::validate() const {
  TB_REQUIRE(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1,
             fmt::format("optimizer: betas must lie in [0, 1), got {} and {}", beta1, beta2));
  TB_REQUIRE(eps > 0, fmt::format("optimizer: eps must be > 0, got {}", eps));
  TB_REQUIRE(std::isfinite(weight_decay) && weight_decay >= 0,
             fmt::format("optimizer: weight decay must be finite and >= 0, got {}", weight_decay));
  TB_REQUIRE(clip >= 0, fmt::format("optimizer: clip (max gradient norm) must be >= 0 (0: off), got {}", clip));
}

// This rank's chunks as one PipelineStage: local micro-batch mb of dp rank d is micro-batch d·accum + mb of the
// step's global batch.
template <class T>
class ParallelCpuTrainer<T>::Stage final : public PipelineStage<T> {
 public:
  Stage(ParallelCpuTrainer& t, std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets,
        Documents docs, std::span<const double> weights)
      : t_(t), tokens_(tokens), targets_(targets), docs_(docs), weights_(weights),
        grad_scale_(1.0 / (double(t.accum_) * t.spec_.mesh.dp)),
        first_mb_(t.mesh_->coord().dp * t.accum_) {}

  std::size_t activation_size(int) const override {
    return t_.chunks_[0]->activation_size(t_.spec_.micro_batch, t_.cfg_.seq);
  }
  double forward(int mb, int chunk, std::span<const T> in, std::span<T> out) override {
    return t_.chunks_[std::size_t(chunk)]->forward(mb, batch(mb), in, out);
  }
  void backward(int mb, int chunk, std::span<const T> dout, std::span<T> din) override {
    t_.chunks_[std::size_t(chunk)]->backward(mb, dout, din, grad_scale_);
  }

 private:
  MicroBatch batch(int mb) const {
    const int b = t_.spec_.micro_batch, seq = t_.cfg_.seq;
    const std::size_t n = std::size_t(b) * std::size_t(seq), at = std::size_t(first_mb_ + mb) * n;
    return {tokens_.subspan(at, n),
            targets_.subspan(at, n),
            b,
            seq,
            docs_.packed() ? docs_.slice((first_mb_ + mb) * b, b) : Documents{},
            weights_.empty() ? weights_ : weights_.subspan(at, n),
            std::int64_t(first_mb_ + mb) * b,
            t_.steps_};
  }
  ParallelCpuTrainer& t_;
  std::span<const std::int32_t> tokens_, targets_;
  Documents docs_;
  std::span<const double> weights_;
  double grad_scale_;
  int first_mb_;
};

template <class T>
ParallelCpuTrainer<T>::ParallelCpuTrainer(comm::Communicator& world, const model::ModelConfig& cfg,
                                          const ParallelTrainSpec& spec, std::uint64_t seed)
    : world_(world), cfg_(validated(world, cfg, spec)), spec_(spec), full_(model::dense_layout(cfg_)) {
  const MeshShape& s = spec_.mesh;
  mesh_ = std::make_unique<Mesh>(world_, s);
  accum_ = spec_.global_batch / (spec_.micro_batch * s.dp);
  const int stages = s.pp * s.vp, r = mesh_->coord().pp;
  tied_split_ = cfg_.tied_embeddings && stages > 1 && full_.slots[std::size_t(full_.embed)].has_grad();
  std::size_t total = 0, grad_total = 0;
  for (int c = 0; c < s.vp; ++c) {
    const int g = c * s.pp + r;
    const model::LayerRange layers = model::pipeline_stage_layers(cfg_.layers, stages, g);  // the CUDA trainer's split
    const StageSpec st{layers.first, layers.last, s.sequence_parallel};
    chunks_.push_back(
        std::make_unique<ShardedCpuDecoder<T>>(cfg_, DecoderGroups{mesh_->tp(), mesh_->cp(), &mesh_->ep()}, st));
    chunk_offset_.push_back(total);
    chunk_grad_offset_.push_back(grad_total);
    total += chunks_.back()->params().size();
    grad_total += chunks_.back()->grads().size();
  }
  flat_params_.assign(total, T(0));
  flat_grads_.assign(grad_total, T(0));
  build_masks();
  build_groups();
  std::vector<T> full(full_.total);
  model::init_params<T>(full, full_, seed);
  load_full(full);
}

template <class T>
ParallelCpuTrainer<T>::~ParallelCpuTrainer() = default;

// The reduction groups: the experts of an expert-parallel rank (ShardBlock::expert) over edp, the rest over dp x cp;
// each group's runs of the flat buffer, its packed buffers and masks, its shard of the optimizer state.
template <class T>
void ParallelCpuTrainer<T>::build_groups() {
  Group dense, experts;
  dense.comm = &mesh_->dp_cp(), experts.comm = &mesh_->edp();
  for (std::size_t c = 0; c < chunks_.size(); ++c)
    for (const ShardBlock& b : chunks_[c]->shard_blocks()) {
      if (!b.trainable()) continue;  // frozen: no gradient, no optimizer state
      auto& runs = (b.expert ? experts : dense).runs;
      const std::size_t p = chunk_offset_[c] + b.local_offset, at = chunk_grad_offset_[c] + b.local_grad,
                        n = std::size_t(b.rows * b.cols);
      if (!runs.empty() && runs.back().param + runs.back().count == p && runs.back().grad + runs.back().count == at)
        runs.back().count += n;
      else
        runs.push_back({p, at, n});
    }
  groups_.push_back(std::move(dense));
  if (!experts.runs.empty()) groups_.push_back(std::move(experts));
  for (Group& g : groups_) {
    std::size_t n = 0;
    for (const auto& run : g.runs) n += run.count;
    const std::size_t D = std::size_t(g.comm->size()), padded = round_up(std::max<std::size_t>(n, 1), D);
    g.shard = padded / D;
    g.params.assign(padded, T(0)), g.grads.assign(padded, T(0));
    g.shard_grads.assign(g.shard, T(0)), g.adam_m.assign(g.shard, T(0)), g.adam_v.assign(g.shard, T(0));
    g.decay.assign(padded, 0), g.counted.assign(padded, 0);
    std::size_t k = 0;
    for (const auto& run : g.runs)
      for (std::size_t i = 0; i < run.count; ++i, ++k)
        g.decay[k] = decay_[run.grad + i], g.counted[k] = counted_[run.grad + i];
  }
}

// Group buffer <-> flat buffer, through the group's runs (params: the flat parameters, else the flat gradients;
// unpack: into the parameters).
template <class T>
void ParallelCpuTrainer<T>::pack(const Group& g, const std::vector<T>& flat, std::vector<T>& packed, bool params) {
  std::size_t k = 0;
  for (const auto& run : g.runs) {
    std::copy_n(flat.begin() + std::ptrdiff_t(params ? run.param : run.grad), run.count,
                packed.begin() + std::ptrdiff_t(k));
    k += run.count;
  }
}
template <class T>
void ParallelCpuTrainer<T>::unpack(const Group& g, const std::vector<T>& packed, std::vector<T>& flat) {
  std::size_t k = 0;
  for (const auto& run : g.runs) {
    std::copy_n(packed.begin() + std::ptrdiff_t(k), run.count, flat.begin() + std::ptrdiff_t(run.param));
    k += run.count;
  }
}

// decay_: per trainable local slot (train::decays()); counted_: the elements the global norm counts (tp-replicated
// slots on tp rank 0 only, the tied copy on the first stage only). Both per flat gradient element.
template <class T>
void ParallelCpuTrainer<T>::build_masks() {
  decay_.assign(flat_grads_.size(), 0);
  counted_.assign(flat_grads_.size(), 0);
  const bool tp0 = mesh_->coord().tp == 0;
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    const auto& dec = *chunks_[c];
    for (const model::Slot& sl : dec.local_layout().slots)
      if (sl.has_grad())
        std::fill_n(decay_.begin() + std::ptrdiff_t(chunk_grad_offset_[c] + sl.grad_offset), sl.size,
                    decays(sl) ? 1 : 0);
    for (const ShardBlock& b : dec.shard_blocks())
      if (b.trainable())
        std::fill_n(counted_.begin() + std::ptrdiff_t(chunk_grad_offset_[c] + b.local_grad), b.rows * b.cols,
                    b.tp_replicated && !tp0 ? 0 : 1);
  }
  if (mesh_->coord().pp == spec_.mesh.pp - 1) {
    const std::span<T> copy = tied_region(flat_grads_, true);
    std::fill_n(counted_.begin() + (copy.data() - flat_grads_.data()), copy.size(), 0);
  }
}

// The rank's copy of a tied embedding split over stages: the first stage's embedding shard (pp rank 0, chunk 0)
// or the last stage's lm_head copy (pp rank pp-1, chunk vp-1); empty elsewhere and when not split (or frozen).
template <class T>
std::span<T> ParallelCpuTrainer<T>::tied_region(std::vector<T>& flat, bool grads) const {
  if (!tied_split_) return {};
  const int r = mesh_->coord().pp, pp = spec_.mesh.pp;
  const std::size_t c = r == 0 ? 0 : chunks_.size() - 1;
  if (r != 0 && r != pp - 1) return {};
  const model::DenseLayout& L = chunks_[c]->local_layout();
  const model::Slot& sl = L.slots[std::size_t(r == 0 ? L.embed : L.lm_head)];
  return std::span<T>(flat).subspan(grads ? chunk_grad_offset_[c] + sl.grad_offset : chunk_offset_[c] + sl.offset,
                                    sl.size);
}

template <class T>
void ParallelCpuTrainer<T>::load_full(std::span<const T> full) {
  TB_REQUIRE(full.size() == full_.total, fmt::format("parallel trainer: load_full got {} parameters, the model has {}",
                                                     full.size(), full_.total));
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    chunks_[c]->load_full(full);
    std::ranges::copy(chunks_[c]->params(), flat_params_.begin() + std::ptrdiff_t(chunk_offset_[c]));
  }
  for (Group& g : groups_) pack(g, flat_params_, g.params, true);
}

template <class T>
void ParallelCpuTrainer<T>::pack_grads() {
  std::fill(flat_grads_.begin(), flat_grads_.end(), T(0));
  for (std::size_t c = 0; c < chunks_.size(); ++c)
    std::ranges::copy(chunks_[c]->grads(), flat_grads_.begin() + std::ptrdiff_t(chunk_grad_offset_[c]));
}

template <class T>
void ParallelCpuTrainer<T>::unpack_params() {
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    const std::span<T> p = chunks_[c]->params();
    std::copy_n(flat_params_.begin() + std::ptrdiff_t(chunk_offset_[c]), p.size(), p.begin());
  }
}

// Pipeline ranks 0 and pp-1 swap their tied copies' gradients and both add (a + b == b + a: equal on both).
template <class T>
void ParallelCpuTrainer<T>::sum_tied_grads() {
  const std::span<T> mine = tied_region(flat_grads_, true);
  if (mine.empty()) return;
  const int r = mesh_->coord().pp, peer = r == 0 ? spec_.mesh.pp - 1 : 0;
  std::vector<T> theirs(mine.size());
  const comm::P2P ops[] = {{comm::P2P::Kind::send, mine.data(), mine.size(), peer},
                           {comm::P2P::Kind::recv, theirs.data(), theirs.size(), peer}};
  mesh_->pp().exchange(ops, dtype_of<T>());
  for (std::size_t i = 0; i < mine.size(); ++i) mine[i] += theirs[i];
}

// Each group's gradients packed and reduce-scattered over its group into its shard.
template <class T>
void ParallelCpuTrainer<T>::reduce_grads() {
  for (Group& g : groups_) {
    pack(g, flat_grads_, g.grads, false);
    g.comm->reduce_scatter(g.grads.data(), g.shard_grads.data(), g.shard, dtype_of<T>());
  }
}

template <class T>
double ParallelCpuTrainer<T>::grad_norm_sq() const {
  double sum = 0;
  for (const Group& g : groups_) {
    const std::size_t base = std::size_t(g.comm->rank()) * g.shard;
    for (std::size_t i = 0; i < g.shard; ++i)
      if (g.counted[base + i]) sum += double(g.shard_grads[i]) * double(g.shard_grads[i]);
  }
  return sum;
}

template <class T>
void ParallelCpuTrainer<T>::optimizer_step(double clip_scale, double lr) {
  const OptimizerHyper& h = spec_.hyper;
  const ops::cpu::AdamWParams hp{lr, h.beta1, h.beta2, h.eps, h.weight_decay};
  for (Group& g : groups_) {
    if (clip_scale != 1)
      for (T& v : g.shard_grads) v = T(double(v) * clip_scale);
    const std::size_t base = std::size_t(g.comm->rank()) * g.shard;
    ops::cpu::adamw_step(std::span<T>(g.params).subspan(base, g.shard), std::span<const T>(g.shard_grads), g.adam_m,
                         g.adam_v, hp, steps_, std::span<const std::uint8_t>(g.decay).subspan(base, g.shard));
    g.comm->all_gather(g.params.data() + base, g.params.data(), g.shard, dtype_of<T>());
    unpack(g, g.params, flat_params_);
  }
}

// tp rank 0's replicated slots over the tp group; the first stage's tied embedding into the last stage's copy.
template <class T>
void ParallelCpuTrainer<T>::sync_replicas() {
  const auto t = dtype_of<T>();
  if (spec_.mesh.tp > 1)  // each replicated slot is one block (tensor_shard.h)
    for (std::size_t c = 0; c < chunks_.size(); ++c)
      for (const ShardBlock& b : chunks_[c]->shard_blocks())
        if (b.tp_replicated && b.trainable())  // (a frozen one never changes)
          mesh_->tp().broadcast(flat_params_.data() + chunk_offset_[c] + b.local_offset,
                                std::size_t(b.rows * b.cols), t, 0);
  const std::span<T> copy = tied_region(flat_params_, false);
  if (copy.empty()) return;
  const int r = mesh_->coord().pp, last = spec_.mesh.pp - 1;
  const comm::P2P op{r == 0 ? comm::P2P::Kind::send : comm::P2P::Kind::recv, copy.data(), copy.size(),
                     r == 0 ? last : 0};
  mesh_->pp().exchange({&op, 1}, t);
}

template <class T>
ParallelStepStats ParallelCpuTrainer<T>::step(std::span<const std::int32_t> tokens,
                                              std::span<const std::int32_t> targets, double lr, Documents docs,
                                              std::span<const double> loss_weights) {
  const std::size_t n = std::size_t(spec_.global_batch) * std::size_t(cfg_.seq);
  TB_REQUIRE(tokens.size() == n && targets.size() == n,
             fmt::format("parallel trainer: a step takes global batch · seq = {}·{} = {} tokens and targets, got {} "
                         "and {}",
                         spec_.global_batch, cfg_.seq, n, tokens.size(), targets.size()));
  TB_REQUIRE((!docs.packed() || docs.rows() == spec_.global_batch) &&
                 (loss_weights.empty() || loss_weights.size() == n),
             fmt::format("parallel trainer: packed documents of {} rows and {} loss weights for a global batch of {} "
                         "rows ({} tokens)",
                         docs.rows(), loss_weights.size(), spec_.global_batch, n));
  TB_REQUIRE(!docs.packed() || spec_.mesh.cp == 1,  // (every rank, before any communication)
             fmt::format("parallel trainer: packed sequences with context parallel (cp {}) are not built: run packed "
                         "data with cp 1",
                         spec_.mesh.cp));
  model::detail::check_ids(tokens, cfg_.vocab, "token");  // on every rank: no rank raises alone
  model::detail::check_ids(targets, cfg_.vocab, "target");
  ParallelStepStats st;
  st.step = ++steps_;
  TB_REQUIRE(std::isfinite(lr) && lr >= 0, fmt::format("parallel trainer: lr must be finite and >= 0, got {}", lr));
  st.lr = lr;

  for (auto& c : chunks_) c->zero_grads();
  Stage stage(*this, tokens, targets, docs, loss_weights);
  const MeshShape& s = spec_.mesh;
  const PipelineRun run = run_pipeline<T>({s.pp, s.vp, accum_}, mesh_->pp(), stage);
  pack_grads();
  sum_tied_grads();
  reduce_grads();

  // [loss, norm^2] in one all-reduce: the loss from one rank per dp replica (last stage, tp 0, cp 0).
  const Coord& c = mesh_->coord();
  const bool reports_loss = c.pp == s.pp - 1 && c.tp == 0 && c.cp == 0;
  double sums[2] = {reports_loss ? run.loss / (double(accum_) * s.dp) : 0.0, grad_norm_sq()};
  world_.all_reduce(std::span<double>(sums));
  st.loss = sums[0];
  st.grad_norm = std::sqrt(sums[1]);
  TB_REQUIRE(std::isfinite(st.grad_norm),
             fmt::format("step {}: the gradient norm is not finite (loss {}): lower the lr or clip", st.step, st.loss));
  const double max_norm = spec_.hyper.clip;
  st.clip_scale = max_norm > 0 && st.grad_norm > max_norm ? max_norm / (st.grad_norm + 1e-6) : 1.0;
  optimizer_step(st.clip_scale, st.lr);
  if (cfg_.moe.bias_update_rate > 0)  // the step's expert loads over every data-parallel rank, then the bias update
    for (auto& chunk : chunks_) {
      mesh_->dp().all_reduce(chunk->expert_load());
      chunk->update_expert_bias();
    }
  sync_replicas();
  for (Group& g : groups_) pack(g, flat_params_, g.params, true);  // the synced copies are the master values
  unpack_params();
  return st;
}

template <class T>
std::vector<T> ParallelCpuTrainer<T>::full_params() const {
  std::vector<T> full(full_.total, T(0));
  const Coord& c = mesh_->coord();
  // one copy per (pp, tp) coordinate (dp and cp rank 0); an expert-parallel expert from its edp rank 0; the world
  // sum adds the pieces
  const bool dense_copy = c.dp == 0 && c.cp == 0, expert_copy = mesh_->expert_coord().edp == 0;
  for (std::size_t k = 0; k < chunks_.size(); ++k) {
    const auto& dec = *chunks_[k];
    const model::DenseLayout& L = dec.local_layout();
    const bool has_copy = cfg_.tied_embeddings && dec.is_last() && !dec.is_first();  // (frozen or not)
    const std::size_t copy0 = has_copy ? L.slots[std::size_t(L.lm_head)].offset : 0;
    const std::size_t copy1 = has_copy ? copy0 + L.slots[std::size_t(L.lm_head)].size : 0;
    const std::span<const T> p = dec.params();
    for (const ShardBlock& b : dec.shard_blocks()) {
      if (!(b.expert ? expert_copy : dense_copy)) continue;
      if ((b.tp_replicated && c.tp != 0) || (b.local_offset >= copy0 && b.local_offset < copy1)) continue;
      for (std::int64_t i = 0; i < b.rows; ++i)
        std::copy_n(p.data() + b.local_offset + std::size_t(i * b.cols), b.cols,
                    full.data() + b.full_offset + std::size_t(i * b.full_stride));
    }
  }
  world_.all_reduce(std::span<T>(full));
  return full;
}

template <class T>
std::vector<T> ParallelCpuTrainer<T>::full_grads() const {
  std::vector<T> full(full_.grad_total, T(0));
  for (const auto& dec : chunks_) dec->add_grads_to_full(full);
  world_.all_reduce(std::span<T>(full));
  return full;
}

template class ParallelCpuTrainer<float>;
template class ParallelCpuTrainer<double>;

}  // namespace tb::parallel
