// micro/case.cpp: see case.h.
#include "micro/case.h"

#include <fmt/format.h>

#include "bench/telemetry.h"
#include "core/error.h"

namespace tb::micro {

void run_case(Context& ctx, Record record, const std::vector<int>& devices,
              const std::function<std::string(Record&)>& measure) {
  bench::Telemetry* tel = ctx.telemetry && ctx.telemetry->available() ? ctx.telemetry : nullptr;
  const auto from = tel ? tel->mark() : 0;
  try {
    std::string line = measure(record);
    if (tel) {
      const auto to = tel->mark();
      if (devices.size() == 1) {
        record.data["telemetry"] = bench::to_json(tel->summary(devices[0], from, to));
      } else {
        auto list = nlohmann::json::array();
        for (int d : devices) list.push_back(bench::to_json(tel->summary(d, from, to)));
        record.data["telemetry"] = list;
      }
    }
    ctx.out.add(std::move(record), line);
  } catch (const Error& e) {
    Record failed = Record::failed(record.bench, record.name, e);
    failed.world = record.world;
    failed.device = record.device;
    ctx.out.add(std::move(failed), fmt::format("{:<22} {:<28} error: {}", record.bench, record.name, e.detail()));
    if (e.fatal()) throw;
  }
}

}  // namespace tb::micro
