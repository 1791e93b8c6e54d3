// report/verdict.cpp: expectation, sibling and throttle rules of verdict.h, and the verdict table.
#include "report/verdict.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "core/stats.h"
#include "recipe/system.h"

namespace tb::report {
namespace {

constexpr std::string_view kBadThrottle[] = {"hw_slowdown", "hw_thermal", "sw_thermal", "hw_power_brake"};

// Sibling group: the case without its "gpuA->gpuB/" prefix (peer copies), plus the bench.
std::string sibling_key(const nlohmann::json& r) {
  std::string name = r.value("case", "");
  if (name.starts_with("gpu")) {
    if (auto slash = name.find('/'); slash != std::string::npos) name = name.substr(slash + 1);
  }
  return r.value("bench", "") + "|" + name;
}

std::vector<std::string> bad_throttle(const nlohmann::json& r) {
  std::vector<std::string> seen;
  if (!r.contains("telemetry")) return seen;
  auto visit = [&](const nlohmann::json& t) {
    if (!t.is_object() || !t.contains("throttle")) return;
    for (const auto& name : t["throttle"])
      for (auto bad : kBadThrottle)
        if (name == bad && std::find(seen.begin(), seen.end(), bad) == seen.end()) seen.emplace_back(bad);
  };
  const auto& tel = r["telemetry"];
  if (tel.is_array()) for (const auto& t : tel) visit(t);
  else visit(tel);
  return seen;
}

}  // namespace

std::string_view verdict_name(Verdict v) {
  switch (v) {
    case Verdict::pass: return "pass";
    case Verdict::fail: return "FAIL";
    case Verdict::info: return "info";
    case Verdict::skipped: return "skipped";
  }
  return "?";
}

std::string_view headline_metric(std::string_view bench) {
  if (bench == "micro.gemm") return "tflops";
  if (bench == "micro.membw") return "tbps";
  if (bench.starts_with("micro.links.")) return "gbps";
  if (bench.starts_with("micro.nccl.")) return "busbw_gbps";
  return "";
}

std::string unit_of(std::string_view metric) {
  if (metric == "tflops") return "TFLOP/s";
  if (metric == "tbps") return "TB/s";
  if (metric.ends_with("gbps")) return "GB/s";
  return std::string(metric);
}

std::vector<VerdictRow> judge(const std::vector<nlohmann::json>& records, const recipe::SystemRef* system,
                              double outlier_fraction) {
  if (system) outlier_fraction = system->outlier_fraction;
  // Sibling medians: for each group, the values of its members.
  std::map<std::string, std::vector<std::pair<size_t, double>>> groups;
  for (size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    const auto metric = std::string(headline_metric(r.value("bench", "")));
    if (r.value("status", "") == "ok" && !metric.empty() && r.contains(metric) && r[metric].is_number())
      groups[sibling_key(r)].emplace_back(i, r[metric].get<double>());
  }

  std::vector<VerdictRow> rows;
  for (size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    VerdictRow row;
    row.bench = r.value("bench", "");
    row.name = r.value("case", "");
    if (r.contains("device") && r["device"].is_number_integer()) row.device = r["device"].get<int>();
    row.metric = std::string(headline_metric(row.bench));
    const auto status = r.value("status", "");
    if (status == "skipped") {
      row.verdict = Verdict::skipped;
      row.note = r.value("reason", "");
      rows.push_back(row);
      continue;
    }
    if (status != "ok") {
      row.verdict = Verdict::fail;
      row.note = r.contains("error") ? r["error"].value("msg", "error") : "error";
      row.note = row.note.substr(0, row.note.find(" in src/"));  // what failed, without the code location
      rows.push_back(row);
      continue;
    }
    if (row.metric.empty() || !r.contains(row.metric) || !r[row.metric].is_number()) continue;
    row.value = r[row.metric].get<double>();
    std::vector<std::string> notes;
    bool failed = false;

    if (system) {
      const int world = r.value("world", 1);
      for (const auto& e : system->expect) {
        if (e.bench != row.bench || e.name != row.name || (e.gpus != 0 && e.gpus != world) || !r.contains(e.metric))
          continue;
        const double v = r[e.metric].get<double>();
        if (e.metric == row.metric) row.expected_min = e.min;
        if (v < e.min) {
          failed = true;
          notes.push_back(fmt::format("{} {:.4g} below the expected {:.4g}", e.metric, v, e.min));
        }
      }
    }

    const auto& group = groups[sibling_key(r)];
    if (group.size() >= 2) {
      std::vector<double> others;
      for (const auto& [j, v] : group)
        if (j != i) others.push_back(v);
      const double med = quantile(others, 0.5);
      row.sibling_median = med;
      if (row.value < (1 - outlier_fraction) * med) {
        failed = true;
        notes.push_back(fmt::format("{:.0f}% below its siblings' median {:.4g}", 100 * (1 - row.value / med), med));
      }
    }

    if (auto thr = bad_throttle(r); !thr.empty()) {
      failed = true;
      std::string list;
      for (const auto& t : thr) list += (list.empty() ? "" : ", ") + t;
      notes.push_back("throttled: " + list);
    }

    row.verdict = failed ? Verdict::fail : (row.expected_min || row.sibling_median) ? Verdict::pass : Verdict::info;
    for (const auto& n : notes) row.note += (row.note.empty() ? "" : "; ") + n;
    rows.push_back(std::move(row));
  }
  return rows;
}

bool any_failed(const std::vector<VerdictRow>& rows) {
  return std::any_of(rows.begin(), rows.end(), [](const VerdictRow& r) { return r.verdict == Verdict::fail; });
}

std::string render_table(const std::vector<VerdictRow>& rows) {
  std::string out = fmt::format("{:<26} {:<30} {:>4}  {:>18}  {:>12}  {:<7} {}\n", "bench", "case", "gpu", "measured",
                                "expected", "verdict", "note");
  for (const auto& r : rows) {
    const std::string gpu = r.device ? std::to_string(*r.device) : "-";
    const std::string measured = r.verdict == Verdict::skipped || r.metric.empty() || (r.verdict == Verdict::fail && r.value == 0)
                                     ? "-"
                                     : fmt::format("{:.4g} {}", r.value, unit_of(r.metric));
    const std::string expected = r.expected_min ? fmt::format(">= {:.4g}", *r.expected_min) : "-";
    out += fmt::format("{:<26} {:<30} {:>4}  {:>18}  {:>12}  {:<7} {}\n", r.bench, r.name, gpu, measured, expected,
                       verdict_name(r.verdict), r.note);
  }
  return out;
}

}  // namespace tb::report
