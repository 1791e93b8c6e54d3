// report/tables.cpp: the report's tables from the records (tables.h).
#include "report/tables.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/record_keys.h"
#include "report/analysis.h"
#include "report/compare.h"

namespace tb::report {
namespace {

using nlohmann::json;

std::string num(double v, int prec = 1) { return v == 0 ? "-" : fmt::format("{:.{}f}", v, prec); }
std::string pct(double v) { return v == 0 ? "-" : fmt::format("{:.1f}%", 100 * v); }
std::string plain(double v) { return v == 0 || !std::isfinite(v) ? "" : fmt::format("{}", v); }  // CSV: "" = none
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

// One row in both renderings: the human cells (units and % signs, "-" for none) and the CSV cells (plain numbers in
// the unit of the CSV header, "" for none). A human cell may hold two CSV cells ("loss first -> last").
class Row {
 public:
  Row& text(const std::string& s) { return both(s, s); }
  Row& both(std::string human, std::string csv) {
    human_.push_back(std::move(human)), csv_.push_back(std::move(csv));
    return *this;
  }
  Row& number(double v, int prec) { return both(num(v, prec), plain(v)); }
  Row& integer(long long v) { return text(std::to_string(v)); }
  Row& fraction(double v) { return both(pct(v), plain(v)); }  // human: percent; CSV: the fraction
  Row& human_only(std::string s) { return human_.push_back(std::move(s)), *this; }
  Row& csv_only(std::string s) { return csv_.push_back(std::move(s)), *this; }
  void add_to(Table& t) { t.rows.push_back(std::move(human_)), t.csv_rows.push_back(std::move(csv_)); }

