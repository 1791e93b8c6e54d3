// report/verdict.h: judges measured records against a GPU model's expectations and against siblings.
//   expectation: pass when value >= min (references/systems/<gpu>.toml [[expect]], matched by bench,
//                case, metric, and gpus == world when given);
//   siblings:    records of the same bench and case on different GPUs (or GPU pairs); a member whose
//                headline metric is below (1 - outlier_fraction) x median of the others is an outlier;
//   throttle:    hw_slowdown, hw_thermal, sw_thermal or hw_power_brake seen during a case fails it;
//   errors fail; skipped cases are listed, not failed.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tb::recipe {
struct SystemRef;
}

namespace tb::report {

enum class Verdict { pass, fail, info, skipped };
std::string_view verdict_name(Verdict v);

struct VerdictRow {
  std::string bench, name;        // the record judged
  std::optional<int> device;
  std::string metric;             // "tflops", "tbps", "gbps", "busbw_gbps"
  double value = 0;
  std::optional<double> expected_min;
  std::optional<double> sibling_median;
  Verdict verdict = Verdict::info;
  std::string note;               // why it failed, or what it was compared with
};

std::string_view headline_metric(std::string_view bench);  // the metric siblings are compared on ("" if none)
std::string unit_of(std::string_view metric);                // "TFLOP/s", "TB/s", "GB/s"
std::vector<VerdictRow> judge(const std::vector<nlohmann::json>& records, const recipe::SystemRef* system,
                              double outlier_fraction = 0.10);
bool any_failed(const std::vector<VerdictRow>& rows);
std::string render_table(const std::vector<VerdictRow>& rows);  // the verdict table printed by `check`

}  // namespace tb::report
