// train/memory_cuda.cpp: the CUDA trainer's memory needs before anything is allocated, and what would make a run fit
// (train/trainer.h estimate_memory, fit_advice). Per rank: weights bf16 2P + gradients fp32 4T (--grads bf16: 2T;
// data parallel adds the reduced shard 4T / dp) + master 2T (split: the residual halves; f32: 4T) / dp + moments 8T
// (bf16: 4T) / dp + the decoder's activation arena (model/decoder_cuda.h activation_bytes; shared gradients:
// shared_arena_bytes) + FP8 weight copies + workspaces, P the rank's parameters, T its trainable ones (P but with
// LoRA: its adapters).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ops/cuda/context.h"
#include "parallel/tensor_shard.h"
#include "train/cuda_spec.h"
#include "train/embedding_rows_cuda.h"
#include "train/optimizer_cuda.h"
#include "train/pipeline_cuda.h"
#include "train/trainer.h"

namespace tb::train {
namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
}  // namespace

// Pipeline parallel: the largest of the ranks' needs. A rank holds its chunks' parameters (vp chunks when
// interleaved) and, per chunk, a decoder with the activation sets of that chunk's passes in flight (1F1B:
// min(pp - r, micro-batches)), its own scratch and attention workspace; plus the boundary buffers its schedule keeps.
MemoryEstimate estimate_memory(const TrainSpec& spec, const model::ModelConfig& full) {
  const int tp = std::max(1, spec.parallel.tp), pp = std::max(1, spec.parallel.pp),
            vp = pp > 1 ? std::max(1, spec.parallel.vp) : 1;
  const model::ModelConfig m = tp > 1 ? parallel::tp_shard_config(full, tp) : full;  // this rank's shard
  const int cp = std::max(1, spec.parallel.cp),
            seq = full.seq / cp;  // context parallel: this rank's tokens per sequence
  const int dp_ranks = std::max(1, spec.parallel.dp);
  const double dp = dp_ranks * cp;  // ZeRO-1 over dp x cp: master weights, moments and reduced gradients sharded
  const int micro_batches = std::max(1, micro_batches_per_rank(spec, dp_ranks));
  const model::Fp8Options fp8 = fp8_options(spec);
  MemoryEstimate worst;
  for (int r = 0; r < pp; ++r) {
    PipelinePlan plan;
    plan.activation_sets = {1};
    if (pp > 1) plan = plan_pipeline({pp, vp, micro_batches}, r);
    MemoryEstimate e;
    double P = 0, T = 0;
    int stage_layer_count = 0;
    for (int c = 0; c < vp; ++c) {
      const model::LayerRange stage = stage_layers(m, pp, vp, r, c);
      const model::DenseLayout layout = model::dense_layout(m, stage);
      P += double(layout.total);
      T += double(layout.grad_total);
      stage_layer_count += (stage.last < 0 ? m.layers : stage.last) - stage.first;
      e.activations += double(model::CudaDecoder::activation_bytes(m, spec.batch.micro, seq, spec.memory.recompute, fp8,
                                                                   tp, stage, plan.activation_sets[std::size_t(c)]));
    }
    e.weights = 2 * P;
    e.grads = double(dtype_size(spec.memory.grads)) * T + (dp > 1 ? 4 * T / dp : 0.0);
    e.master = OptimizerCuda::master_bytes(spec, T / dp);
    e.moments = OptimizerCuda::moment_bytes(spec, T / dp);
    e.activations += double(plan.buffers) * spec.batch.micro * m.seq * m.d_model * 2.0;
    if (shares_grads(spec, pp, cp, micro_batches))  // the layer blocks mostly inside the gradients
      e.activations = double(model::CudaDecoder::shared_arena_bytes(m, spec.batch.micro, seq, spec.memory.recompute,
                                                                    fp8, tp, spec.memory.grads));
    if (fp8.enabled)
      e.fp8_weights = double(model::CudaDecoder::fp8_weight_bytes(m)) * stage_layer_count / m.layers +
                      (fp8.lm_head && r == pp - 1 ? double(model::CudaDecoder::fp8_lm_head_bytes(m)) : 0.0);
    e.workspaces = double(ops::DeviceContext::kWorkspaceBytes) +
                   vp * attention_workspace_allowance(m, spec.batch.micro, seq, fp8.attention);
    const std::int64_t n = std::int64_t(spec.batch.micro) * seq;  // tokens of a micro-batch on this rank
    const bool rows = !m.tied_embeddings && !m.lora.enabled() && r == 0;  // (LoRA: a frozen embedding, no rows)
    if (rows && dp > 1)  // the embedding gradient's rows from the other replicas
      e.workspaces += double(EmbeddingRowsGather::bytes(m, n, int(dp)));
    if (rows && tp > 1) e.workspaces += double(EmbeddingRowsGather::bytes(m, n / tp, tp));
    if (e.total() > worst.total()) worst = e;
  }
  return worst;
}

std::string fit_advice(const TrainSpec& spec, const model::ModelConfig& m, double free_bytes) {
  const MemoryEstimate e = estimate_memory(spec, m);
  if (e.total() <= free_bytes) return "";
  std::string msg = fmt::format(
      "{} with {} layers, seq {}, micro-batch {}{}, --recompute {} needs about {:.1f} GiB on "
      "the GPU ({}); {:.1f} GiB are free.",
      m.name, m.layers, m.seq, spec.batch.micro,
      spec.parallel.pp > 1 ? fmt::format(", pp {} vp {} (the fullest rank)", spec.parallel.pp, spec.parallel.vp) : "",
      name(spec.memory.recompute), e.total() / kGiB, e.parts_gib(), free_bytes / kGiB);
  std::vector<std::string> knobs;
  auto try_knob = [&](TrainSpec alt, const model::ModelConfig& am, const std::string& what) {
    const double t = estimate_memory(alt, am).total();
    if (t <= free_bytes) knobs.push_back(fmt::format("{} ({:.1f} GiB)", what, t / kGiB));
  };
  for (const model::Recompute rc : {model::Recompute::selective, model::Recompute::full})
    if (spec.memory.recompute != rc) {
      TrainSpec alt = spec;
      alt.memory.recompute = rc;
      try_knob(alt, m, fmt::format("--recompute {}", name(rc)));
    }
  if (spec.batch.micro > 1) {
    TrainSpec alt = spec;
    alt.batch.micro = 1;
    try_knob(alt, m, "--micro-batch 1 (with --global-batch for accumulation)");
  }
  if (spec.optimizer.moments != DType::bf16) {
    TrainSpec alt = spec;
    alt.optimizer.moments = DType::bf16;
    try_knob(alt, m, "--moments bf16");
  }
  for (int layers = m.layers - 1; layers >= std::max(1, spec.parallel.pp * spec.parallel.vp); --layers) {
    model::ModelConfig am = m;
    am.layers = layers;
    if (estimate_memory(spec, am).total() <= free_bytes) {
      knobs.push_back(fmt::format("--layers {} or fewer (a proxy of the model)", layers));
      break;
    }
  }
  msg += knobs.empty() ? " Nothing on one GPU makes it fit: it needs a parallel layout over several GPUs."
                       : " Any of these would fit: " + fmt::format("{}", fmt::join(knobs, "; ")) + ".";
  return msg;
}

}  // namespace tb::train