 private:
  std::vector<std::string> human_, csv_;
};

Table provenance(const Inputs& in) {
  Table t{"provenance", "Runs and provenance",
          {},           {"run", "time (UTC)", "host", "GPUs", "driver / CUDA", "build", "command"},
          {},           {},
          {},           {}};
  t.csv_columns = {"run", "time_utc", "host", "gpu_models", "driver", "cuda_runtime", "git", "build_type", "command"};
  for (const auto& p : in.provenance) {
    std::string gpus, drv;
    const json sys = p.value("system", json::object());
    if (sys.contains("gpus") && sys["gpus"].is_array()) {
      std::map<std::string, int> n;
      for (const auto& g : sys["gpus"]) ++n[g.is_object() ? g.value("name", "?") : "?"];
      for (const auto& [name, c] : n) gpus += fmt::format("{}{} x {}", gpus.empty() ? "" : ", ", c, name);
    }
    const std::string driver = str(sys, "driver"),
                      cuda = p.contains("versions") ? str(p["versions"], "cuda_runtime") : "";
    if (p.contains("versions")) drv = driver + " / " + cuda;
    std::string cmd;
    if (p.contains("argv"))
      for (const auto& a : p["argv"]) {
        if (!cmd.empty()) cmd += ' ';
        cmd += a.get<std::string>();
      }
    const json b = p.value("build", json::object());
    Row r;
    r.text(p.value("run", "")).text(p.value("time_utc", "")).text(p.value("host", ""));
    r.both(gpus.empty() ? "-" : gpus, gpus);
    r.human_only(drv.empty() ? "-" : drv).csv_only(driver).csv_only(cuda);
    r.human_only(str(b, "git") + " " + str(b, "type")).csv_only(str(b, "git")).csv_only(str(b, "type"));
    r.text(cmd);
    r.add_to(t);
  }
  return t;
}

Table comparison(const Inputs& in, const std::vector<recipe::ReferenceRow>& refs) {
  Table t{"comparison",
          "Recipe runs against the published references",
          {},
          {"recipe", "precision", "GPUs", "GPU", "tokens/s/GPU", "± tokens/s/GPU", "step s", "TFLOP/s/GPU", "MFU",
           "reference", "ref tokens/s/GPU", "ref MFU", "ratio", "verdict", "proxy"},
          {},
          {},
          {},
          {}};
  t.csv_columns = {"recipe",
                   "precision",
                   "gpus",
                   "gpu",
                   "tokens_per_s_per_gpu",
                   "tokens_per_s_per_gpu_se",
                   "step_ms",
                   "tflops_per_gpu",
                   "mfu",
                   "reference_gpu",
                   "reference_release",
                   "reference_tokens_per_s_per_gpu",
                   "reference_mfu",
                   "ratio",
                   "verdict",
                   "proxy"};
  for (const auto* r : select(in, "run")) {
    if (r->value("status", "") != "ok" || run_figures(*r).empty()) continue;
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
    const json& x = run_figures(*r);
    Row row;
    row.text(r->value("recipe", ""))
        .text(r->value("precision", ""))
        .integer(lay.value("gpus", 0))
        .text(r->value("gpu", ""));
    row.number(dbl(x, "tokens_per_s_per_gpu"), 0).number(dbl(x, "se", "tokens_per_s_per_gpu"), 0);
    const double step_ms = ms_value(x, "step");
    row.both(num(step_ms / 1e3, 3), plain(step_ms)).number(dbl(*r, "tflops_per_gpu"), 1).fraction(dbl(*r, "mfu"));
    row.human_only(c.ref_gpu.empty() ? "-" : c.ref_gpu + " " + c.ref_release)
        .csv_only(c.ref_gpu)
        .csv_only(c.ref_release);
    row.number(c.ref_tokens_per_gpu, 0).fraction(c.ref_mfu);
    row.both(c.ratio > 0 ? fmt::format("{:.2f}", c.ratio) : "-", plain(c.ratio));
    row.text(std::string(ref_verdict_name(c.verdict))).text(r->value("proxy", false) ? "yes" : "no");
    row.add_to(t);
  }
  return t;
}

Table train(const Inputs& in) {
  Table t{"train",
          "Training runs",
          {},
          {"model", "precision", "recompute", "step ms median", "p10", "p90", "tokens/s", "TFLOP/s", "MFU", "peak GiB",
           "power W", "J/token", "loss first -> last"},
          {},
          {},
          {},
          {}};
  t.csv_columns = {"model",        "precision", "recompute", "step_ms_median", "step_ms_p10", "step_ms_p90",
                   "tokens_per_s", "tflops",    "mfu",       "peak_alloc_gib", "power_w",     "energy_j_per_token",
                   "loss_first",   "loss_last"};
  for (const auto* r : select(in, "train")) {
    if (r->value("status", "") != "ok") continue;
    std::string loss = "-", first, last;
    if (r->contains("loss") && (*r)["loss"].is_array() && !(*r)["loss"].empty()) {
      loss = fmt::format("{:.3f} -> {:.3f}", (*r)["loss"].front().get<double>(), (*r)["loss"].back().get<double>());
      first = fmt::format("{}", (*r)["loss"].front().get<double>()),
      last = fmt::format("{}", (*r)["loss"].back().get<double>());
    }
    Row row;
    row.text(r->value("model", "")).text(r->value("precision", ""));
    row.both(r->value("recompute", "-"), r->value("recompute", ""));
    row.number(dbl(*r, "step_ms", "median"), 2)
        .number(dbl(*r, "step_ms", "p10"), 2)
        .number(dbl(*r, "step_ms", "p90"), 2);
    row.number(dbl(*r, "tokens_per_s"), 0).number(dbl(*r, "tflops"), 1).fraction(dbl(*r, "mfu"));
    row.number(dbl(*r, "peak_alloc_gib"), 2).number(dbl(*r, "power_w"), 0).number(dbl(*r, "energy_j_per_token"), 4);
    row.human_only(loss).csv_only(first).csv_only(last);
    row.add_to(t);
  }
  return t;
}

Table sweep(const Inputs& in) {
  const auto rows = sweep_rows(select(in, "sweep.point"));
  Table t{"sweep", "Sweep", {}, {}, {}, {}, {}, {}};
  std::vector<std::string> keys;
  for (const auto& s : rows)
    for (const auto& [k, v] : s.point.items())
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  t.columns = keys, t.csv_columns = keys;
  for (const char* c : {"status", "tokens/s/GPU", "step s", "TFLOP/s/GPU", "MFU", "peak GiB", "best", "note"}) t.columns.push_back(c);
  for (const char* c :
       {"status", "tokens_per_s_per_gpu", "step_ms", "tflops_per_gpu", "mfu", "peak_alloc_gib", "best", "note"})
    t.csv_columns.push_back(c);
  for (const auto& s : rows) {
    Row row;
    for (const auto& k : keys) {
      const std::string v = s.point.contains(k) ? str(s.point, k.c_str()) : "";
      row.both(v.empty() ? "-" : v, v);
    }
    const std::string note = !s.reason.empty() ? s.reason : s.resumed ? "resumed: measured by an earlier run" : "";
    row.text(s.status).number(s.tokens_per_s_per_gpu, 0).both(num(s.step_s, 3), plain(1e3 * s.step_s));
    row.number(s.tflops_per_gpu, 1).fraction(s.mfu).number(s.peak_alloc_gib, 2).text(s.best ? "best" : "").text(note);
    if (s.best) {
      t.highlight.push_back(int(t.rows.size()));
      t.notes.push_back(fmt::format("best: {} at {:.0f} tokens/s/GPU", s.name, s.tokens_per_s_per_gpu));
    }
    row.add_to(t);
  }
  return t;
}

Table scaling(const Inputs& in) {
  Table t{"scaling", "Scaling",
          {},        {"GPUs", "mode", "source", "status", "tokens/s/GPU", "step s", "efficiency", "comm share", "note"},
          {},        {},
          {},        {}};
  t.csv_columns = {"gpus",    "mode",       "source",     "status", "tokens_per_s_per_gpu",
                   "step_ms", "efficiency", "comm_share", "note"};
  for (const auto& s : scale_rows(select(in, "scale.point"))) {
    Row row;
    row.integer(s.gpus).text(s.mode).text(s.source).text(s.status).number(s.tokens_per_s_per_gpu, 0);
    row.both(num(s.step_s, 3), plain(1e3 * s.step_s)).fraction(s.efficiency);
    row.both(s.comm_share < 0 ? "-" : pct(s.comm_share), s.comm_share < 0 ? "" : fmt::format("{}", s.comm_share));
    row.text(s.reason);
    row.add_to(t);
  }
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
          {},
          {},
          {}};
  t.csv_columns = {"run",         "rank",        "host",      "device", "steps",     "step_ms_median", "step_ms_p10",
                   "step_ms_p90", "step_ms_max", "vs_median", "jitter", "straggler", "sm_clock_mhz",   "throttle"};
  for (const auto& rep : analyze_stragglers(select(in, "rank_steps"))) {
    t.notes.push_back(fmt::format("{}: {}", rep.run, rep.summary()));
    for (const auto& s : rep.ranks) {
      if (s.straggler) t.highlight.push_back(int(t.rows.size()));
      Row row;
      row.text(rep.run).integer(s.rank).both(s.host.empty() ? "-" : s.host, s.host);
      row.both(s.device < 0 ? "-" : std::to_string(s.device), s.device < 0 ? "" : std::to_string(s.device));
      row.integer(static_cast<long long>(s.step_ms.n)).number(s.step_ms.median, 2).number(s.step_ms.p10, 2);
      row.number(s.step_ms.p90, 2).number(s.step_ms.max, 2);
      row.both(fmt::format("{:+.1f}%", 100 * s.vs_median), fmt::format("{}", s.vs_median)).fraction(s.jitter);
      row.both(s.straggler ? (s.rank == rep.slowest ? "yes (slowest)" : "yes") : "no",
               s.straggler ? (s.rank == rep.slowest ? "slowest" : "yes") : "no");
      row.number(s.sm_clock_mhz > 0 ? s.sm_clock_mhz : 0, 0);
      row.both(s.throttle.empty() ? "-" : fmt::format("{}", fmt::join(s.throttle, ", ")),
               fmt::format("{}", fmt::join(s.throttle, ";")));
      row.add_to(t);
    }
  }
  return t;
}

Table check(const Inputs& in) {
  Table t{"check", "System check",
          {},      {"case", "GPU", "metric", "measured", "expected min", "sibling median", "verdict", "note"},
          {},      {},
          {},      {}};
  // The unit of value, expected_min and sibling_median is the metric's, named by it (tflops, tbps, busbw_gbps, ...).
  t.csv_columns = {"case", "device", "metric", "value", "expected_min", "sibling_median", "verdict", "note"};
  for (const auto* r : select(in, "check")) {
    const std::string v = r->value("verdict", "");
    if (v == "fail") t.highlight.push_back(int(t.rows.size()));
    Row row;
    const std::string dev = r->contains("device") ? str(*r, "device") : "";
    row.text(r->value("case", ""))
        .both(dev.empty() ? "-" : dev, dev)
        .both(r->value("metric", "-"), r->value("metric", ""));
    row.number(dbl(*r, "value"), 2).number(dbl(*r, "expected_min"), 2).number(dbl(*r, "sibling_median"), 2);
    row.text(v).text(r->value("note", ""));
    row.add_to(t);
  }
  return t;
}

Table collectives(const Inputs& in) {
  Table t{"collectives",
          "NCCL collectives",
          {},
          {"op", "case", "GPUs", "bytes", "time us", "algbw GB/s", "busbw GB/s", "status"},
          {},
          {},
          {},
          {}};
  t.csv_columns = {"op", "case", "gpus", "bytes", "time_us_median", "algbw_gbps", "busbw_gbps", "status"};
  for (const auto* r : select(in, "micro.nccl.*")) {
    Row row;
    row.text(r->value("bench", "").substr(11)).text(r->value("case", "")).integer(r->value("world", 0));
    row.both(bytes(dbl(*r, "bytes")), plain(dbl(*r, "bytes"))).number(dbl(*r, "time_us", "median"), 1);
    row.number(dbl(*r, "algbw_gbps"), 1).number(dbl(*r, "busbw_gbps"), 1).text(r->value("status", ""));
    row.add_to(t);
  }
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
