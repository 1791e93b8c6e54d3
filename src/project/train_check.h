// project/train_check.h: the model against real multi-GPU steps (`trainbench train --gpus N`, measurement.h TrainRun):
// for each, the step of that very layout as trainbench itself runs it, modelled on the measuring GPU
// (step_model.h Software::trainbench; reference efficiency 1: trainbench's own kernels; the network and compute of
// the measuring GPU's system file, NVLink bandwidths from micro.nccl records in --from when there are some; the
// per-GPU compute from the cost model fitted to the `run` proxies of --from), next to the measured step:
//   error = modelled / measured step − 1            (tokens/s per GPU: 1/(1 + error) − 1)
//   communication = the op profile's collectives (names with all-gather, reduce-scatter, all-reduce, send/recv),
//     the pipeline's waits included, against the model's exposed TP + CP + PP + DP communication + bubble
// A record whose model preset no recipe starts from, or whose precision no proxy measured, is listed as skipped; the
// model has no activation recompute (a run with it says so).
#pragma once

#include <string>
#include <vector>

#include "project/step_model.h"

namespace tb::project {

struct TrainCheck {
  const TrainRun* run = nullptr;
  std::string recipe;  // the recipe whose preset the run trained
  Projection p;        // Software::trainbench on the measuring GPU
  double comm_measured_s = 0, comm_modelled_s = 0;
  bool profiled = false;  // the record has an op profile
  double error = 0;
  std::string skipped;  // why there is no check
};

// `source`: the context with the measuring GPU's system as the target (make_context(..., source system)).
std::vector<TrainCheck> check_trains(const std::vector<TrainRun>& runs, const Context& source);
std::string render_train_checks(const std::vector<TrainCheck>& checks);

}  // namespace tb::project
