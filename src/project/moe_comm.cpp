// project/moe_comm.cpp: see moe_comm.h.
#include "project/moe_comm.h"

#include <algorithm>
#include <numeric>

namespace tb::project {

ExpertParallelComm expert_parallel_comm(const model::ModelConfig& m, const recipe::Layout& l, const Network& net) {
  ExpertParallelComm c;
  if (!m.moe.enabled()) return c;
  const int ep = l.ep, etp = l.expert_tp(), domain = net.domain_gpus;
  const double tokens = double(l.micro_batch) * l.seq / (double(l.tp) * l.cp);
  const double bytes = tokens * m.moe.top_k * m.d_model * 2;
  // The ep group's ranks per domain: all of them when its ep·etp consecutive ranks fit in one; else those etp apart
  // within a domain.
  c.ep_local = ep * etp <= domain ? ep : std::gcd(ep, std::max(1, domain / etp));
  if (ep > 1) c.all_to_all_s = group_time_s(Coll::all_to_all, bytes, ep, c.ep_local, net);
  if (etp > 1) {
    const int local = std::gcd(etp, domain);
    c.etp_s = 2 * group_time_s(Coll::all_gather, etp * bytes, etp, local, net) +
              2 * group_time_s(Coll::reduce_scatter, etp * bytes, etp, local, net);
  }
  c.layer_s = double(m.moe_layers()) / m.layers * (4 * c.all_to_all_s + c.etp_s);
  return c;
}

}  // namespace tb::project
