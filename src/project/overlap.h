// project/overlap.h: what an overlapped communication costs the step. A collective of t seconds issued
// alongside w seconds of compute that can hide it (TP all-gathers/reduce-scatters split into chunks beside
// their GEMMs, context-parallel KV exchange beside attention, the pipeline's send/recv beside the steady
// state, the data-parallel reduce-scatter beside the last micro-batch's backward, the parameter all-gather
// beside the first forward) costs
//   exposed = max(0, t − w) + c · min(t, w)
// c = the overlap cost ([projection] overlap_cost): the fraction of the hidden part that still slows the
// step, because the communication kernels take SMs and memory bandwidth from the compute (a calibration
// constant, docs/PROJECTION.md). c = 0: perfect overlap; c = 1: no overlap at all.
#pragma once

#include <algorithm>

namespace tb::project {

inline double exposed_s(double comm_s, double window_s, double overlap_cost) {
  const double w = std::max(0.0, window_s);
  return std::max(0.0, comm_s - w) + overlap_cost * std::min(comm_s, w);
}

}  // namespace tb::project
