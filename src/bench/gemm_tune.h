// bench/gemm_tune.h: GEMM autotuning. The cuBLASLt heuristic offers up to GemmPlan::kCandidates algorithms per
// shape and ranks them by a model, not by measurement; tuning times each candidate (bench/loop.h: warmup of at least
// kTuneSustainMs of GPU time, then 20 timed runs, median) and keeps the fastest. A candidate that fails to run is
// passed over; the heuristic's first choice stays when none is faster.
#pragma once

#include <functional>

#include "ops/cuda/context.h"

namespace tb::bench {

inline constexpr double kTuneSustainMs = 200;  // a candidate's warmup: the clocks settle under its load

// Times plan's candidates with `body` (which enqueues one run of the plan on dc's stream) and selects the fastest.
void tune_plan(ops::DeviceContext& dc, ops::GemmPlan& plan, const std::function<void(int iter)>& body);

// Tunes every plan dc holds on random operands (uniform [-1, 1], scratch buffers sized for the largest plan,
// allocated for the call and freed). For a model after its first step planned its GEMMs. Returns how many plans
// changed algorithm.
int tune_all_plans(ops::DeviceContext& dc);

}  // namespace tb::bench
