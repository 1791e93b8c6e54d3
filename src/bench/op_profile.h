// bench/op_profile.h: GPU time per op of one eager (not graph-captured) run, from CUDA events recorded between
// ops on one stream:  time(op k) = elapsed(event k-1, event k), summed per op name in order of first appearance.
// The host enqueues far ahead of the GPU during a training step, so each interval is the op's kernels plus the
// GPU-side gaps between them (launch gaps are what graph replay removes; the sum of all intervals against the
// replayed step time shows that overhead). Events are created once and reused across runs.
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <string_view>
#include <vector>

namespace tb::bench {

struct OpTime {
  std::string op;
  double seconds = 0;
  int calls = 0;
};

class OpProfiler {
 public:
  explicit OpProfiler(cudaStream_t stream) : stream_(stream) {}
  ~OpProfiler();
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  void begin();                 // records the starting event; forgets the previous run
  void mark(std::string_view op);  // the op enqueued since the previous mark ends here
  std::vector<OpTime> finish();  // waits for the stream; per-op totals, first-appearance order

 private:
  cudaEvent_t event(std::size_t i);
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
  std::vector<std::string> ops_;  // ops_[k] ends at events_[k + 1]
};

}  // namespace tb::bench
