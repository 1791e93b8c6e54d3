// train/optimizer_cuda.cpp: the CUDA trainer's distributed AdamW and the weights' init (train/optimizer_cuda.h).
#include "train/optimizer_cuda.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "ops/cuda/fill.h"
#include "ops/cuda/master_split.h"
#include "parallel/tensor_shard.h"
#include "train/cuda_spec.h"

namespace tb::train {
namespace {

// n fp32 initial values of slot s from its element `first` (model/params.h: normal, or uniform within init_bound).
void fill_init(float* v, const model::Slot& s, std::size_t n, std::uint64_t seed, std::size_t first, cudaStream_t st) {
  const std::uint64_t stream = model::slot_seed(seed, s.name);
  if (s.init_bound > 0)
    ops::fill_uniform_f32(v, n, stream, float(s.init_value - s.init_bound), float(s.init_value + s.init_bound), st,
                          first);
  else
    ops::fill_normal(v, n, stream, float(s.init_value), float(s.init_std), st, first);
}

}  // namespace

OptimizerCuda::OptimizerCuda(ops::DeviceContext& dc, const TrainSpec& spec, const model::ModelConfig& m,
                             ReplicaCuda& replica, bool tied_over_stages)
    : dc_(dc),
      spec_(spec),
      m_(m),
      rep_(replica),
      split_(spec.optimizer.master == Master::split),
      master_copy_(spec.optimizer.master != Master::none),
      moment_bytes_(spec.optimizer.moments == DType::bf16 ? 2 : 4) {
  const auto& chunks = rep_.chunks;
  for (std::size_t c = 0; c < chunks.size(); ++c)
    for (const model::Slot& sl : chunks[c]->dense_layout().slots) slots_.push_back({c, chunks[c].get(), &sl});
  tied_chunk = chunks.size();
  for (const ChunkSlot& cs : slots_)  // (a frozen embedding has no gradient to sum)
    if (tied_over_stages && cs.slot->tags.tied && cs.slot->has_grad())
      tied_grads = cs.net->grads_device() + cs.slot->grad_offset, tied_elems = cs.slot->size, tied_chunk = cs.chunk;
  // The optimizer's tensors: every trainable slot (one rank), or this rank's ZeRO-1 segments (flat offset in the
  // gradients, shard offset in the master, moments and reduced gradients, which hold the chunks' slots back to back;
  // several chunks: their segments back to back, each segment's slot an index into slots_).
  auto trainable = [&](int slot) { return slots_[std::size_t(slot)].slot->tags.trainable; };
  if (!rep_.dps.empty()) {
    std::size_t slot_base = 0;
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      shard_base_.push_back(S_);
      for (parallel::ZeroSegment g : rep_.zero[c].segments) {
        g.slot += int(slot_base);
        g.shard += S_;
        if (trainable(g.slot)) segments_.push_back(g);
      }
      S_ += rep_.zero[c].shard_size;
      slot_base += chunks[c]->dense_layout().slots.size();
    }
  } else {
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      if (!trainable(int(i))) continue;
      segments_.push_back({slots_[i].slot->grad_offset, S_, slots_[i].slot->size, int(i)});
      S_ += slots_[i].slot->size;  // gradients are packed (model/params.h): at vp 1, shard == flat offset
    }
  }
  // Tensor parallel: the replicated embedding and LM head are updated a 1/tp part per rank (their gradients are
  // equal on every rank), then all-gathered while the other parameters update: tp times less optimizer work on them.
  if (TensorParallelCuda* tpc = rep_.tp()) {
    for (parallel::ZeroSegment& g : segments_)
      if (const model::Slot& sl = *slots_[std::size_t(g.slot)].slot; split_update(sl)) {
        split_slots_.emplace_back(sl.offset, sl.size);  // (full training: its gradient's offset too)
        g.count = sl.size / std::size_t(spec_.parallel.tp);
        g.flat += std::size_t(tpc->rank()) * g.count;
        g.shard += std::size_t(tpc->rank()) * g.count;
      }
    tpc->set_split_slots(split_slots_);
  }
  master_ = ops::DeviceBuffer(dc_.device(), std::size_t(master_bytes(spec_, double(S_))));
  moments_ = ops::DeviceBuffer(dc_.device(), std::size_t(moment_bytes(spec_, double(S_))));
  TB_CHECK(cudaMemsetAsync(moments_.get(), 0, moments_.bytes(), dc_.stream()));
}

