// parallel/trainer_cpu.h: optimizer steps of the dense decoder on a dp x cp x pp x tp mesh (vp virtual stages,
// sequence parallel) with the CPU reference ops and the MPI communicators: the reference every parallel layout
// is checked against (one step = the single-rank train::train_cpu step on the same global batch).
//
// Model chunks. With S = pp·vp global stages, pipeline rank r holds chunks c = 0..vp-1, chunk c = global stage
// s = c·pp + r = layers [s·L/S, (s+1)·L/S), each a ShardedCpuDecoder over the rank's tp and cp groups.
// One step, global batch G sequences of config.seq tokens, micro-batch b, accum = G / (b·dp):
//   dp rank d runs micro-batches [d·accum, (d+1)·accum) of the step (micro-batch i = sequences [i·b, (i+1)·b)),
//   through run_pipeline (1F1B, or interleaved when vp > 1) over the pp group; the cp ranks of a dp rank run the
//   same micro-batches (each its sequence chunks). grad_scale = 1 / (accum·dp): the sum over dp x cp is the
//   gradient of the mean loss over the global batch.
//   loss = sum over dp of the last stage's micro-batch losses / (accum·dp), all-reduced: the same on every rank.
// Gradient reduction and optimizer (ZeRO-1 per reduction group; a group of D ranks, q = this rank's index there):
//   flat = the concatenation of the chunks' local gradient buffers (their trainable slots: a frozen slot has no
//     gradient, moments or reduction, and its parameters never change). Its elements split by the slots' tags into
//     the dense parameters, reduced over dp x cp = mesh.dp_cp(), and (expert parallel, ep > 1) the routed experts
//     this rank holds, reduced over the expert data-parallel group mesh.edp() (the ranks holding the same experts;
//     Megatron-Core's expert distributed optimizer); with ep 1 the experts are dense parameters. Per group: its
//     elements packed in flat order, padded to a multiple of D; shard q = [q·n/D, (q+1)·n/D)
//   tied embeddings over stages (first != last stage): the last stage's copy of the embedding shard and the
//     first stage's are summed between pp ranks 0 and pp-1 (Megatron's embedding group) before anything else
//   g_q    = reduce-scatter over the group of its gradients
//   norm   = sqrt(all-reduce over the world of sum g_q^2 over both groups' elements counted once: tp-replicated slots
//            on tp rank 0, the tied copy on the first stage only; an expert once per stage, its edp shards being
//            disjoint)
//   clip   = max_norm / (norm + 1e-6) when norm > max_norm (max_norm > 0), else 1;  g_q *= clip
//   AdamW (ops/cpu/adamw.h) on the shard's params, moments m, v on the shard only, lr = step()'s lr,
//     weight decay except on norms and biases (train::decays())
//   params = all-gather over each group of its shards; then tp rank 0's replicated slots are broadcast over tp and
//     the first stage's embedding copied to the last stage's tied copy, so the copies stay bitwise equal
//     whatever order the reductions of different groups summed in.
// The constructor, step(), full_params() and full_grads() are collective over the world communicator (call them
// on every rank, in the same order).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "model/config.h"
#include "model/param_layout.h"
#include "parallel/decoder_cpu_parallel.h"
#include "parallel/mesh.h"

namespace tb::parallel {

// The optimizer's hyper-parameters (the caller maps train::TrainSpec onto them; the learning rate of each step comes
// with step(), from the caller's schedule, train/schedule.h).
struct OptimizerHyper {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  double clip = 1.0;  // max gradient norm; 0: no clipping
  void validate() const;  // Error{config} naming the bad field
};

struct ParallelTrainSpec {
  MeshShape mesh;
  int micro_batch = 1;   // sequences per micro-batch
  int global_batch = 1;  // sequences per optimizer step (every dp rank takes global / dp of them)
  OptimizerHyper hyper;
};

struct ParallelStepStats {
  int step = 0;  // 1-based
  double loss = 0, grad_norm = 0, clip_scale = 1, lr = 0;
};

// Whether AdamW decays this slot: norm gains and biases are not decayed (the usual practice; the CUDA trainer too).
bool decays(const model::Slot& s);

template <class T>
class ParallelCpuTrainer {
 public:
  // Validates the layout (parallel::validate_layout, validate_pipeline) and the hyper-parameters before any
  // communication: a bad spec raises Error{config} on every rank. Parameters start as CpuDecoder<T>(cfg, seed).
  ParallelCpuTrainer(comm::Communicator& world, const model::ModelConfig& cfg, const ParallelTrainSpec& spec,
                     std::uint64_t seed);
  ~ParallelCpuTrainer();
  ParallelCpuTrainer(const ParallelCpuTrainer&) = delete;
  ParallelCpuTrainer& operator=(const ParallelCpuTrainer&) = delete;

