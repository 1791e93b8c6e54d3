// project/step_model.h: one training step of a recipe's layout on N GPUs of a target system, from measured
// per-GPU proxies (project/measurement.h) and a modelled network (project/collective.h). docs/PROJECTION.md.
// Per micro-batch on a pipeline rank holding n_k layers (pipeline.h; the last rank also the head):
//   layer_s = T_p(layer') · h(layer') / e     (layer time "fit", the default)
//     T_p: the cost model of the precision p (cost_model.h), its rates fitted to every measured proxy of p; layer' =
//     the target shard's work with sequence parallelism (row-local work on s/tp rows; the proxy ran every row)
//   or layer_s = F1 · T_p(layer')/T_p(layer) · h(layer') / e   (layer time "measured": the anchor's own layer time)
//   head_s = F0 · T(head')/T(head) · h(head') / e
//     F1, F0: the anchor measurement (the same recipe, else the same model, else the same family); h = the hardware
//     factor, target time / measuring-GPU time = (1−μ)·G_src/G_tgt + μ·B_src/B_tgt with μ the memory-bound share
//     and G, B the GEMM and memory rates of [compute]; e = [projection] reference_efficiency
//   compute_k = (n_k·layer_s + [last] head_s) / cp
//   TP (tp > 1, sequence parallel): per layer 6 all-gathers + 4 reduce-scatters of A = b·(s/cp)·h·2 bytes over
//     tp (forward AG, RS before/after attention and MLP; backward the transposes and the re-gathered input
//     for the weight gradients), +2 AG +2 RS for embedding and LM head; window = the rank's GEMM time. In FP8 the
//     all-gathers move the FP8 tensors (A/2: Transformer Engine casts on the s/tp rows, then gathers), the
//     reduce-scatters bf16 GEMM outputs
//   CP (cp > 1): per layer 3(cp−1) sends of the local K,V (2·b·(s/cp)·kv_heads/tp·d·2 bytes; ring attention,
//     forward KV, backward KV and dKV); window = the rank's attention time; NVLink when tp·cp ≤ domain
//   EP (MoE layers, moe_comm.h): per layer 4 all-to-alls over ep of T·k·h·2 bytes per rank, T = b·s/(tp·cp), and
//     with etp > 1 2 all-gathers + 2 reduce-scatters of etp times that over etp, times the MoE layers' share; exposed
//   rank_k = compute_k + exposed(TP) + exposed(CP) + EP;  t_mb = max_k rank_k (the slowest rank sets the pace)
// Per step (GA = global_batch / (micro_batch·dp) micro-batches per pipeline):
//   compute + exposed TP/CP = GA · t_mb;   bubble = (pp−1)/vp · t_mb
//   PP send/recv: 2·vp sends of A/tp (sequence-parallel scatter) per micro-batch, exposed at the overlap cost,
//     plus the 2(pp−1) sends of the pipeline's fill and drain; across nodes when tp·cp·dp ≥ domain
//   DP (distributed optimizer, Megatron ranks ordered tp, cp, dp, pp): bf16 gradient reduce-scatter and parameter
//     all-gather of the rank's parameters over dp·cp ranks (FP8 parameters in FP8 runs: NeMo's fp8_params),
//     hierarchical (domain/tp of them per NVLink domain), in buckets of max(40M, 1M·dp·cp) parameters (each pays the
//     latency); a MoE model's routed experts apart, over the expert data-parallel group (edp = tp·cp·dp/(ep·etp)
//     ranks, ep·etp apart) in their own buckets; the reduce-scatter overlaps the last micro-batch's backward,
//     ⅔ t_mb·(1 + r/vp), the all-gather the
//     first forward, ⅓ t_mb·(1 + r/vp), where r = the pipeline's warmup/cooldown chunk passes (pipeline.h): the chunks
//     finish their gradients, and need their parameters, one after another; the last bucket's reduce-scatter and
//     the first bucket's all-gather are always exposed
//   optimizer = (O0' + O1'·L)/(pp·dp·cp) · B_src/B_tgt / e   (O scaled by the parameters per GPU; memory-bound;
//     a MoE model's experts sharded over edp instead of dp·cp)
//   stragglers = σ·√(T/1 s) · E[max of dp standard normals], T = the step without them: each data-parallel replica's
//     step deviates from the modelled one by noise that accumulates over the step (independent small delays:
//     clocks, power and thermal limits, host interrupts, network), of standard deviation σ over one second of step
//     (σ = [projection] straggler_sigma_ms) and σ·√T over T; the ranks of one replica (TP, CP, PP) synchronize every
//     layer or micro-batch and move together, the dp replicas meet once per step at the gradient reduce-scatter
//     and parameter all-gather, where all wait for the slowest. E[max] by Blom's Φ⁻¹((n − 0.375)/(n + 0.25)): 0 at
//     n = 1, 1.05 at 4, 1.77 at 16, 2.34 at 64, 3.23 at 1024, ~√(2 ln n) for large n
//   step = GA·t_mb + bubble + exposed PP + exposed DP + optimizer + stragglers
//   exposed(t, window) = max(0, t − window) + c·min(t, window)     (overlap.h; c = [projection] overlap_cost)
// tokens/s per GPU = global_batch·seq / (step·gpus); TFLOP/s per GPU in a FLOP convention (recipe/convention.h);
// MFU against the target's dense peak of the precision.
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "project/collective.h"
#include "project/cost_model.h"
#include "project/measurement.h"
#include "project/pipeline.h"
#include "recipe/convention.h"
#include "recipe/recipe.h"
#include "recipe/system.h"

