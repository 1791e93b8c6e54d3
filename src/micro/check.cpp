// micro/check.cpp: see check.h.
#include "micro/check.h"

#include <fmt/format.h>

#include <cstdio>

#include "bench/telemetry.h"
#include "core/log.h"
#include "recipe/system.h"

namespace tb::micro {

CheckResult run_check(Context& ctx) {
  const auto devices = resolve_devices(ctx.spec);
  const size_t first = ctx.out.records().size();
  auto step = [&](const char* suite_name, Spec spec) {
    std::printf("\n== %s ==\n", suite_name);
    std::fflush(stdout);
    Context sub{std::move(spec), ctx.out, ctx.system, ctx.telemetry, std::nullopt};
    sub.spec.devices = devices;
    sub.spec.quick = true;
    find_suite(suite_name)->run(sub);
  };
  Spec base = ctx.spec;
  base.dtypes.clear();
  base.sizes.clear();
  base.ops.clear();
  step("gemm", base);
  step("membw", base);
  step("links", base);
  if (devices.size() >= 2) step("nccl", base);

  std::vector<nlohmann::json> records;
  for (size_t i = first; i < ctx.out.records().size(); ++i) records.push_back(to_json(ctx.out.records()[i], ""));
  CheckResult result;
  result.rows = report::judge(records, ctx.system);

  report::VerdictRow tel;
  tel.bench = "telemetry";
  tel.name = "nvml";
  if (ctx.telemetry && ctx.telemetry->available()) {
    tel.verdict = report::Verdict::pass;
    tel.note = "power, clocks, temperature and energy recorded";
  } else {
    tel.verdict = report::Verdict::fail;
    tel.note = ctx.telemetry ? ctx.telemetry->reason() : "telemetry off";
  }
  result.rows.push_back(tel);

  if (!ctx.system) {
    report::VerdictRow ref;
    ref.bench = "references";
    ref.name = "systems";
    ref.verdict = report::Verdict::info;
    ref.note = "no reference file matches this GPU model: judged against sibling GPUs only";
    result.rows.push_back(ref);
  }

  for (const auto& row : result.rows) {
    Record r;
    r.bench = "check";
    r.name = row.bench + "/" + row.name;
    r.device = row.device;
    r.world = int(devices.size());
    r.data = {{"verdict", report::verdict_name(row.verdict)}, {"metric", row.metric}, {"note", row.note}};
    if (!row.metric.empty()) r.data["value"] = row.value;
    if (row.expected_min) r.data["expected_min"] = *row.expected_min;
    if (row.sibling_median) r.data["sibling_median"] = *row.sibling_median;
    ctx.out.add(std::move(r));
  }
  result.failed = report::any_failed(result.rows);
  return result;
}

}  // namespace tb::micro
