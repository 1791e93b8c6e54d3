// recipe/plan.h: from a recipe to what `trainbench run` measures, and from those measurements to the full run's
// per-GPU figures. Two modes:
// DISTRIBUTED (RunOptions::ranks > 0: `run --gpus N`, or a job of N ranks under mpirun / srun): the N ranks train the
// whole model (RunPlan::model: the layout's layers and sequence) at the recipe's layout for N GPUs, with its global
// batch and micro-batch; the step is measured end to end, communication and pipeline bubble included.
// PROXY (one device): a recipe whose reference layout spans several GPUs runs as the per-GPU shard of that layout on
// one device, i.e. the model with heads / tp, kv_heads / tp (at least 1), ffn / tp and vocab / tp (Megatron's
// column/row-parallel and vocab-parallel shards), d_model and head_dim unchanged, the full sequence, the layout's
// micro-batch, and few layers: each point of `points` is a short training run with global batch = micro-batch.
// A Mixture-of-Experts layer is a rank of the layout's expert grid (recipe/moe_proxy.h; Megatron-Core's etp × ep ×
// edp regrouping of a stage's tp·cp·dp ranks): its experts / ep experts of width expert_ffn / etp compute the pairs
// an ep group routes to them, on the MoE rows of a tp·cp/etp share of the tokens,
//   ep_proxy = ep,  token_share = tp / etp  (the tp·cp/etp ranks that split a micro-batch's tokens at the MoE layer;
//   the proxy runs every cp chunk and the extrapolation divides by cp),  expert_ffn / etp,  shared_ffn / etp
// without the all-to-all (the projection adds it); and its points are whole periods of the MoE layer pattern
// (dense_first dense layers, then multiples of moe_every), so that the slope F1 is the mean layer of a period.
// From the points (layers L_i; forward+backward time fb_i and optimizer time opt_i per step), least squares:
//   fb(L) = F0 + F1 L,  opt(L) = O0 + O1 L        (F0, O0: embedding, final norm, LM head + loss; F1, O1: a layer)
// and the full run's per-GPU step, communication and pipeline bubble NOT included (the projection adds them):
//   t_mb  = (F0 + F1 L) / (pp cp)                 one micro-batch through the GPU's stage, its 1/cp of the tokens
//   t_opt = (O0 + O1 L) / (pp dp cp)              distributed optimizer: the stage's parameters sharded over dp cp
//           (MoE: O1 L (1 - x) / (pp dp cp) + O1 L x / (pp edp) for the experts' share x of a layer, moe_proxy.h)
//   step  = GA t_mb + t_opt,  GA = global_batch / (micro_batch dp)
//   tokens/s per GPU = global_batch seq / (step gpus)
// L = the layout's layers (a reference proxy's own). FLOPs and TFLOP/s: the run record's FLOPs per token are the
// full model's in each convention (recipe/convention.h; a mixture of experts: the active experts of every layer),
// and tokens/s per GPU the full layout's, so TFLOP/s per GPU = tokens/s per GPU × FLOPs per token counts as the
// references do, whatever the proxy ran. Balanced stages are assumed (F0 spread over the pp stages;
// in the reference the first and last stages carry it, or NeMo counts it as layers). A recipe whose layout is one
// device (tp = pp = cp = dp = 1, e.g. `tiny`) measures the model itself at its own layers and at 1 layer, so the
// fit (and `trainbench project --from`) exists for it too.
// Uncertainty (one standard error; measurement noise only, not the model's own error): the fit is linear in the
// measured times, fb(L) = sum_i c_i(L) fb_i with c_i(L) = 1/n + (L_i - mean L)(L - mean L) / sum_j (L_j - mean L)^2,
// so with se_i the standard error of point i's step (stdev_i / sqrt(n_i), all of it put on fb_i; opt_i is exact):
//   se(fb(L)) = sqrt(sum_i c_i(L)^2 se_i^2),  se(step) = GA se(fb(L)) / (pp cp),
//   se(tokens/s per GPU) = tokens/s per GPU x se(step) / step          (first order)
#pragma once

