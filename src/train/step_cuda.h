// train/step_cuda.h: one optimizer step of the CUDA trainer, enqueued on one stream (train/trainer_cuda.cpp has the
// order) and, after the first eager step, captured once as a CUDA graph and replayed. The host writes each step's
// inputs (tokens, targets, lr and t) into pinned buffers, which the step's first copies read, and reads the losses
// and the gradient norm from pinned buffers its last copies write: their addresses never change, so one graph
// serves every step.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "ops/cuda/adamw.h"
#include "ops/cuda/context.h"
#include "train/data.h"
#include "train/optimizer_cuda.h"
#include "train/pipeline_cuda.h"
#include "train/replica_cuda.h"
#include "train/topology_cuda.h"

namespace tb::train {

// A pinned host array (the source or destination of the graph's memcpy nodes: its address must not change).
template <class T>
class Pinned {
 public:
  explicit Pinned(std::size_t n) : n_(n) { TB_CHECK(cudaMallocHost(reinterpret_cast<void**>(&p_), n * sizeof(T))); }
  ~Pinned() { cudaFreeHost(p_); }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
  T* get() const { return p_; }
  T& operator[](std::size_t i) const { return p_[i]; }
  std::size_t bytes() const { return n_ * sizeof(T); }

 private:
  T* p_ = nullptr;
  std::size_t n_;
};

class StepCuda {
 public:
  // micro_batches: per rank and step, each `tokens` tokens of seq; dp: data-parallel ranks (the gradients' scale
  // 1 / (micro_batches dp)); segments: packed data's segment capacity per micro-batch (0: not packed; the decoders
  // prepared with it); mark: the op profiler's hook.
  StepCuda(ops::DeviceContext& dc, const TopologyCuda& topo, ReplicaCuda& replica, const OptimizerCuda& opt,
           PipelineCuda* pipe, int micro_batches, std::size_t tokens, int micro_batch, int seq, int dp, bool clip,
           int segments, std::function<void(std::string_view)> mark);
  ~StepCuda();
  StepCuda(const StepCuda&) = delete;
  StepCuda& operator=(const StepCuda&) = delete;

  // The host side of the step's inputs and outputs.
  std::int32_t* tokens() const { return h_tokens_.get(); }  // [micro_batches, tokens]
  std::int32_t* targets() const { return h_targets_.get(); }
  ops::AdamWStepScalars& scalars() const { return h_scalars_[0]; }
  float loss(int micro_batch) const { return h_losses_[std::size_t(micro_batch)]; }
  // The step's loss from the micro-batches' (summed over the groups): their mean over the micro-batches and the
  // tensor- and context-parallel shares (world / pp ranks hold them: each its rows' mean), or with loss weights their
  // sum over the step's micro_batches x dp (each already its weighted share, train/data.h loss_weights).
  double loss(int world, int pp) const;
  float grad_norm() const { return h_norm_[0].norm; }
  // Step `step`'s inputs (1-based): the next micro_batches x dp micro-batches of `source`, of which this rank takes
  // [dp rank x micro_batches, +micro_batches) (the tensor-, pipeline- and context-parallel ranks of one replica share
  // them); context parallel (cp > 1): of each sequence of `full_seq` tokens, chunks cp rank and 2 cp - 1 - cp rank.
  // Packed data: each micro-batch's token positions, segment offsets (padded to the capacity) and loss weights too.
  void load_inputs(DataSource& source, int full_seq, int cp, int step, float lr);
  const StepTokens& counted() const { return counted_; }  // what the last load_inputs drew (every dp rank's)

  void enqueue();          // the whole step, eagerly
  std::string capture();   // "captured", or why not (the step then runs eagerly)
  void launch();           // the graph when captured, else enqueue()

 private:
  void load_packed(const Batch& b, int a, int micro_batches);

  ops::DeviceContext& dc_;
  const TopologyCuda& topo_;
  ReplicaCuda& rep_;
  const OptimizerCuda& opt_;
  PipelineCuda* pipe_;
  int accum_, mb_, seq_, dp_;
  std::size_t n_;
  bool clip_;
  std::function<void(std::string_view)> mark_;
  Pinned<std::int32_t> h_tokens_, h_targets_;
  Pinned<ops::AdamWStepScalars> h_scalars_{1};
  Pinned<float> h_losses_;
  Pinned<ops::GradNormResult> h_norm_{1};
  ops::DeviceBuffer d_tokens_, d_targets_, d_scalars_, d_losses_, d_norm_;
  // Packed data: per micro-batch its positions [n], segment offsets [segments + 1] and loss weights [n], and the
  // device pointers handed to the decoders (PackedInputs, one per micro-batch).
  int segments_;
  Pinned<std::int32_t> h_positions_, h_offsets_;
  Pinned<float> h_weights_;
  ops::DeviceBuffer d_positions_, d_offsets_, d_weights_;
  std::vector<model::PackedInputs> packed_;
  StepTokens counted_;
  cudaGraphExec_t graph_ = nullptr;
};

}  // namespace tb::train
