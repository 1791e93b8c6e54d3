// report/sweep.cpp: grid expansion, resume and skip logic of a sweep (sweep.h).
#include "report/sweep.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/interrupt.h"
#include "core/record.h"
#include "core/record_keys.h"
#include "report/analysis.h"

namespace tb::report {
namespace fs = std::filesystem;

namespace {
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, sep);)
    if (!item.empty()) out.push_back(item);
  return out;
}
}  // namespace

Axis parse_axis(const std::string& text) {
  const auto eq = text.find('=');
  TB_REQUIRE(eq != std::string::npos && eq > 0 && eq + 1 < text.size(),
             fmt::format("--vary {}: expected key=v1,v2,... e.g. --vary micro_batch=1,2,4", text));
  Axis a{text.substr(0, eq), split(text.substr(eq + 1), ',')};
  TB_REQUIRE(!a.values.empty(), fmt::format("--vary {}: no values", text));
  return a;
}

std::vector<Point> expand_grid(const std::vector<Axis>& axes) {
  std::vector<Point> out{{}};
  for (const auto& a : axes) {
    for (const auto& other : axes)
      TB_REQUIRE(&other == &a || other.key != a.key, fmt::format("--vary {} given twice", a.key));
    std::vector<Point> next;
    for (const auto& p : out)
      for (const auto& v : a.values) {
        Point q = p;
        q.emplace_back(a.key, v);
        next.push_back(q);
      }
    out = std::move(next);
  }
  return out;
}

Point parse_point(const std::string& text) {
  Point p;
  for (const auto& kv : split(text, ',')) {
    const auto eq = kv.find('=');
    TB_REQUIRE(eq != std::string::npos && eq > 0 && eq + 1 < kv.size(),
               fmt::format("--point {}: expected key=value,key=value", text));
    p.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  TB_REQUIRE(!p.empty(), "--point: empty");
  return p;
}

std::string point_name(const Point& p) {
  std::string s;
  for (const auto& [k, v] : p) s += fmt::format("{}{}={}", s.empty() ? "" : ",", k, v);
  std::replace(s.begin(), s.end(), '/', '_');
  return s;
}

std::optional<nlohmann::json> finished_run(const fs::path& dir, std::string_view bench) {
  std::ifstream in(dir / "results.jsonl");
  std::optional<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) {
    // A line cut by a crash or not a record: that point is simply not finished (its run is measured again).
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !check_record(j).empty()) continue;
    if (j.value("bench", "") == bench && j.value("status", "") == "ok") out = std::move(j);
  }
  return out;
}

nlohmann::json point_metrics(const nlohmann::json& run) {
  nlohmann::json m = nlohmann::json::object();
  const nlohmann::json& x = run_figures(run);
  m["tokens_per_s_per_gpu"] = x.value("tokens_per_s_per_gpu", 0.0);
  m["step_ms"] = ms_value(x, "step");  // older run records: step_s
  m["tflops_per_gpu"] = run.value("tflops_per_gpu", 0.0);
  m["mfu"] = run.value("mfu", 0.0);
  double peak = 0;
  for (const auto& p : run.value("points", nlohmann::json::array())) peak = std::max(peak, p.value("peak_alloc_gib", 0.0));
  m["peak_alloc_gib"] = peak;
  m["point_run"] = run.value("run", "");
  return m;
}

std::vector<nlohmann::json> run_sweep(const SweepSpec& spec, const SweepHooks& hooks, JsonlSink& sink) {
  std::vector<nlohmann::json> out;
  int i = 0;
  for (const Point& p : spec.points) {
    if (interrupted()) break;  // Ctrl-C or SIGTERM: the points so far are recorded; a rerun resumes after them
    ++i;
    const std::string name = point_name(p);
    const fs::path rel = fs::path("points") / name, dir = spec.out / rel;
    nlohmann::json point = nlohmann::json::object();
    for (const auto& [k, v] : p) point[k] = v;
    Record r;
    r.bench = "sweep.point";
    r.name = name;
    r.data = {{"sweep", spec.recipe}, {"point", point}, {"dir", rel.string()}};
    const std::string head = fmt::format("[{}/{}] {}", i, spec.points.size(), name);
    if (auto done = finished_run(dir)) {
      r.data.update(point_metrics(*done));
      r.data["resumed"] = true;
      hooks.say(fmt::format("{}: already measured ({:.0f} tokens/s/GPU), not run again", head,
                            r.data["tokens_per_s_per_gpu"].get<double>()));
    } else if (std::string why = hooks.infeasible ? hooks.infeasible(p) : ""; !why.empty()) {
      r.status = Status::skipped, r.reason = why;
      hooks.say(fmt::format("{}: skipped: {}", head, why));
    } else {
      hooks.say(fmt::format("{}: running into {}", head, dir.string()));
      const PointRun pr = hooks.run(p, dir);
      if (interrupted()) {  // the point's run was passed the signal and stopped: not measured
        r.status = Status::interrupted;
        hooks.say(fmt::format("{}: interrupted", head));
      } else if (auto rec = finished_run(dir); (pr.rc == 0 || pr.rc == 1) && rec) {  // 1: measured, below its reference
        r.data.update(point_metrics(*rec));
        r.data["resumed"] = false;
        hooks.say(fmt::format("{}: {:.0f} tokens/s/GPU", head, r.data["tokens_per_s_per_gpu"].get<double>()));
      } else if (pr.rc == 2) {
        r.status = Status::skipped, r.reason = pr.message;
        hooks.say(fmt::format("{}: skipped: {}", head, pr.message));
      } else {
        r.status = Status::error, r.error_kind = "point", r.error_msg = fmt::format("exit {}: {}", pr.rc, pr.message);
        hooks.say(fmt::format("{}: failed: {}", head, r.error_msg));
      }
    }
    sink.write(r);
    out.push_back(to_json(r, ""));
  }
  std::vector<const nlohmann::json*> ptrs;
  for (const auto& j : out) ptrs.push_back(&j);
  for (const auto& s : sweep_rows(ptrs))
    if (s.best) hooks.say(fmt::format("best: {} at {:.0f} tokens/s/GPU", s.name, s.tokens_per_s_per_gpu));
  return out;
}

}  // namespace tb::report