#include <map>
#include <span>
#include <string>
#include <vector>

#include "model/config.h"
#include "recipe/recipe.h"

namespace tb::recipe {

struct RunOptions {
  int ref_gpus = 0;                          // the reference layout's GPU count; 0: the smallest listed
  std::string precision;                     // "": the recipe's first
  std::string release;                       // "": the recipe's
  std::string gpu_model;                     // "": layouts naming no GPU model (the reference H100 ones)
  std::map<std::string, std::string> sets;   // --set key=value: layers seq micro_batch global_batch tp pp cp vp ep etp
  std::vector<int> points;                   // layer counts to measure; empty: chosen by plan_run
  std::string data;                          // --data: what to train on; "": the recipe's (Recipe::data)
  int ranks = 0;                             // > 0: a distributed run of this many ranks (the layout for that many
                                             // GPUs; ref_gpus, when given, must agree); 0: the one-device proxy
};

struct RunPlan {
  std::string recipe;
  std::string precision;
  Layout layout;                        // the reference run this one stands for, with the --set overrides
  Layout reference;                     // that run's layout as the recipe lists it (gpus 0: listed only with the
                                        // overrides, e.g. 1 GPU of a cp 2 recipe with cp=1)
  model::ModelConfig model;             // the whole model at the run's layers and sequence (what a distributed run
                                        // trains)
  model::ModelConfig shard;             // the per-GPU shard (layers: the full stage count, layout.layers / pp)
  int layers = 0;                       // the run's layers (layout.layers)
  std::string data;                     // what it trains on (train/data.h DataSource names)
  bool distributed = false;             // RunOptions::ranks > 0: the ranks train `model` at `layout`
  bool proxy = false;                   // anything but the reference run itself on the same GPU count
  std::vector<int> points;              // proxy: layer counts to run, ascending (distributed: none)
  double expert_share = 0;              // MoE proxy: the routed experts' share of a layer's parameters (moe_proxy.h)
  int edp = 1;                          //   and the expert data-parallel group they are sharded over
  std::vector<std::string> differences; // what differs from the reference run, one phrase each
};

// The layout of q (layout_for), with the --set overrides applied and validated; an unlisted GPU count that fits
// only with the overrides (1 GPU of a cp 2 recipe with cp=1) is derived from the smallest listed run by the recipe's
// scaling rule. layers and seq filled from the model when the layout leaves them open.
Layout resolve_layout(const Recipe& r, const LayoutQuery& q, const std::map<std::string, std::string>& sets);

// Validates the recipe (runnable, precision listed), resolves the layout and the --set overrides (validated as
// layouts are: Error{config} saying which key), derives the shard and the points.
RunPlan plan_run(const Recipe& r, const RunOptions& opt);

struct PointTiming {
  int layers = 0;
  double fb_s = 0, opt_s = 0;  // per step: forward+backward of one micro-batch; optimizer (norm + AdamW)
  double se_s = 0;             // standard error of the point's step time (stdev / sqrt(steps)); 0: unknown
};

struct Extrapolation {
  double f0 = 0, f1 = 0, o0 = 0, o1 = 0;  // the fits (seconds; per layer for f1, o1)
  double microbatch_s = 0, optimizer_s = 0, step_s = 0;
  int grad_accum = 0;
  double tokens_per_s_per_gpu = 0;
  // One standard error of the figures above, from the points' se_s (see the header comment).
  double microbatch_se_s = 0, step_se_s = 0, tokens_per_s_per_gpu_se = 0;
};
// Needs two points of different layer counts, or one point at the run's own layers (used as it is: F1 = O1 = 0).
Extrapolation extrapolate(const RunPlan& plan, std::span<const PointTiming> points);
// se(fb(L)) of the least-squares line through the points at L layers: sqrt(sum_i c_i(L)^2 se_i^2) (header comment);
// one point: its own se_s.
double fit_standard_error(std::span<const PointTiming> points, double layers);

}  // namespace tb::recipe
