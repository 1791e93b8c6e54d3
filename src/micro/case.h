// micro/case.h: one measured case, the same way in every suite: telemetry marks around the
// measurement, a tb::Error becomes an error record (the sweep goes on), a fatal one is recorded and
// rethrown (the CUDA context is gone).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "micro/suite.h"

namespace tb::micro {

// measure(record) fills record.data (and may set status) and returns the human line.
// devices: the GPUs whose telemetry goes into the record ("telemetry": object for one, list for several).
void run_case(Context& ctx, Record record, const std::vector<int>& devices,
              const std::function<std::string(Record&)>& measure);

}  // namespace tb::micro
