// train/replica_cuda.h: this rank's model replica for the CUDA trainer: its model chunks (the whole model, its
// pipeline stage, or vp interleaved chunks, chunk c = global stage c·pp + r; each a CudaDecoder over its layers'
// parameters, named as the whole model's) and, per chunk, the tensor-, context- and data-parallel objects wired into
// it after it is built (modules never create or look up communicators):
//   tensor parallel   TensorParallelCuda over the tp group: the decoder's gathers / reduce-scatters, the replicated
//                     parameters' gradient sums (train/tensor_parallel_cuda.h)
//   context parallel  the K, V all-gathers and dK, dV reduce-scatters on the compute stream
//   data parallel     DataParallelCuda over dp x cp: ZeRO-1's buckets (train/data_parallel_cuda.h); the later chunks'
//                     on communicators of their own
//   FP8 delayed       the amaxes' max over the ranks holding the same layers
// connect_step() adds the per-step hooks: the parameters' all-gathers before they are read, the gradients'
// reductions as their layers' backward completes on a chunk's last pass of the step, the embedding rows' exchange.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "model/decoder_cuda.h"
#include "ops/cuda/context.h"
#include "parallel/zero.h"
#include "train/data_parallel_cuda.h"
#include "train/pipeline_cuda.h"
#include "train/tensor_parallel_cuda.h"
#include "train/topology_cuda.h"
#include "train/trainer.h"

namespace tb::train {

struct ReplicaCuda {
  std::vector<parallel::ZeroLayout> zero;  // per chunk: its layout's ZeRO-1 partition over dp x cp
  std::vector<std::unique_ptr<model::CudaDecoder>> chunks;
  std::vector<std::unique_ptr<TensorParallelCuda>> tps;  // per chunk (tp > 1)
  std::unique_ptr<comm::NcclCommunicator> cp_comm;
  std::vector<std::unique_ptr<comm::NcclCommunicator>> chunk_dp_comms;  // chunks 1.. of an interleaved pipeline
  std::vector<std::unique_ptr<DataParallelCuda>> dps;  // per chunk (dp x cp > 1)
  std::vector<char> final_pass;  // per chunk: its last backward of the step is running (its gradients reduce)
  bool grads_shared = false;     // the gradients take the activations' bytes (MemorySpec::grad_buffer)
  int buckets = 0;               // data parallel: gradient buckets reduce-scattered per step

  // m: the whole model, local: this rank's tensor-parallel shard of it; tokens: a micro-batch's on this rank;
  // micro_batches: per rank and step. Collective over the job (communicator splits).
  ReplicaCuda(ops::DeviceContext& dc, const TrainSpec& spec, TopologyCuda& topo, const model::ModelConfig& m,
              const model::ModelConfig& local, std::size_t tokens, int micro_batches);
  ReplicaCuda(const ReplicaCuda&) = delete;  // the hooks hold `this`
  ReplicaCuda& operator=(const ReplicaCuda&) = delete;

  model::CudaDecoder& net() const { return *chunks[0]; }  // chunk 0 (data, tensor and context parallel: the one)
  // Chunk c holds an untied embedding with a gradient (frozen under LoRA: no rows to exchange).
  bool trainable_embedding(std::size_t c) const;
  TensorParallelCuda* tp() const { return tps.empty() ? nullptr : tps[0].get(); }
  DataParallelCuda* dp() const { return dps.empty() ? nullptr : dps[0].get(); }

  // The step's hooks (after the optimizer and the pipeline exist): `tied_chunk` reduces at the step's end instead
  // (its data-parallel reduce-scatter follows the tied embedding's sum over the stages).
  void connect_step(PipelineCuda* pipe, std::size_t tied_chunk, const std::function<void(std::string_view)>& mark);
};

}  // namespace tb::train