namespace tb::project {

struct Calibration {
  double reference_efficiency = 1.0;  // reference software's per-GPU compute rate / trainbench's (same GPU)
  double overlap_cost = 0.0;          // overlap.h
  double straggler_sigma_s = 0.0;     // a replica's step-time noise over one second of step, standard deviation
};

// E[max of n independent standard normal variables] (Blom's approximation; within 0.5% of the exact value for
// n >= 16, 4.5% at n = 2; 0 at n = 1), and the straggler delay of a step of step_s seconds (without it) whose
// `replicas` data-parallel replicas wait for the slowest: σ·√step_s · E[max of replicas].
double expected_max_normal(int n);
inline double straggler_delay_s(double sigma_s, double step_s, int replicas) {
  return sigma_s * std::sqrt(step_s) * expected_max_normal(replicas);
}

// One precision's cost model on the measuring GPU: the measured proxies' layers and the rates fitted to them.
struct CostModel {
  std::vector<LayerSample> samples;
  std::vector<std::string> where;  // the record of each sample (file:line)
  double attn_given_tflops = 0;    // fp8: bf16's attention rate, which its fit keeps (0: fitted too)
  Rates rates;
};

// Where the per-GPU layer time comes from: the precision's cost model (its rates fitted to every measured shard),
// or the anchor measurement's own layer time carried to the target shard by the cost model.
enum class LayerTime { fit, measured };

// Whose multi-GPU step is modelled: the reference software's (Megatron-Core / NeMo with Transformer Engine, the terms
// above) or trainbench's own (`trainbench train --gpus N`, docs/PARALLEL.md): per layer 4 all-gathers and 4
// reduce-scatters of the activations and none for the replicated embedding and LM head, FP8 gathering bf16; the TP,
// CP and PP exchanges on the compute stream (not overlapped); fp32 gradient reduce-scatter, bf16 parameter
// all-gather, overlapped as above. train_check.h checks it against trainbench's own 2-GPU steps.
enum class Software { reference, trainbench };

struct Context {
  const std::vector<recipe::Recipe>* recipes = nullptr;
  std::vector<Measurement> runs;                       // the measured proxies
  std::map<std::string, CostModel, std::less<>> cost;  // by precision
  LayerTime layer_time = LayerTime::fit;
  Software software = Software::reference;
  std::string source_name, target_name;  // the measuring GPU's and the target's system names
  double source_gemm_tflops = 0, source_membw_tbps = 0, target_gemm_tflops = 0, target_membw_tbps = 0;
  const recipe::SystemRef *source = nullptr, *target = nullptr;
  Network net;
  std::string net_source;  // where the NVLink bandwidths come from
  Calibration cal;
  std::string cal_source;

  const CostModel& cost_model(std::string_view precision) const;  // Error{config} when none of that precision
};

// Fits the rates of every precision's cost model to its samples; fp8 keeps bf16's attention rate when there is a
// bf16 model (cost_model.h).
void fit_cost_models(Context& ctx);
// The work of a measured proxy's layer (every row on one GPU) and of a target layout's (sequence parallel).
Work proxy_layer_work(const Measurement& m, const Context& ctx);

// The measuring GPU's system (by the records' GPU name), the target's network (NVLink bandwidths measured in
// `in` override the file's), the cost model fitted on the measured layers, the target's calibration.
Context make_context(const std::vector<recipe::Recipe>& recipes, const Inputs& in,
                     const std::vector<recipe::SystemRef>& systems, const recipe::SystemRef& target);

enum class AnchorKind { same_shard, same_recipe, same_model, same_family, other };
std::string_view anchor_kind_name(AnchorKind k);

// The measurement that carries the per-GPU compute to this recipe's layout (null when none of the precision).
const Measurement* choose_anchor(const recipe::Recipe& r, std::string_view precision, const recipe::Layout& l,
                                 const Context& ctx, AnchorKind* kind = nullptr);

struct Projection {
  std::string recipe, precision;
  recipe::Layout layout;
  int grad_accum = 0;
  const Measurement* anchor = nullptr;
  AnchorKind anchor_kind = AnchorKind::other;
  double layer_scale = 1, head_scale = 1;        // cost model T(target shard) / T(measured shard)
  double layer_fit_s = 0, layer_measured_s = 0;  // the target shard's layer on the measuring GPU: cost model, anchor
  double hardware_factor = 1;                    // layer time on the target GPU / on the measuring GPU
  double layer_s = 0, head_s = 0;                // target GPU, reference software, one micro-batch, full sequence
  StageLayers stages;
  // Per step, seconds.
  double microbatch_s = 0;  // the slowest rank's micro-batch (compute + exposed TP and CP)
  double compute_s = 0, bubble_s = 0;
  double tp_comm_s = 0, tp_exposed_s = 0, cp_comm_s = 0, cp_exposed_s = 0, pp_comm_s = 0, pp_exposed_s = 0;
  double ep_comm_s = 0, ep_exposed_s = 0;  // MoE: the expert-parallel all-to-alls (and etp collectives), moe_comm.h
  int ep_per_domain = 0;                   //   the ep group's ranks per NVLink domain
  double dp_reduce_scatter_s = 0, dp_all_gather_s = 0, dp_exposed_s = 0;
  double optimizer_s = 0, straggler_s = 0, step_s = 0;
  double tokens_per_s_per_gpu = 0, tflops_per_gpu = 0, mfu = 0;
  recipe::Convention convention = recipe::Convention::full;
};

// Error{config} when no measurement of the precision exists or the layout does not fit the model.
Projection project(const recipe::Recipe& r, const recipe::Layout& l, std::string_view precision, const Context& ctx,
                   recipe::Convention convention);

}  // namespace tb::project
