// train/optimizer_cuda.h: the CUDA trainer's distributed AdamW over this rank's trainable parameters (a frozen one, the
// base under LoRA, has no master weights, moments or gradient, and its weights are only drawn). Per parameter
// (or, with data parallel, per ZeRO-1 segment of this rank's shard, parallel/zero.h):
//   master  fp32 weights: split (the bf16 model weight is the high half, `master` the 16-bit residual:
//           ops/cuda/master_split.h) or f32 (a separate copy)
//   moments exp_avg, exp_avg_sq: f32 or bf16 (OptimizerSpec::moments)
//   bytes() = S (2 split | 4 f32) + 2 S (4 | 2), S the state's elements on this rank
// init_weights(seed) draws every parameter of the full model (model/params.h: the same values on every backend and
// rank), keeps the rank's tensor-parallel shard of the model weights and its own master segments. step():
//   norm = ||g|| over the parameters counted once (a tp-replicated one on tp rank 0, a tied embedding's copy not at
//   all); the ranks' squares summed by the caller; clip = min(1, max_norm / norm)
//   AdamW(master, m, v -> bf16 weights, optionally their FP8 copies) with clip, lr and t from the step's scalars;
//   data or tensor parallel: the parameters the next forward reads first update first, and their all-gather
//   overlaps the rest's update.
// Checkpoints (one rank): download() gives the trainable state in fp32 on the host (the weights joined with their
// master: exact for split and f32 masters, the bf16 weights themselves without one; the moments widened), upload()
// writes such a state back as this run keeps it (the weights split or rounded to bf16, the moments narrowed): a state
// downloaded and uploaded again is bit-identical.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/params.h"
#include "ops/cuda/adamw.h"
#include "ops/cuda/context.h"
#include "parallel/zero.h"
#include "train/checkpoint.h"
#include "train/replica_cuda.h"
#include "train/trainer.h"

namespace tb::train {

class OptimizerCuda {
 public:
  // m: the whole model. Allocates the master weights and moments (zeroed); init_weights() fills the weights.
  OptimizerCuda(ops::DeviceContext& dc, const TrainSpec& spec, const model::ModelConfig& m, ReplicaCuda& replica,
                bool tied_over_stages);
  void init_weights(std::uint64_t seed);
  // The AdamW tensors and groups, once the gradients have their final place (shared gradients: after prepare()).
  void build();

  void grad_norm(ops::GradNormResult* norm, cudaStream_t st) const;  // this rank's sum of squares, clip scale
  // AdamW; clip: the norm's result (null: no clipping). Data parallel: gathers the early buckets between the halves.
  void step(const ops::AdamWStepScalars* scalars, const ops::GradNormResult* clip, cudaStream_t st) const;
  float max_norm() const { return max_norm_; }
  std::size_t bytes() const { return master_.bytes() + moments_.bytes(); }
  // The master weights' and the moments' bytes for `elements` of state (what the memory estimate adds up).
  static double master_bytes(const TrainSpec& spec, double elements) {
    return (spec.optimizer.master == Master::split ? 2 : spec.optimizer.master == Master::f32 ? 4 : 0) * elements;
  }
  static double moment_bytes(const TrainSpec& spec, double elements) {
    return (spec.optimizer.moments == DType::bf16 ? 4 : 8) * elements;
  }
  std::string fp8_weight_cast() const { return fp8_weight_cast_; }  // "adamw", "separate" or "" (BF16)

  // The trainable state of a one-rank run on the host: the trainable slots, each at its place in the optimizer's
  // state (offset = grad_offset: [0, S)), and their fp32 weights and moments.
  struct HostState {
    std::vector<model::Slot> slots;
    std::vector<float> params, exp_avg, exp_avg_sq;
    TrainState view() { return {slots, params, exp_avg, exp_avg_sq}; }
  };
  HostState host_state() const;       // the layout, zeros (12 bytes of host memory per trainable parameter)
  void download(HostState& h) const;  // synchronizes the stream
  void upload(const HostState& h);

  // Tied embeddings over pipeline stages: this rank's embedding (or its copy) gradient, in chunk tied_chunk
  // (chunks.size(): none).
  float* tied_grads = nullptr;
  std::size_t tied_elems = 0, tied_chunk = 0;

 private:
  struct ChunkSlot {  // one parameter of this rank, with its chunk
    std::size_t chunk;
    model::CudaDecoder* net;
    const model::Slot* slot;
  };
  bool is_tied_copy(const ChunkSlot& cs) const { return cs.slot->tags.tied && !cs.net->first_stage(); }
  bool split_update(const model::Slot& s) const;
  // A segment's first element in its chunk's parameters (its flat offset is in the gradients).
  std::size_t param_at(const parallel::ZeroSegment& g) const {
    const model::Slot& s = *slots_[std::size_t(g.slot)].slot;
    return s.offset + (g.flat - s.grad_offset);
  }

  ops::DeviceContext& dc_;
  const TrainSpec spec_;
  const model::ModelConfig m_;
  ReplicaCuda& rep_;
  bool split_ = true;        // master as residuals
  bool master_copy_ = true;  // a master at all (Master::none: the bf16 weights are the state)
  std::size_t moment_bytes_ = 4;
  std::vector<ChunkSlot> slots_;                    // chunk after chunk
  std::vector<parallel::ZeroSegment> segments_;     // the optimizer's tensors, each slot an index into slots_
  std::vector<std::size_t> shard_base_;             // per chunk: where its shard starts in the optimizer's tensors
  std::size_t S_ = 0;                               // state elements
  std::vector<std::pair<std::size_t, std::size_t>> split_slots_;  // tp: (offset, size) of the split-update slots
  ops::DeviceBuffer master_, moments_;
  std::vector<ops::AdamWTensor> tensors_;
  std::unique_ptr<ops::AdamWGroup> group_, counted_, early_, late_;
  ops::AdamWConfig hp_;
  float max_norm_ = 0;
  std::string fp8_weight_cast_;
};

}  // namespace tb::train