  const model::ModelConfig& config() const { return cfg_; }
  const ParallelTrainSpec& spec() const { return spec_; }
  const Mesh& mesh() const { return *mesh_; }
  int accum() const { return accum_; }  // micro-batches per dp rank and step

  // One optimizer step on the global batch: tokens and targets [global_batch, config().seq] row-major, the same
  // on every rank. Returns the same stats on every rank. Packed rows: docs, the documents of the global batch's rows,
  // and loss_weights [global_batch, seq] (train/data.h loss_weights over the step's micro-batches), each micro-batch
  // taking its rows' (parallel::MicroBatch).
  ParallelStepStats step(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets, double lr,
                         Documents docs = {}, std::span<const double> loss_weights = {});

  // The full model's parameters (model::dense_layout order, as CpuDecoder::params()), on every rank.
  std::vector<T> full_params() const;
  // The full gradient of the last step before clipping and the optimizer (as CpuDecoder::grads() after
  // forward_backward of the global batch with its mean loss: the trainable slots' gradient layout), on every rank.
  // Zeros before the first step.
  std::vector<T> full_grads() const;
  // Replaces the parameters (a full buffer in dense_layout order, the same on every rank); moments are kept.
  void load_full(std::span<const T> full);

 private:
  class Stage;
  struct Group;  // the parameters one data-parallel group reduces (trainer_cpu.cpp)
  void build_groups();
  void build_masks();
  void pack_grads();
  void sum_tied_grads();
  void reduce_grads();
  static void pack(const Group& g, const std::vector<T>& flat, std::vector<T>& packed, bool params);
  static void unpack(const Group& g, const std::vector<T>& packed, std::vector<T>& flat);
  double grad_norm_sq() const;
  void optimizer_step(double clip_scale, double lr);
  void sync_replicas();
  void unpack_params();
  // This rank's copy of a stage-split tied embedding in the flat parameters (grads: in the flat gradients).
  std::span<T> tied_region(std::vector<T>& flat, bool grads) const;

  comm::Communicator& world_;
  model::ModelConfig cfg_;
  ParallelTrainSpec spec_;
  model::DenseLayout full_;
  std::unique_ptr<Mesh> mesh_;
  int accum_ = 1;
  bool tied_split_ = false;  // tied embeddings on different stages, trainable: a copy on pp rank 0 and on pp rank pp-1
  std::vector<std::unique_ptr<ShardedCpuDecoder<T>>> chunks_;
  std::vector<std::size_t> chunk_offset_, chunk_grad_offset_;  // of each chunk in the flat buffers
  std::vector<T> flat_params_, flat_grads_;     // local buffers (every chunk, this tp/pp coordinate)
  std::vector<std::uint8_t> decay_, counted_;   // per flat gradient element
  std::vector<Group> groups_;                   // dense; experts (ep > 1)
  int steps_ = 0;
};

template <class T>
struct ParallelCpuTrainer<T>::Group {
  struct Run {
    std::size_t param, grad, count;  // offsets in the flat parameters and gradients, elements
  };
  comm::Communicator* comm = nullptr;
  std::vector<Run> runs;  // in flat order
  std::size_t shard = 0;                                  // padded size / comm->size()
  std::vector<T> params, grads;                           // the runs packed, padded
  std::vector<T> shard_grads, adam_m, adam_v;             // this rank's shard
  std::vector<std::uint8_t> decay, counted;               // per packed element (padding: 0)
};

extern template class ParallelCpuTrainer<float>;
extern template class ParallelCpuTrainer<double>;

}  // namespace tb::parallel
