// micro/case.cpp: see case.h.
#include "micro/case.h"

#include <fmt/format.h>

#include "bench/telemetry.h"
#include "core/error.h"

namespace tb::micro {

void run_case(Context& ctx, Record record, const std::vector<int>& devices,
              const std::function<std::string(Record&)>& measure) {
  bench::Telemetry* tel = ctx.telemetry && ctx.telemetry->available() ? ctx.telemetry : nullptr;
  ctx.timed_window.reset();
  const auto case_from = tel ? tel->mark() : 0;
  try {
    std::string line = measure(record);
    if (tel) {
      const auto from = ctx.timed_window ? ctx.timed_window->first : case_from;
      const auto to = ctx.timed_window ? ctx.timed_window->second : tel->mark();
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

bench::LoopSpec loop_spec(const Context& ctx, int default_warmup, int default_iters, double min_warmup_ms) {
  bench::LoopSpec loop;
  loop.warmup = ctx.spec.warmup >= 0 ? ctx.spec.warmup : default_warmup;
  loop.iters = ctx.spec.iters > 0 ? ctx.spec.iters : default_iters;
  loop.min_warmup_ms = min_warmup_ms;
  loop.telemetry = ctx.telemetry;
  return loop;
}

void note_timing(Context& ctx, const bench::Timing& t) {
  if (t.marked) ctx.timed_window = std::make_pair(t.telemetry_from, t.telemetry_to);
}

}  // namespace tb::micro
