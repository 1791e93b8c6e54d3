// project/cost_model.h: the work of one transformer layer, and of the head, on the per-GPU shard of a layout,
// and a three-rate cost model of its time, one per precision; the projection's per-GPU layer time on a target shard
// (step_model.h), and the carry of a measured layer time to another shard: t' = t_measured · T(work')/T(work).
// Per micro-batch of b sequences of s tokens, forward + backward, shard of tp (the proxy's: heads A/tp,
// kv heads max(1, G/tp), ffn/tp, vocab ⌈V/tp⌉, d_model h and head width d unchanged; recipe/plan.h):
//   GEMM FLOPs       6·b·s·h·[(A/tp + 2·G/tp)·d + (A/tp)·d + n·ffn/tp]     n = 3 (SwiGLU), 2 (GELU, squared ReLU)
//   attention FLOPs  7·b·s²·(A/tp)·d        causal work: forward 2·b·s²·(A/tp)·d, backward 2.5× the forward
//   memory bytes     2·b·s·[16·h/q + k·ffn/tp + 6·(A/tp + 2·G/tp)·d]       bf16 traffic of the elementwise kernels
//                    (norms and residual adds on the h-wide rows, RoPE on q and k, the activation: k = 8 gated,
//                    5 otherwise)
//     FP8 adds       6·b·s·[x + dy]   the casts of every GEMM input (trainbench, current scaling: amax read 2 B, cast
//                    read 2 B, FP8 copy and its transpose 1 + 1 B per element; docs/TRAINING.md FP8)
//                    x  = 2·h/q + (A/tp)·d + ffn/tp                  the inputs of qkv, fc1 (h-wide), out, fc2
//                    dy = 2·h/q + (A/tp + 2·G/tp)·d + (n−1)·ffn/tp   the output gradients of out, fc2 (h-wide), qkv,
//                    fc1
//   q = tp with sequence parallelism (Megatron, and trainbench's own tensor parallel: the row-local work, and the casts
//   of the h-wide tensors before their FP8 all-gather, run on s/tp rows), else 1 (a proxy runs every row on one GPU)
// Mixture of Experts: a MoE layer is the layer above with ffn = top_k·expert_ffn + shared_ffn (its routed experts on
// the rank's k·T·etp rows at width expert_ffn/etp and its shared experts: the FLOPs of that dense width over tp; the
// proxy runs the same, recipe/moe_proxy.h), plus the router's GEMM 6·b·s·h·E/tp and the dispatch's copies
//   8·b·s·h·(1 + k·etp)/tp bytes   (permute and unpermute of the rank's b·s/tp rows and its k·etp·b·s/tp expert rows,
//                                   forward and backward);
// a layer of a model is the mean over its layers (dense and MoE in the model's proportion; a proxy's fit slope: one
// period of moe_every layers).
// Head (embedding, final norm, LM head, cross-entropy; bf16 in FP8 runs too):
//   GEMM FLOPs 6·b·s·h·⌈V/tp⌉;   memory bytes 16·b·s·⌈V/tp⌉ (fp32 logits, forward and backward) + 16·b·s·h
// Time  T(w) = GEMM/R_gemm + attention/R_attn + bytes/B_mem.  B_mem: the GPU's measured memory rate
// (system [compute] membw_tbps); R_gemm, R_attn: least squares over the measured shards of relative error
// (every `run` record gives one layer time F1), per precision: bf16 fits both (with one shard, R_attn = 0.8·R_gemm:
// cuDNN causal attention forward+backward ~520 TFLOP/s against GEMMs ~650-700 on an H200, bench/RESULTS.md);
// fp8 fits R_gemm alone and keeps bf16's R_attn (attention stays bf16 in FP8 runs) when bf16 shards were measured.
// Parameters per GPU (optimizer and data-parallel traffic):
//   layer h·(A/tp + 2·G/tp)·d + (A/tp)·d·h + n·h·ffn/tp + 2·h;   embedding and LM head ⌈V/tp⌉·h each
//   a MoE layer: dense h·(A/tp + 2·G/tp)·d + (A/tp)·d·h + E·h + n·h·shared_ffn/tp + 2·h (reduced over dp·cp), experts
//   (E/ep)·n·h·expert_ffn/etp (reduced over the expert data-parallel group, tp·cp·dp/(ep·etp) ranks)
#pragma once

#include <span>
#include <vector>

#include "model/config.h"

namespace tb::project {

struct Work {
  double gemm_flops = 0, attn_flops = 0, mem_bytes = 0;
};

struct ShardKernels {
  bool fp8 = false;                // FP8 GEMMs: their inputs are cast
  bool sequence_parallel = false;  // the row-local work on s/tp rows (q = tp above)
  int etp = 0;                     // MoE: expert tensor parallel (0: tp), the rows the dispatch copies
};
// One layer of m, the mean over its layers.
Work layer_work(const model::ModelConfig& m, int tp, int micro_batch, int seq, ShardKernels k = {});
Work head_work(const model::ModelConfig& m, int tp, int micro_batch, int seq);
// m with one period of its MoE layer pattern (moe_every layers, the last MoE; no dense first layers): what a
// proxy's per-layer slope measured (recipe/plan.h). m itself when dense.
model::ModelConfig period_model(const model::ModelConfig& m);

struct LayerParams {
  double dense = 0, expert = 0;  // per GPU, one layer (the mean over the model's layers)
  double total() const { return dense + expert; }
};
LayerParams layer_params(const model::ModelConfig& m, int tp, int ep = 1, int etp = 0);  // etp 0: tp
double embedding_params(const model::ModelConfig& m, int tp);  // one table: the embedding or the LM head

struct Rates {
  double gemm_tflops = 0, attn_tflops = 0, mem_tbps = 0;
  double time_s(const Work& w) const;
  double mem_time_s(const Work& w) const;  // the memory-bound part
};

struct LayerSample {
  Work work;
  double seconds = 0;
};
// R_gemm and R_attn fitted to the samples at the given memory rate (relative least squares); with attn_tflops > 0,
// R_gemm alone at that attention rate. Error{config} without samples.
Rates fit_rates(std::span<const LayerSample> samples, double mem_tbps, double attn_tflops = 0);
// Leave-one-out: each sample predicted by the rates fitted on the others (relative error; none with < 3 samples,
// or < 2 with attn_tflops given).
std::vector<double> leave_one_out_errors(std::span<const LayerSample> samples, double mem_tbps, double attn_tflops = 0);

}  // namespace tb::project