// (with data parallel the ZeRO-1 shards already split them; trainable only)
bool OptimizerCuda::split_update(const model::Slot& sl) const {
  return rep_.tp() && rep_.dps.empty() && spec_.parallel.vp == 1 && sl.has_grad() && sl.offset == sl.grad_offset &&
         (sl.tags.role == model::ParamRole::embedding || sl.tags.role == model::ParamRole::head) &&
         sl.size % std::size_t(spec_.parallel.tp) == 0;
}

// Every rank draws every slot of the full model (the same values), keeps its tensor-parallel shard of the model
// weights (parallel/tensor_shard.h) and its own master segments. A slot is drawn in pieces of at most kInitPiece
// elements (the counter-based draw continues where the last piece ended), but a tensor-parallel shard of a split
// slot, which is cut out of the whole slot drawn at once.
void OptimizerCuda::init_weights(std::uint64_t seed) {
  constexpr std::size_t kInitPiece = std::size_t(1) << 26;  // 256 MiB of fp32 values + 128 MiB of residuals
  cudaStream_t st = dc_.stream();
  const int tp = spec_.parallel.tp;
  const model::DenseLayout full = model::dense_layout(m_);
  auto split_by_tp = [&](const model::Slot& s) { return tp > 1 && !parallel::tp_replicated(s); };
  std::size_t piece = 0, largest_full = 0;
  for (const ChunkSlot& cs : slots_) {
    piece = std::max(piece, split_by_tp(*cs.slot) ? cs.slot->size : std::min(cs.slot->size, kInitPiece));
    if (split_by_tp(*cs.slot)) largest_full = std::max(largest_full, full.at(cs.slot->name).size);
  }
  ops::DeviceBuffer init(dc_.device(), piece * sizeof(float)), lo(dc_.device(), piece * sizeof(std::int16_t));
  ops::DeviceBuffer whole(dc_.device(), largest_full * sizeof(float));
  std::size_t seg = 0;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const model::Slot& s = *slots_[i].slot;
    const bool cut = split_by_tp(s);
    const std::size_t step = cut ? s.size : kInitPiece;
    for (std::size_t p0 = 0; p0 < s.size; p0 += step) {  // elements [p0, p1) of the slot
      const std::size_t p1 = std::min(s.size, p0 + step);
      float* v = init.as<float>();
      if (cut) {
        const model::Slot& f = full.at(s.name);
        fill_init(whole.as<float>(), f, f.size, seed, 0, st);
        const std::size_t cols = std::size_t(f.shape[1]);
        std::size_t at = 0;
        for (const parallel::SlotPart& p : parallel::tp_slot_parts(f, tp, rep_.tp()->rank())) {
          TB_CHECK(cudaMemcpy2DAsync(v + at, std::size_t(p.cols) * sizeof(float),
                                     whole.as<float>() + std::size_t(p.row0) * cols + std::size_t(p.col0),
                                     cols * sizeof(float), std::size_t(p.cols) * sizeof(float), std::size_t(p.rows),
                                     cudaMemcpyDeviceToDevice, st));
          at += std::size_t(p.rows * p.cols);
        }
      } else {
        fill_init(v, s, p1 - p0, seed, p0, st);
      }
      auto* weights = slots_[i].net->params_device() + s.offset + p0;
      if (split_)
        ops::master_split(v, weights, lo.as<std::int16_t>(), p1 - p0, st);
      else
        ops::cast_f32_to_bf16(weights, v, p1 - p0, st);
      // this rank's master segments of the slot, where they meet [p0, p1)
      for (std::size_t k = seg; k < segments_.size() && segments_[k].slot == int(i); ++k) {
        const parallel::ZeroSegment& g = segments_[k];
        const std::size_t in_slot = g.flat - s.grad_offset;
        const std::size_t a = std::max(in_slot, p0), b = std::min(in_slot + g.count, p1);
        if (a >= b || !master_copy_) continue;
        const std::size_t to = g.shard + (a - in_slot);
        if (split_)
          TB_CHECK(cudaMemcpyAsync(master_.as<std::int16_t>() + to, lo.as<std::int16_t>() + (a - p0),
                                   (b - a) * sizeof(std::int16_t), cudaMemcpyDeviceToDevice, st));
        else
          TB_CHECK(cudaMemcpyAsync(master_.as<float>() + to, v + (a - p0), (b - a) * sizeof(float),
                                   cudaMemcpyDeviceToDevice, st));
      }
    }  // init and lo are reused by the next piece in stream order
    while (seg < segments_.size() && segments_[seg].slot == int(i)) ++seg;
  }
  dc_.synchronize();  // before the temporaries are freed
}

