// train/replica_cuda.cpp: this rank's model chunks and their parallel wiring (train/replica_cuda.h).
#include "train/replica_cuda.h"

#include "parallel/tensor_shard.h"
#include "train/cuda_spec.h"

namespace tb::train {

ReplicaCuda::ReplicaCuda(ops::DeviceContext& dc, const TrainSpec& spec, TopologyCuda& topo,
                         const model::ModelConfig& m, const model::ModelConfig& ml, std::size_t n, int accum) {
  using bf16 = model::CudaDecoder::bf16;
  const int pp = spec.parallel.pp, vp = spec.parallel.vp, cp = spec.parallel.cp, tp = spec.parallel.tp,
            pp_rank = topo.place.pp;
  cudaStream_t st = dc.stream();
  for (int c = 0; c < vp; ++c)
    zero.push_back(parallel::zero_layout(model::dense_layout(ml, stage_layers(m, pp, vp, pp_rank, c)), topo.zero_ranks,
                                         topo.zero_rank));
  for (int c = 0; c < vp; ++c)
    chunks.push_back(std::make_unique<model::CudaDecoder>(dc, ml, spec.memory.recompute, spec.run.deterministic,
                                                          fp8_options(spec), zero[std::size_t(c)].padded_total,
                                                          stage_layers(m, pp, vp, pp_rank, c)));
  for (const auto& chunk : chunks) chunk->set_grad_type(spec.memory.grads);
  grads_shared = shares_grads(spec, pp, cp, accum);
  if (grads_shared) net().share_grads_with_activations();  // frees the separate gradient buffer (prepare() later)
  for (std::size_t c = 0; c < chunks.size() && tp > 1; ++c) {  // over the world (alone) or the tp group (a mix)
    tps.push_back(std::make_unique<TensorParallelCuda>(*topo.tp, st, ml, chunks[c]->dense_layout(),
                                                       chunks[c]->grads_device(), std::int64_t(n) / tp));
    chunks[c]->set_tensor_parallel(tps[c]->ops());
  }
  if (cp > 1) {  // K, V all-gathers and dK, dV reduce-scatters on the compute stream
    cp_comm = topo.cp_nccl ? std::move(topo.cp_nccl) : topo.nccl->split_nccl(topo.place.dp, topo.place.cp);
    model::ContextParallelOps ops;
    ops.size = cp, ops.rank = topo.place.cp;
    comm::NcclCommunicator* comm = cp_comm.get();
    ops.all_gather = [comm](const bf16* local, bf16* all, std::size_t elems) {
      comm->all_gather(local, all, elems, DType::bf16);
    };
    ops.reduce_scatter = [comm](const bf16* all, bf16* local, std::size_t elems) {
      comm->reduce_scatter(all, local, elems, DType::bf16);
    };
    for (const auto& chunk : chunks) chunk->set_context_parallel(ops);
  }
  // A DataParallelCuda runs its communicator on its own stream: the later chunks' get communicators of their own. Over
  // dp x cp (the cp ranks' gradients are partial sums too).
  for (std::size_t c = 0; c < chunks.size() && topo.zero_ranks > 1; ++c) {
    const bool rows = trainable_embedding(c) && pp_rank == 0 && c == 0;  // the embedding gradient exchanged as rows
    comm::NcclCommunicator* chunk_comm = topo.dp;
    if (c > 0) chunk_comm = chunk_dp_comms.emplace_back(topo.dp->split_nccl(0, topo.dp->rank())).get();
    // (the partition is of the gradients: the trainable parameters, the last of the chunk's buffer)
    dps.push_back(std::make_unique<DataParallelCuda>(
        *chunk_comm, zero[c], st, chunks[c]->params_device() + chunks[c]->trainable_begin(), chunks[c]->grads_device(),
        ml, rows ? std::int64_t(n) : 0, vp == 1 ? 2 : 0));
    buckets += int(zero[c].buckets.size());
    if (!tps.empty()) dps[c]->before_reduce = [t = tps[c].get()](cudaStream_t s) { t->order_after_grads(s); };
  }
  // FP8 delayed scaling: the amaxes' max over the ranks holding the same layers: the world's (dp, tp, cp, dp x cp
  // alone), or in a mix the tp group's, then dp x cp's (pipeline alone: none).
  const model::Fp8Options fp8 = fp8_options(spec);
  if (fp8.enabled && fp8.delayed && spec.precision.fp8.reduce_amax && topo.world.size > pp) {
    comm::NcclCommunicator* all = topo.nccl.get();
    for (const auto& chunk : chunks)
      chunk->fp8_reduce_amax = [all, t = this->tp(), d = this->dp()](float* buffer, std::size_t floats) {
        if (all) return all->all_reduce(buffer, buffer, floats, DType::f32, comm::ReduceOp::max);
        if (t) t->all_reduce(buffer, floats, DType::f32, comm::ReduceOp::max);
        if (d) d->all_reduce(buffer, floats, DType::f32, comm::ReduceOp::max);
      };
  }
  final_pass.assign(chunks.size(), 0);
}

bool ReplicaCuda::trainable_embedding(std::size_t c) const {
  const model::DenseLayout& L = chunks[c]->dense_layout();
  return !L.slots.empty() && L.embed >= 0 && !chunks[c]->config().tied_embeddings &&
         L.slots[std::size_t(L.embed)].has_grad();
}

void ReplicaCuda::connect_step(PipelineCuda* pipe, std::size_t tied_chunk,
                               const std::function<void(std::string_view)>& mark) {
  using bf16 = model::CudaDecoder::bf16;
  for (const auto& chunk : chunks) chunk->on_op = mark;
  // The chunks whose last backward of the step is running (one chunk: the last micro-batch's, set by the step; a
  // pipeline's: by its schedule). A chunk holding a tied embedding (or its copy) reduces at the step's end: its dp
  // reduce-scatter must follow the two stages' all-reduce, which the first stage can only join after its schedule.
  if (pipe)
    pipe->before_backward = [this, tied_chunk](int chunk, bool last) {
      final_pass[std::size_t(chunk)] = last && std::size_t(chunk) != tied_chunk;
    };
  // The embedding's rows (chunk 0 of the first stage): over the tp group (the micro-batch's rows), then every dp
  // replica's. Each chunk's gradients: the tp all-reduces first (before_reduce orders the dp reduce-scatters after
  // them); on the last micro-batch only (a pipeline chunk's: during its last backward, overlapping the rest of the
  // schedule; the rest at finish_grads).
  TensorParallelCuda* tpc = tp();
  DataParallelCuda* ddp = dp();
  if (tpc && trainable_embedding(0))
    net().gather_embedding_rows = [tpc](const bf16* dnext, const std::int32_t* tokens, std::int64_t rows) {
      return tpc->embedding_rows(dnext, tokens, rows);
    };
  if (ddp && ddp->sparse_embedding())
    net().gather_embedding_rows = [tpc, ddp](const bf16* dnext, const std::int32_t* tokens, std::int64_t rows) {
      if (!tpc) return ddp->embedding_rows(dnext, tokens, rows);
      const model::CudaDecoder::EmbeddingRows tp_rows = tpc->embedding_rows(dnext, tokens, rows);
      return ddp->embedding_rows(tp_rows.dnext, tp_rows.tokens, tp_rows.rows);
    };
  for (std::size_t c = 0; c < chunks.size() && (tpc || ddp); ++c) {
    TensorParallelCuda* t = tpc ? tps[c].get() : nullptr;
    DataParallelCuda* d = ddp ? dps[c].get() : nullptr;
    if (d) chunks[c]->on_params_needed = [d](std::size_t end) { d->params_needed(end); };
    chunks[c]->on_grads_ready = [this, t, d, c](std::size_t from) {
      if (!final_pass[c]) return;
      if (t) t->grads_ready(from);
      if (d) d->grads_ready(from);
    };
  }
}

}  // namespace tb::train
