// project/moe_comm.h: the expert-parallel communication of a Mixture-of-Experts layer on one rank, per micro-batch
// (Megatron-Core's all-to-all token dispatcher; its expert grid regroups a stage's tp·cp·dp ranks as etp × ep × edp,
// etp innermost, so an ep group is ep ranks etp apart and spans ep·etp consecutive ranks):
//   T = mb·seq/(tp·cp)          the rank's tokens at the MoE layer (sequence parallel)
//   A = T·k·h·2 bytes           what the rank sends in one all-to-all (its T·k pairs, bf16), (ep−1)/ep of it to others
//   all-to-alls                 4 per MoE layer: dispatch and combine, forward and backward, over the ep group
//                               (collective.h: the own domain's share over NVLink, the rest at the NIC's bandwidth)
//   etp > 1                     2 all-gathers + 2 reduce-scatters of etp·A over the etp group (forward: the dispatch
//                               gathers the group's pairs, the combine reduce-scatters the partial outputs; backward
//                               the transposes)
//   per layer = (MoE layers / layers) · (4·all-to-all + etp collectives)
// Exposed in full: the dispatcher exchanges between the router and the experts, and the experts between the two
// exchanges, on the compute stream (NeMo 24.09-25.04), so there is no independent compute to hide them behind.
#pragma once

#include "model/config.h"
#include "project/collective.h"
#include "recipe/recipe.h"

namespace tb::project {

struct ExpertParallelComm {
  double all_to_all_s = 0;  // one all-to-all over the ep group
  double etp_s = 0;         // the etp all-gathers and reduce-scatters of one MoE layer (4 of them)
  double layer_s = 0;       // per layer of the model (the mean over its layers), per micro-batch
  int ep_local = 0;         // ep ranks per NVLink domain
};

// Zero for a dense model or ep = etp = 1.
ExpertParallelComm expert_parallel_comm(const model::ModelConfig& m, const recipe::Layout& l, const Network& net);

}  // namespace tb::project