void OptimizerCuda::build() {
  DataParallelCuda* ddp = rep_.dp();
  TensorParallelCuda* tpc = rep_.tp();
  auto* m_base = static_cast<std::byte*>(moments_.get());
  std::size_t early_tensors = 0;  // data parallel: the tensors of the buckets all-gathered at the end of the step
  for (const parallel::ZeroSegment& g : segments_) {
    ops::AdamWTensor t;
    if (split_)
      t.master_lo = master_.as<std::int16_t>() + g.shard;
    else if (master_copy_)
      t.master = master_.as<float>() + g.shard;  // (no master: AdamW updates the bf16 model weights themselves)
    const ChunkSlot& cs = slots_[std::size_t(g.slot)];
    if (ddp) {  // the chunk's data parallel, with the segment's shard offset in its own partition
      parallel::ZeroSegment local = g;
      local.shard -= shard_base_[cs.chunk];
      t.grad = rep_.dps[cs.chunk]->segment_grads(local);
    } else {
      t.grad = cs.net->grad_at(g.flat);
    }
    if (ddp && ddp->early() > 0 && g.flat < rep_.zero[0].buckets[std::size_t(ddp->early() - 1)].end) ++early_tensors;
    t.exp_avg = m_base + g.shard * moment_bytes_;
    t.exp_avg_sq = m_base + (S_ + g.shard) * moment_bytes_;
    t.model = cs.net->params_device() + param_at(g);
    t.numel = std::int64_t(g.count);
    t.decay = cs.slot->tags.decay;
    tensors_.push_back(t);
  }
  // FP8 with delayed scaling: AdamW writes the linear layers' FP8 copies in its update (Fp8Spec::weight_cast),
  // and fp8_begin_step() stops casting them. Each rank's whole weights (one GPU, tensor and pipeline parallel: their
  // amaxes still reach the ranks' max at fp8_end_step), not ZeRO-1's shards (data and context parallel: the copies need
  // whole weights). auto: only with fp32 moments (8B L8 on an H200: -0.83 ms; with bf16 moments +0.16 ms,
  // bench/RESULTS.md).
  const bool bf16_moments = spec_.optimizer.moments == DType::bf16;
  if (rep_.net().fp8()) fp8_weight_cast_ = "separate";
  const bool fuse = spec_.precision.fp8.weight_cast == WeightCast::fused ||
                    (spec_.precision.fp8.weight_cast == WeightCast::automatic && !bf16_moments);
  for (std::size_t c = 0; c < rep_.chunks.size() && fuse && rep_.dps.empty(); ++c) {
    const auto copies = rep_.chunks[c]->fp8_weight_copies();
    std::size_t found = 0;
    for (std::size_t i = 0; i < segments_.size(); ++i)
      for (const model::CudaDecoder::Fp8WeightCopy& copy : copies)
        if (slots_[std::size_t(segments_[i].slot)].chunk == c && copy.flat == param_at(segments_[i]) &&
            copy.count == segments_[i].count)
          tensors_[i].fp8_copy = copy.cast, ++found;
    TB_REQUIRE(found == copies.size(),
               fmt::format("internal: {} of the {} FP8 weight copies of model chunk {} match an optimizer tensor; "
                           "rerun with --fp8-weight-cast separate",
                           found, copies.size(), c));
    if (found > 0) rep_.chunks[c]->fp8_weights_from_optimizer(), fp8_weight_cast_ = "adamw";
  }
  const DType moment_type = bf16_moments ? DType::bf16 : DType::f32;
  const DType grads_type = spec_.memory.grads;  // (several ranks: fp32, validate())
  group_ = std::make_unique<ops::AdamWGroup>(dc_.device(), tensors_, moment_type, grads_type);
  // The gradient norm counts every parameter once: a tensor-parallel replicated one on tp rank 0 (the split embedding
  // and LM head: each rank's part), the shards on every rank, a tied embedding on the first stage only; the ranks'
  // sums of squares are then added up. Tensor parallel: the split parts update first (early), so their all-gather
  // overlaps the rest.
  std::vector<ops::AdamWTensor> counted, first, rest;
  for (std::size_t i = 0; i < segments_.size(); ++i) {
    const ChunkSlot& cs = slots_[std::size_t(segments_[i].slot)];
    const model::Slot& sl = *cs.slot;
    if (!is_tied_copy(cs) && (!tpc || !parallel::tp_replicated(sl) || split_update(sl) || tpc->rank() == 0))
      counted.push_back(tensors_[i]);
    (split_update(sl) ? first : rest).push_back(tensors_[i]);
  }
  if (counted.size() < tensors_.size())  // (every tensor counts: group_)
    counted_ = std::make_unique<ops::AdamWGroup>(dc_.device(), counted, moment_type, grads_type);
  if (tpc && !first.empty() && !rest.empty()) {
    early_ = std::make_unique<ops::AdamWGroup>(dc_.device(), first, moment_type);
    late_ = std::make_unique<ops::AdamWGroup>(dc_.device(), rest, moment_type);
  }
  // Data parallel: the optimizer in two launches, the early buckets first (their all-gather overlaps the second).
  if (ddp && early_tensors > 0 && early_tensors < tensors_.size()) {
    const std::span<const ops::AdamWTensor> all(tensors_);
    early_ = std::make_unique<ops::AdamWGroup>(dc_.device(), all.first(early_tensors), moment_type);
    late_ = std::make_unique<ops::AdamWGroup>(dc_.device(), all.subspan(early_tensors), moment_type);
  }
  hp_.beta1 = spec_.optimizer.beta1, hp_.beta2 = spec_.optimizer.beta2, hp_.eps = spec_.optimizer.eps,
  hp_.weight_decay = spec_.optimizer.weight_decay;
  max_norm_ = spec_.optimizer.clip > 0 ? float(spec_.optimizer.clip) : std::numeric_limits<float>::infinity();
}

