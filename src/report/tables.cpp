// report/tables.cpp: the report's tables from the records (tables.h).
#include "report/tables.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "report/analysis.h"
#include "report/compare.h"

namespace tb::report {
namespace {

using nlohmann::json;

std::string num(double v, int prec = 1) { return v == 0 ? "-" : fmt::format("{:.{}f}", v, prec); }
std::string pct(double v) { return v == 0 ? "-" : fmt::format("{:.1f}%", 100 * v); }
std::string str(const json& j, const char* key) {
  if (!j.contains(key)) return "";
  return j[key].is_string() ? j[key].get<std::string>() : j[key].dump();
}
double dbl(const json& j, const char* key, const char* sub = nullptr) {
  if (!j.contains(key)) return 0;
  const json& v = sub ? (j[key].is_object() && j[key].contains(sub) ? j[key][sub] : json()) : j[key];
  return v.is_number() ? v.get<double>() : 0;
}
std::string bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (b >= 1024 && u < 3) b /= 1024, ++u;
  return fmt::format("{:g} {}", b, units[u]);
}

Table provenance(const Inputs& in) {
  Table t{"provenance", "Runs and provenance", {}, {"run", "time (UTC)", "host", "GPUs", "driver / CUDA", "build", "command"}, {}, {}};
  for (const auto& p : in.provenance) {
    std::string gpus, drv;
    const json sys = p.value("system", json::object());
    if (sys.contains("gpus") && sys["gpus"].is_array()) {
      std::map<std::string, int> n;
      for (const auto& g : sys["gpus"]) ++n[g.is_object() ? g.value("name", "?") : "?"];
      for (const auto& [name, c] : n) gpus += fmt::format("{}{} x {}", gpus.empty() ? "" : ", ", c, name);
    }
    if (p.contains("versions")) drv = str(sys, "driver") + " / " + str(p["versions"], "cuda_runtime");
    std::string cmd;
    if (p.contains("argv"))
      for (const auto& a : p["argv"]) {
        if (!cmd.empty()) cmd += ' ';
        cmd += a.get<std::string>();
      }
    const json b = p.value("build", json::object());
    t.rows.push_back({p.value("run", ""), p.value("time_utc", ""), p.value("host", ""), gpus.empty() ? "-" : gpus,
                      drv.empty() ? "-" : drv, str(b, "git") + " " + str(b, "type"), cmd});
  }
  return t;
}

Table comparison(const Inputs& in, const std::vector<recipe::ReferenceRow>& refs) {
  Table t{"comparison", "Recipe runs against the published references", {}, {"recipe", "precision", "GPUs", "GPU", "tokens/s/GPU", "step s", "TFLOP/s/GPU", "MFU", "reference", "ref tokens/s/GPU", "ref MFU", "ratio", "verdict", "proxy"}, {}, {}};
  for (const auto* r : select(in, "run")) {
    if (r->value("status", "") != "ok" || !r->contains("extrapolated")) continue;
    const std::string gpu = r->value("backend", "cuda") == "cpu" ? "CPU" : "H100";
    Comparison c;
    if (!refs.empty()) {
      c = compare_run(*r, refs, gpu);
    } else {
      const json cmp = r->value("comparison", json::object());
      c.ratio = cmp.value("ratio", 0.0), c.ref_gpu = cmp.value("reference_gpu", ""), c.ref_release = cmp.value("reference_release", "");
      c.verdict = cmp.value("verdict", "none") == "meets" ? RefVerdict::meets : cmp.value("verdict", "none") == "below" ? RefVerdict::below : cmp.value("verdict", "none") == "above" ? RefVerdict::above : RefVerdict::none;
    }
    const json lay = r->value("layout", json::object());
    t.rows.push_back({r->value("recipe", ""), r->value("precision", ""), std::to_string(lay.value("gpus", 0)),
                      r->value("gpu", ""), num(dbl(*r, "extrapolated", "tokens_per_s_per_gpu"), 0),
                      num(dbl(*r, "extrapolated", "step_s"), 3), num(dbl(*r, "tflops_per_gpu")), pct(dbl(*r, "mfu")),
                      c.ref_gpu.empty() ? "-" : c.ref_gpu + " " + c.ref_release, num(c.ref_tokens_per_gpu, 0),
                      pct(c.ref_mfu), c.ratio > 0 ? fmt::format("{:.2f}", c.ratio) : "-",
                      std::string(ref_verdict_name(c.verdict)), r->value("proxy", false) ? "yes" : "no"});
  }
  return t;
}

Table train(const Inputs& in) {
  Table t{"train", "Training runs", {}, {"model", "precision", "recompute", "step ms median", "p10", "p90", "tokens/s", "TFLOP/s", "MFU", "peak GiB", "power W", "J/token", "loss first -> last"}, {}, {}};
  for (const auto* r : select(in, "train")) {
    if (r->value("status", "") != "ok") continue;
    std::string loss = "-";
    if (r->contains("loss") && (*r)["loss"].is_array() && !(*r)["loss"].empty())
      loss = fmt::format("{:.3f} -> {:.3f}", (*r)["loss"].front().get<double>(), (*r)["loss"].back().get<double>());
    t.rows.push_back({r->value("model", ""), r->value("precision", ""), r->value("recompute", "-"),
                      num(dbl(*r, "step_ms", "median"), 2), num(dbl(*r, "step_ms", "p10"), 2), num(dbl(*r, "step_ms", "p90"), 2),
                      num(dbl(*r, "tokens_per_s"), 0), num(dbl(*r, "tflops")), pct(dbl(*r, "mfu")),
                      num(dbl(*r, "peak_alloc_gib"), 2), num(dbl(*r, "power_w"), 0), num(dbl(*r, "energy_j_per_token"), 4), loss});
  }
  return t;
}

Table sweep(const Inputs& in) {
  const auto rows = sweep_rows(select(in, "sweep.point"));
  Table t{"sweep", "Sweep", {}, {}, {}, {}};
  std::vector<std::string> keys;
  for (const auto& s : rows)
    for (const auto& [k, v] : s.point.items())
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  t.columns = keys;
  for (const char* c : {"status", "tokens/s/GPU", "step s", "TFLOP/s/GPU", "MFU", "peak GiB", "best", "note"}) t.columns.push_back(c);
  for (const auto& s : rows) {
    std::vector<std::string> row;
    for (const auto& k : keys) row.push_back(s.point.contains(k) ? str(s.point, k.c_str()) : "-");
    const std::string note = !s.reason.empty() ? s.reason : s.resumed ? "resumed: measured by an earlier run" : "";
    for (const auto& v : {s.status, num(s.tokens_per_s_per_gpu, 0), num(s.step_s, 3), num(s.tflops_per_gpu), pct(s.mfu),
                          num(s.peak_alloc_gib, 2), std::string(s.best ? "best" : ""), note})
      row.push_back(v);
    if (s.best) {
      t.highlight.push_back(int(t.rows.size()));
      t.notes.push_back(fmt::format("best: {} at {:.0f} tokens/s/GPU", s.name, s.tokens_per_s_per_gpu));
    }
    t.rows.push_back(row);
  }
  return t;
}

Table scaling(const Inputs& in) {
  Table t{"scaling", "Scaling", {}, {"GPUs", "mode", "source", "status", "tokens/s/GPU", "step s", "efficiency", "comm share", "note"}, {}, {}};
  for (const auto& s : scale_rows(select(in, "scale.point")))
    t.rows.push_back({std::to_string(s.gpus), s.mode, s.source, s.status, num(s.tokens_per_s_per_gpu, 0), num(s.step_s, 3),
                      pct(s.efficiency), s.comm_share < 0 ? "-" : pct(s.comm_share), s.reason});
  if (!t.rows.empty())
    t.notes.push_back(
        "efficiency = tokens/s/GPU / tokens/s/GPU at the smallest GPU count of the same source; "
        "proxy: the per-GPU shard of that layout on one GPU (compute only); projected: trainbench project "
        "(measured compute + modelled communication); measured: a real multi-GPU run");
  return t;
}

Table stragglers(const Inputs& in) {
  Table t{"stragglers",
          "Step time per rank (stragglers, jitter)",
          {},
          {"run", "rank", "host", "GPU", "steps", "median ms", "p10 ms", "p90 ms", "max ms", "vs median of ranks",
           "jitter", "straggler", "SM clock MHz", "clocks limited by"},
          {},
          {}};
  for (const auto& rep : analyze_stragglers(select(in, "rank_steps"))) {
    t.notes.push_back(fmt::format("{}: {}", rep.run, rep.summary()));
    for (const auto& s : rep.ranks) {
      if (s.straggler) t.highlight.push_back(int(t.rows.size()));
      t.rows.push_back({rep.run, std::to_string(s.rank), s.host.empty() ? "-" : s.host, s.device < 0 ? "-" : std::to_string(s.device),
                        std::to_string(s.step_ms.n), num(s.step_ms.median, 2), num(s.step_ms.p10, 2), num(s.step_ms.p90, 2),
                        num(s.step_ms.max, 2), fmt::format("{:+.1f}%", 100 * s.vs_median), pct(s.jitter),
                        s.straggler ? (s.rank == rep.slowest ? "yes (slowest)" : "yes") : "no",
                        s.sm_clock_mhz > 0 ? num(s.sm_clock_mhz, 0) : "-",
                        s.throttle.empty() ? "-" : fmt::format("{}", fmt::join(s.throttle, ", "))});
    }
  }
  return t;
}

Table check(const Inputs& in) {
  Table t{"check", "System check", {}, {"case", "GPU", "metric", "measured", "expected min", "sibling median", "verdict", "note"}, {}, {}};
  for (const auto* r : select(in, "check")) {
    const std::string v = r->value("verdict", "");
    if (v == "fail") t.highlight.push_back(int(t.rows.size()));
    t.rows.push_back({r->value("case", ""), r->contains("device") ? str(*r, "device") : "-", r->value("metric", "-"),
                      num(dbl(*r, "value"), 2), num(dbl(*r, "expected_min"), 2), num(dbl(*r, "sibling_median"), 2), v, r->value("note", "")});
  }
  return t;
}

Table collectives(const Inputs& in) {
  Table t{"collectives", "NCCL collectives", {}, {"op", "case", "GPUs", "bytes", "time us", "algbw GB/s", "busbw GB/s", "status"}, {}, {}};
  for (const auto* r : select(in, "micro.nccl.*"))
    t.rows.push_back({r->value("bench", "").substr(11), r->value("case", ""), std::to_string(r->value("world", 0)),
                      bytes(dbl(*r, "bytes")), num(dbl(*r, "time_us", "median"), 1), num(dbl(*r, "algbw_gbps"), 1),
                      num(dbl(*r, "busbw_gbps"), 1), r->value("status", "")});
  return t;
}

}  // namespace

std::vector<Table> build_tables(const Inputs& in, const std::vector<recipe::ReferenceRow>& refs) {
  std::vector<Table> all{provenance(in), comparison(in, refs), train(in),  sweep(in),
                         scaling(in),    stragglers(in),       check(in), collectives(in)};
  std::vector<Table> out;
  for (auto& t : all)
    if (!t.rows.empty()) out.push_back(std::move(t));
  return out;
}

}  // namespace tb::report
