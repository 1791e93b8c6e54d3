// project/cost_model.h: the work of one transformer layer, and of the head, on the per-GPU shard of a layout,
// and a three-rate cost model of its time; used to carry a measured layer time from the measured shard to
// another (other tp, micro-batch, sequence, model): t' = t_measured · T(work') / T(work_measured).
// Per micro-batch of b sequences of s tokens, forward + backward, shard of tp (the proxy's: heads A/tp,
// kv heads max(1, G/tp), ffn/tp, vocab ⌈V/tp⌉, d_model h and head width d unchanged; recipe/plan.h):
//   GEMM FLOPs       6·b·s·h·[(A/tp + 2·G/tp)·d + (A/tp)·d + n·ffn/tp]     n = 3 (SwiGLU), 2 (GELU, squared ReLU)
//   attention FLOPs  7·b·s²·(A/tp)·d        causal work: forward 2·b·s²·(A/tp)·d, backward 2.5× the forward
//   memory bytes     2·b·s·[16·h + k·ffn/tp + 6·(A/tp + 2·G/tp)·d]         bf16 traffic of the elementwise kernels
//                    (norms, residual adds, RoPE on q and k, the activation: k = 8 gated, 5 otherwise)
// Head (embedding, final norm, LM head, cross-entropy):
//   GEMM FLOPs 6·b·s·h·⌈V/tp⌉;   memory bytes 16·b·s·⌈V/tp⌉ (fp32 logits, forward and backward) + 16·b·s·h
// Time  T(w) = GEMM/R_gemm + attention/R_attn + bytes/B_mem.  B_mem: the GPU's measured memory rate
// (system [compute] membw_tbps); R_gemm, R_attn: least squares over the measured shards of relative error
// (every `run` record gives one layer time F1); with one shard, R_attn = 0.8·R_gemm (cuDNN causal attention
// forward+backward ~520 TFLOP/s against GEMMs ~650-700 on an H200, ../shared/GPU-NOTES.md) and one scale.
// Parameters per GPU (optimizer and data-parallel traffic):
//   layer h·(A/tp + 2·G/tp)·d + (A/tp)·d·h + n·h·ffn/tp + 2·h;   embedding and LM head ⌈V/tp⌉·h each
#pragma once

#include <span>
#include <vector>

#include "model/config.h"

namespace tb::project {

struct Work {
  double gemm_flops = 0, attn_flops = 0, mem_bytes = 0;
};

Work layer_work(const model::ModelConfig& m, int tp, int micro_batch, int seq);
Work head_work(const model::ModelConfig& m, int tp, int micro_batch, int seq);

double layer_params(const model::ModelConfig& m, int tp);
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
// R_gemm and R_attn fitted to the samples at the given memory rate (relative least squares); Error{config}
// without samples.
Rates fit_rates(std::span<const LayerSample> samples, double mem_tbps);
// Leave-one-out: each sample predicted by the rates fitted on the others (relative error; 0 with < 3 samples).
std::vector<double> leave_one_out_errors(std::span<const LayerSample> samples, double mem_tbps);

}  // namespace tb::project