void OptimizerCuda::grad_norm(ops::GradNormResult* norm, cudaStream_t st) const {
  ops::grad_norm(counted_ ? *counted_ : *group_, max_norm_, norm, st);
}

void OptimizerCuda::step(const ops::AdamWStepScalars* scalars, const ops::GradNormResult* clip,
                         cudaStream_t st) const {
  if (early_) {
    ops::adamw_step(*early_, hp_, scalars, clip, st);
    if (DataParallelCuda* ddp = rep_.dp()) ddp->gather_early();  // the next forward starts with these buckets
    if (TensorParallelCuda* tpc = rep_.tp()) tpc->gather_parts(rep_.net().params_device(), split_slots_);
    ops::adamw_step(*late_, hp_, scalars, clip, st);
  } else {
    ops::adamw_step(*group_, hp_, scalars, clip, st);
    for (const auto& d : rep_.dps) d->gather_early();
  }
}

OptimizerCuda::HostState OptimizerCuda::host_state() const {
  TB_REQUIRE(rep_.dps.empty() && !rep_.tp() && rep_.chunks.size() == 1,
             "internal: a checkpoint's state is gathered from one rank's whole model only");
  HostState h;
  for (const parallel::ZeroSegment& g : segments_) {  // one rank: a segment is a whole trainable slot
    model::Slot s = *slots_[std::size_t(g.slot)].slot;
    s.offset = s.grad_offset = g.shard;
    h.slots.push_back(std::move(s));
  }
  h.params.assign(S_, 0.f), h.exp_avg.assign(S_, 0.f), h.exp_avg_sq.assign(S_, 0.f);
  return h;
}

