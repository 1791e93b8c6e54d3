// project/collective.h: the time of one collective, from bus bandwidth and latency (docs/PROJECTION.md).
// S = bytes of the whole buffer (the gathered output of an all-gather, the input of a reduce-scatter or
// all-reduce), n ranks on a ring, B = bus bandwidth (nccl-tests busbw, GB/s = 1e9 B/s), α = latency per ring step:
//   all-reduce       2(n−1)/n · S/B + 2(n−1)·α
//   all-gather       (n−1)/n · S/B + (n−1)·α
//   reduce-scatter   (n−1)/n · S/B + (n−1)·α
//   send/recv        S/B + α                                  (one hop)
//   all-to-all       (n−1)/n · S/B + α                        (S: what one rank sends, itself included; all pairs at
//                                                              once, so one latency)
// (busbw is defined by nccl-tests so that these are exact: busbw = algbw · 2(n−1)/n or (n−1)/n.)
// Hierarchical, for a group of n = local · k ranks with `local` in each NVLink domain and k domains joined by
// the scale-out network (the two-level ring NCCL builds; one NIC per GPU, so each local rank moves 1/local
// of the data across the network in parallel):
//   reduce-scatter = (local−1)/local · S/B_nvl + (local−1)·α_nvl  +  (k−1)/k · (S/local)/B_net + (k−1)·α_net
//   all-gather     = the same (the mirror image);  all-reduce = reduce-scatter + all-gather (2× each term)
//   (on one level, all-reduce is the ring formula with the all-reduce bus bandwidth)
//   send/recv      = S/B_nvl + α_nvl inside a domain, S/B_net + α_net across
//   all-to-all     = max((local−1)/n · S/B_nvl, (n−local)/n · S/B_net) + α_net   (the parts for the rank's own domain
//                    and for the others leave at once, over NVLink and over its NIC)
// B_net = scale-out line rate per GPU × its achievable fraction; B_nvl per collective as measured.
#pragma once

#include <string>
#include <string_view>

#include "recipe/system.h"

namespace tb::project {

enum class Coll { all_reduce, all_gather, reduce_scatter, send_recv, all_to_all };
std::string_view coll_name(Coll c);

struct LinkLevel {
  double all_reduce_gbps = 0, all_gather_gbps = 0, reduce_scatter_gbps = 0, send_recv_gbps = 0;  // bus bandwidth
  double latency_us = 0;                                                                         // per ring step
  double all_to_all_gbps = 0;                                                                    // bus bandwidth
  double busbw_gbps(Coll c) const;
};

struct Network {
  int domain_gpus = 8;  // GPUs per NVLink domain
  LinkLevel nvlink;
  LinkLevel scaleout;  // per GPU: line rate × achievable fraction, the same for every collective
  std::string description;

  // Every bandwidth of one level times a factor (the sensitivity lines).
  Network scaled(double nvlink_factor, double scaleout_factor) const;
};

// From a system file's [network]; Error{config} naming the file when it has none.
Network network_of(const recipe::SystemRef& s);

// One ring over n ranks on one level.
double ring_time_s(Coll c, double bytes, int n, double busbw_gbps, double latency_us);
// A group of n ranks, `local` of them per NVLink domain (n a multiple of local; local = n: all in one domain).
double group_time_s(Coll c, double bytes, int n, int local, const Network& net);

}  // namespace tb::project
