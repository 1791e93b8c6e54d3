// bench/loop.h: the one timing loop. Every measured number in trainbench comes through here.
//
//   warmup: `warmup` untimed iterations (and at least `min_warmup_ms` of them, so clocks settle);
//   timed:  `iters` iterations, each between its own pair of CUDA events, so the result is a
//           distribution (median/p10/p90), not one average;
//   hold:   iterations are queued behind a spin kernel that waits on a host flag, then released
//           together, so CPU launch overhead stays out of the timing (nvbandwidth's idiom);
//   flush_l2: before each timed iteration, an L2-sized buffer is overwritten (outside the events);
//           for rotating buffers, body(iter) picks its inputs from `iter`;
//   telemetry: with spec.telemetry, two marks bracket the timed iterations, so power and energy describe
//           the measured work, not the setup or the warmup.
// Several devices: body(iter) enqueues on every device's stream; an iteration's time is the max over
// devices of its event interval (nccl-tests' per-iteration "max across GPUs").
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <span>
#include <vector>

#include "bench/telemetry.h"
#include "core/stats.h"

namespace tb::bench {

struct LoopSpec {
  int warmup = 5;
  int iters = 20;
  double min_warmup_ms = 0;  // keep warming up until this much GPU time has passed
  bool hold = true;          // queue timed iterations behind a spin kernel
  bool flush_l2 = false;     // overwrite an L2-sized buffer before each timed iteration
  Telemetry* telemetry = nullptr;  // when available: marks taken just before and after the timed iterations
};

struct Timing {
  std::vector<double> ms;  // one per timed iteration
  Summary summary() const { return summarize(ms); }
  bool marked = false;     // telemetry_from/to bracket the timed iterations (warmup, setup excluded)
  Telemetry::Mark telemetry_from = 0, telemetry_to = 0;
};

Timing time_stream(const LoopSpec& spec, int device, cudaStream_t stream, const std::function<void(int iter)>& body);
Timing time_streams(const LoopSpec& spec, std::span<const int> devices, std::span<const cudaStream_t> streams,
                    const std::function<void(int iter)>& body);
// A lab's quick number: the median ms of `iters` timed runs of body on one stream after `warmup` (time_stream).
double median_ms(int device, cudaStream_t stream, const std::function<void()>& body, int warmup = 3, int iters = 10);

}  // namespace tb::bench
