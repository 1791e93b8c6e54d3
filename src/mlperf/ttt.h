// mlperf/ttt.h: time to train projected from a throughput, for `trainbench project --ttt` and the docs:
//   S     = samples to reach the target at global batch G: the reference convergence point nearest G (RCP mean,
//           Benchmark::convergence_at), rounded up to a whole number of evaluation intervals E = ceil(384 / G)·G
//           (the run stops only at an evaluation)
//   evals = S / E - eval_skipped(G)   (evaluations run; LoRA's first floor(0.125·G + 2) are skipped)
//   t     = S / X  +  evals · eval_samples / (3 · X)      (X: training samples/s at N GPUs; an evaluation sample is
//           a forward pass, a third of a training sample's forward + backward)
//   TTT   = t / 60 minutes (init, before run_start, not counted)
#pragma once

#include <optional>

#include "mlperf/benchmark.h"

namespace tb::mlperf {

struct TttProjection {
  ConvergencePoint point;  // the RCP used
  double samples = 0;      // S
  int evals = 0;
  double train_s = 0, eval_s = 0;
  double minutes = 0;
};

// nullopt when the benchmark has no convergence point; Error{config} for a throughput or batch <= 0.
std::optional<TttProjection> project_ttt(const Benchmark& b, int global_batch, double samples_per_s);

}  // namespace tb::mlperf
