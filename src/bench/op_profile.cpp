// bench/op_profile.cpp: see op_profile.h.
#include "bench/op_profile.h"

#include <algorithm>

#include "core/error.h"

namespace tb::bench {

OpProfiler::~OpProfiler() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

cudaEvent_t OpProfiler::event(std::size_t i) {
  while (events_.size() <= i) {
    cudaEvent_t e = nullptr;
    TB_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
  }
  return events_[i];
}

void OpProfiler::begin() {
  ops_.clear();
  TB_CHECK(cudaEventRecord(event(0), stream_));
}

void OpProfiler::mark(std::string_view op) {
  ops_.emplace_back(op);
  TB_CHECK(cudaEventRecord(event(ops_.size()), stream_));
}

std::vector<OpTime> OpProfiler::finish() {
  TB_CHECK(cudaStreamSynchronize(stream_));
  std::vector<OpTime> out;
  for (std::size_t k = 0; k < ops_.size(); ++k) {
    float ms = 0;
    TB_CHECK(cudaEventElapsedTime(&ms, events_[k], events_[k + 1]));
    auto it = std::find_if(out.begin(), out.end(), [&](const OpTime& t) { return t.op == ops_[k]; });
    if (it == out.end()) it = out.insert(out.end(), OpTime{ops_[k], 0, 0});
    it->seconds += double(ms) * 1e-3;
    ++it->calls;
  }
  return out;
}

}  // namespace tb::bench
