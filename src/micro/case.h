// micro/case.h: one measured case, the same way in every suite: telemetry of the timed iterations (or
// of the whole case when it timed nothing with loop_spec()), a tb::Error becomes an error record (the
// sweep goes on), a fatal one is recorded and rethrown (the CUDA context is gone).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "bench/loop.h"
#include "micro/suite.h"

namespace tb::micro {

// measure(record) fills record.data (and may set status) and returns the human line.
// devices: the GPUs whose telemetry goes into the record ("telemetry": object for one, list for several).
void run_case(Context& ctx, Record record, const std::vector<int>& devices,
              const std::function<std::string(Record&)>& measure);

// The suite's timing loop: warmup and iterations from the spec (else the suite's defaults), telemetry on.
bench::LoopSpec loop_spec(const Context& ctx, int default_warmup, int default_iters, double min_warmup_ms = 0);
// Called with the case's measured timing: its telemetry window becomes the case's.
void note_timing(Context& ctx, const bench::Timing& t);

}  // namespace tb::micro
