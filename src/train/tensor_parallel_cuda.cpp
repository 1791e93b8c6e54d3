// train/tensor_parallel_cuda.cpp: tensor-parallel communication for the CUDA trainer (tensor_parallel_cuda.h).
#include "train/tensor_parallel_cuda.h"

#include <algorithm>

#include "core/error.h"
#include "parallel/tensor_shard.h"

namespace tb::train {

TensorParallelCuda::TensorParallelCuda(comm::Communicator& tp_group, cudaStream_t compute,
                                       const model::ModelConfig& local_cfg, const model::DenseLayout& local,
                                       float* grads, std::int64_t rows_per_rank)
    : st_(compute), gs_(compute), as_(compute), grads_(grads) {
  auto* nccl = dynamic_cast<comm::NcclCommunicator*>(&tp_group);
  TB_REQUIRE(nccl != nullptr, "tensor parallel on the CUDA backend needs an NCCL communicator");
  act_ = nccl->split_nccl(0, nccl->rank());
  act_->set_stream(st_);
  grads_comm_ = nccl->split_nccl(0, nccl->rank());
  grads_comm_->set_stream(gs_.get());
  act_async_ = nccl->split_nccl(0, nccl->rank());
  act_async_->set_stream(as_.get());
  // Untied, the embedding and learned positions take their gradients from every rank's rows (embedding_rows): no sum.
  auto from_rows = [&](const model::Slot& s) {
    return !local_cfg.tied_embeddings &&
           (s.tags.role == model::ParamRole::embedding || s.tags.role == model::ParamRole::position);
  };
  for (const model::Slot& s : local.slots)
    if (parallel::tp_replicated(s) && !from_rows(s) && s.has_grad()) replicated_.push_back(&s);
  if (!local_cfg.tied_embeddings && local.embed >= 0 &&  // (a pipeline stage without the embedding needs none, nor a
      local.slots[std::size_t(local.embed)].has_grad())  // frozen one)
    rows_ = std::make_unique<EmbeddingRowsGather>(act_->device(), local_cfg, rows_per_rank, act_->size());
  next_ = replicated_.size();
  TB_CHECK(cudaEventCreateWithFlags(&grads_done_, cudaEventDisableTiming));
}

TensorParallelCuda::~TensorParallelCuda() { cudaEventDestroy(grads_done_); }

void TensorParallelCuda::order_after_grads(cudaStream_t s) {
  gs_.fork();  // (a graph capture needs the side stream joined to the captured work before its event is recorded)
  TB_CHECK(cudaEventRecord(grads_done_, gs_.get()));
  TB_CHECK(cudaStreamWaitEvent(s, grads_done_, 0));
}

model::TensorParallelOps TensorParallelCuda::ops() {
  model::TensorParallelOps o;
  o.size = act_->size();
  o.rank = act_->rank();
  o.all_gather = [this](__nv_bfloat16* full, std::size_t local) {
    act_->all_gather(full + std::size_t(act_->rank()) * local, full, local, DType::bf16);
  };
  o.reduce_scatter = [this](const __nv_bfloat16* full, __nv_bfloat16* out, std::size_t local) {
    act_->reduce_scatter(full, out, local, DType::bf16);
  };
  o.reduce_scatter_async = [this](const __nv_bfloat16* full, __nv_bfloat16* out, std::size_t local) {
    as_.fork();
    act_async_->reduce_scatter(full, out, local, DType::bf16);
  };
  o.all_gather_async = [this](__nv_bfloat16* full, std::size_t local) {
    as_.fork();
    act_async_->all_gather(full + std::size_t(act_async_->rank()) * local, full, local, DType::bf16);
  };
  if (act_->size() == 2)
    o.exchange_async = [this](const __nv_bfloat16* send, __nv_bfloat16* recv, std::size_t local) {
      as_.fork();
      const int peer = 1 - act_async_->rank();
      const comm::P2P ops[] = {{comm::P2P::Kind::send, const_cast<__nv_bfloat16*>(send), local, peer},
                               {comm::P2P::Kind::recv, recv, local, peer}};
      act_async_->exchange(ops, DType::bf16);
    };
  o.wait_async = [this] { as_.join(); };
  return o;
}

void TensorParallelCuda::grads_ready(std::size_t from) {
  bool forked = false;
  while (next_ > 0 && replicated_[next_ - 1]->grad_offset >= from) {
    const model::Slot& s = *replicated_[--next_];
    if (!forked) {
      gs_.fork();
      forked = true;
    }
    const bool split = std::any_of(split_.begin(), split_.end(), [&](const auto& p) { return p.first == s.offset; });
    float* g = grads_ + s.grad_offset;
    if (split) {  // only this rank's part is read (its optimizer and its share of the norm)
      const std::size_t part = s.size / std::size_t(act_->size());
      grads_comm_->reduce_scatter(g, g + std::size_t(rank()) * part, part, DType::f32);
    } else {
      grads_comm_->all_reduce(g, g, s.size, DType::f32);
    }
  }
}

model::CudaDecoder::EmbeddingRows TensorParallelCuda::embedding_rows(const __nv_bfloat16* dnext,
                                                                     const std::int32_t* tokens, std::int64_t rows) {
  return rows_->gather(*act_, dnext, tokens, rows);
}

void TensorParallelCuda::finish_grads() {
  grads_ready(0);
  finish_step();
}

void TensorParallelCuda::gather_parts(__nv_bfloat16* params,
                                      const std::vector<std::pair<std::size_t, std::size_t>>& slots) {
  gs_.fork();
  for (const auto& [offset, elems] : slots) {
    const std::size_t part = elems / std::size_t(act_->size());
    grads_comm_->all_gather(params + offset + std::size_t(rank()) * part, params + offset, part, DType::bf16);
  }
}

void TensorParallelCuda::finish_step() { gs_.join(); }

}  // namespace tb::train
