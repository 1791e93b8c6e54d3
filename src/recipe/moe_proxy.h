// recipe/moe_proxy.h: the one-device proxy of a Mixture-of-Experts layout's rank (the MoE part of recipe/plan.h).
// Megatron-Core's expert grid regroups the tp·cp·dp ranks of a pipeline stage as etp × ep × edp (etp innermost, etp =
// expert tensor parallel, default tp). A rank enters a MoE layer with its sequence-parallel share of the micro-batch,
// T = mb·seq/(tp·cp) tokens; the all-to-all over its ep group brings it the T·k (token, expert) pairs the group routes
// to its experts/ep experts (k = top_k, balanced routing); with etp > 1 the etp ranks of an expert-tensor group
// all-gather their pairs and each computes expert_ffn/etp of every local expert on the etp·T·k rows. Per rank:
//   experts/ep experts of width expert_ffn/etp on etp·T·k = mb·seq·k/(tp·cp/etp) rows
//   shared experts (tensor parallel over tp, on the tp group's gathered tokens): mb·seq/cp rows, width shared_ffn/tp
// The proxy runs the whole sequence and divides its micro-batch time by cp (recipe/plan.h), so its MoE MLP runs on the
// first mb·seq/token_share rows with
//   token_share = tp/etp      (the tp·cp/etp ranks that split a micro-batch's tokens at the MoE layer, over cp)
//   ep_proxy    = ep          (experts/ep local experts; pair (t, e) computed on local expert e mod (experts/ep))
//   expert_ffn  = expert_ffn/etp,   shared_ffn = shared_ffn/etp
// which gives, after the division by cp, the rank's rows and widths per routed expert, and the rank's shared-expert
// FLOPs: mb·seq·etp/tp rows × shared_ffn/etp, over cp, = mb·seq/cp rows × shared_ffn/tp. Not run: the all-to-all and
// the etp all-gather (trainbench project adds them); the router runs on etp × the rank's rows (E·d per token,
// negligible). Refused before any work: experts not divisible by ep, etp not dividing tp (the proxy's token_share),
// expert_ffn or shared_ffn not divisible by etp.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"
#include "recipe/recipe.h"

namespace tb::recipe {

struct MoeProxy {
  int ep = 1, etp = 1;
  int token_share = 1;                   // tp / etp
  int local_experts = 0;                 // experts / ep
  int expert_ffn = 0, shared_ffn = 0;    // the widths the proxy runs (/ etp)
};

// The proxy's MoE fields for model m at layout l; Error{config} "<where>: ..." when the layout cannot be proxied.
MoeProxy moe_proxy(const model::ModelConfig& m, const Layout& l);
// Sets the shard's MoE fields (ep_proxy, token_share, expert_ffn, shared_ffn).
void apply_moe_proxy(const MoeProxy& p, model::ModelConfig& shard);
// The routed experts' share of a proxy shard's parameters per layer, over a period of the layer pattern (moe_every
// layers: one MoE, the others dense): what the optimizer shards over the expert data-parallel group
//   edp = tp·cp·dp / (ep·etp)   instead of dp·cp.
double expert_param_share(const model::ModelConfig& shard);
// What the proxy's MoE layers run instead of the rank's, one phrase each (RunPlan::differences).
std::vector<std::string> moe_proxy_differences(const model::ModelConfig& m, const Layout& l, const MoeProxy& p);

// A layer count the proxy can measure and extrapolate from: dense_first dense layers, then whole periods of
// moe_every layers (each with its one MoE layer), at least one. The smallest such count >= layers.
int moe_point(const model::ModelConfig& m, int layers);
bool is_moe_point(const model::ModelConfig& m, int layers);

}  // namespace tb::recipe