void OptimizerCuda::download(HostState& h) const {
  cudaStream_t st = dc_.stream();
  std::vector<std::uint16_t> hi(S_);
  std::vector<std::byte> master(master_.bytes()), moments(moments_.bytes());
  for (const parallel::ZeroSegment& g : segments_)
    TB_CHECK(cudaMemcpyAsync(hi.data() + g.shard, slots_[std::size_t(g.slot)].net->params_device() + param_at(g),
                             g.count * sizeof(std::uint16_t), cudaMemcpyDeviceToHost, st));
  if (master_.bytes() > 0)
    TB_CHECK(cudaMemcpyAsync(master.data(), master_.get(), master_.bytes(), cudaMemcpyDeviceToHost, st));
  TB_CHECK(cudaMemcpyAsync(moments.data(), moments_.get(), moments_.bytes(), cudaMemcpyDeviceToHost, st));
  dc_.synchronize();
  const auto* lo = reinterpret_cast<const std::int16_t*>(master.data());
  const auto* f32 = reinterpret_cast<const float*>(master.data());
  for (std::size_t i = 0; i < S_; ++i)
    h.params[i] = split_ ? ops::join_master(hi[i], lo[i]) : master_copy_ ? f32[i] : bf16_to_float(hi[i]);
  for (std::size_t i = 0; i < 2 * S_; ++i) {
    float& v = i < S_ ? h.exp_avg[i] : h.exp_avg_sq[i - S_];
    if (moment_bytes_ == 4)
      std::memcpy(&v, moments.data() + i * 4, 4);
    else
      v = bf16_to_float(reinterpret_cast<const std::uint16_t*>(moments.data())[i]);
  }
}

void OptimizerCuda::upload(const HostState& h) {
  TB_REQUIRE(h.params.size() == S_ && h.exp_avg.size() == S_ && h.exp_avg_sq.size() == S_,
             "internal: a checkpoint's state of another size than the optimizer's");
  std::vector<std::uint16_t> hi(S_);
  std::vector<std::byte> master(master_.bytes()), moments(moments_.bytes());
  auto* lo = reinterpret_cast<std::int16_t*>(master.data());
  auto* f32 = reinterpret_cast<float*>(master.data());
  for (std::size_t i = 0; i < S_; ++i) {
    if (split_) {
      const ops::MasterHalves m = ops::split_master(h.params[i]);
      hi[i] = m.hi, lo[i] = m.lo;
    } else {
      hi[i] = float_to_bf16(h.params[i]);  // (as AdamW rounds its master)
      if (master_copy_) f32[i] = h.params[i];
    }
  }
  for (std::size_t i = 0; i < 2 * S_; ++i) {
    const float v = i < S_ ? h.exp_avg[i] : h.exp_avg_sq[i - S_];
    if (moment_bytes_ == 4)
      std::memcpy(moments.data() + i * 4, &v, 4);
    else
      reinterpret_cast<std::uint16_t*>(moments.data())[i] = float_to_bf16(v);
  }
  cudaStream_t st = dc_.stream();
  for (const parallel::ZeroSegment& g : segments_)
    TB_CHECK(cudaMemcpyAsync(slots_[std::size_t(g.slot)].net->params_device() + param_at(g), hi.data() + g.shard,
                             g.count * sizeof(std::uint16_t), cudaMemcpyHostToDevice, st));
  if (master_.bytes() > 0)
    TB_CHECK(cudaMemcpyAsync(master_.get(), master.data(), master_.bytes(), cudaMemcpyHostToDevice, st));
  TB_CHECK(cudaMemcpyAsync(moments_.get(), moments.data(), moments_.bytes(), cudaMemcpyHostToDevice, st));
  dc_.synchronize();  // before the host buffers go
}

}  // namespace tb::train
