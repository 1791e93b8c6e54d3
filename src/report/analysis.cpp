// report/analysis.cpp: stragglers, scaling efficiency, sweep rows (formulas in analysis.h).
#include "report/analysis.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>

#include "core/record_keys.h"

namespace tb::report {

std::string StragglerReport::summary() const {
  if (ranks.empty()) return "";
  const auto it = std::find_if(ranks.begin(), ranks.end(), [&](const RankStat& r) { return r.rank == slowest; });
  const RankStat& s = *it;
  std::string where = s.host.empty() ? "" : s.host;
  if (s.device >= 0) where += fmt::format("{}GPU {}", where.empty() ? "" : " ", s.device);
  int n = 0;
  std::vector<double> clocks;
  for (const auto& r : ranks) {
    n += r.straggler;
    if (r.sm_clock_mhz > 0) clocks.push_back(r.sm_clock_mhz);
  }
  std::string clock;
  if (s.sm_clock_mhz > 0 && clocks.size() > 1) {
    const double mid = quantile(clocks, 0.5);
    if (s.sm_clock_mhz < (1 - kClockLowFraction) * mid)
      clock = fmt::format("; its GPU's SM clock {:.0f} MHz against the ranks' median {:.0f}{}", s.sm_clock_mhz, mid,
                          s.throttle.empty() ? "" : fmt::format(" (limited by: {})", fmt::join(s.throttle, ", ")));
  }
  return fmt::format("slowest rank {}{}: median {:.2f} ms, {:+.1f}% against the median of the {} ranks; spread {:.1f}%, "
                     "jitter (p90-p10)/median up to {:.1f}%; {}",
                     slowest, where.empty() ? "" : " (" + where + ")", s.step_ms.median, 100 * s.vs_median,
                     ranks.size(), 100 * spread, 100 * jitter,
                     n ? fmt::format("{} straggler{} (> {:.0f}% slower)", n, n > 1 ? "s" : "", 100 * kStragglerFraction)
                       : "no straggler") +
         clock;
}

std::vector<StragglerReport> analyze_stragglers(const std::vector<const nlohmann::json*>& rank_steps) {
  std::map<std::string, std::map<int, const nlohmann::json*>> by_run;  // last record per (run, rank)
  std::vector<std::string> order;
  for (const auto* r : rank_steps) {
    if (r->value("status", "ok") != "ok" || !r->contains("step_ms")) continue;
    const std::string run = r->value("run", "");
    if (!by_run.count(run)) order.push_back(run);
    by_run[run][r->value("rank", 0)] = r;
  }
  std::vector<StragglerReport> out;
  for (const auto& run : order) {
    StragglerReport rep;
    rep.run = run;
    for (const auto& [rank, r] : by_run[run]) {
      const auto steps = (*r)["step_ms"].get<std::vector<double>>();
      if (steps.empty()) continue;
      RankStat s;
      s.rank = rank, s.device = r->value("device", -1), s.host = r->value("host", "");
      s.step_ms = summarize(steps);
      s.jitter = s.step_ms.median > 0 ? (s.step_ms.p90 - s.step_ms.p10) / s.step_ms.median : 0;
      if (const auto t = r->find("telemetry"); t != r->end() && t->is_object()) {
        s.sm_clock_mhz = t->value("sm_clock_mhz_mean", 0.0);
        if (t->contains("throttle") && (*t)["throttle"].is_array())
          s.throttle = (*t)["throttle"].get<std::vector<std::string>>();
      }
      rep.ranks.push_back(s);
      rep.steps.push_back(steps);
    }
    if (rep.ranks.empty()) continue;
    std::vector<double> medians;
    for (const auto& s : rep.ranks) medians.push_back(s.step_ms.median);
    const double mid = quantile(medians, 0.5);
    const auto [lo, hi] = std::minmax_element(medians.begin(), medians.end());
    rep.spread = *lo > 0 ? (*hi - *lo) / *lo : 0;
    rep.slowest = rep.ranks[std::size_t(hi - medians.begin())].rank;
    for (auto& s : rep.ranks) {
      s.vs_median = mid > 0 ? s.step_ms.median / mid - 1 : 0;
      s.straggler = s.vs_median > kStragglerFraction;
      rep.jitter = std::max(rep.jitter, s.jitter);
    }
    out.push_back(std::move(rep));
  }
  return out;
}

std::vector<ScaleRow> scale_rows(const std::vector<const nlohmann::json*>& scale_points) {
  std::map<std::pair<std::string, int>, ScaleRow> rows;  // last per (source, gpus)
  for (const auto* r : scale_points) {
    ScaleRow s;
    s.gpus = r->value("gpus", 0), s.source = r->value("source", "");
    s.status = r->value("status", "ok"), s.reason = r->value("reason", "");
    s.tokens_per_s_per_gpu = r->value("tokens_per_s_per_gpu", 0.0), s.step_s = ms_value(*r, "step") / 1e3;
    s.comm_share = r->value("comm_share", -1.0), s.mode = r->value("mode", "");
    rows[{s.source, s.gpus}] = s;
  }
  std::vector<ScaleRow> out;
  std::map<std::string, double> base;  // per source: tokens/s per GPU at the smallest ok count
  for (const auto& [key, s] : rows)
    if (s.status == "ok" && s.tokens_per_s_per_gpu > 0 && !base.count(key.first)) base[key.first] = s.tokens_per_s_per_gpu;
  for (auto [key, s] : rows) {
    if (s.status == "ok" && base.count(key.first)) s.efficiency = s.tokens_per_s_per_gpu / base[key.first];
    out.push_back(s);
  }
  std::stable_sort(out.begin(), out.end(), [](const ScaleRow& a, const ScaleRow& b) { return a.gpus < b.gpus; });
  return out;
}

std::vector<SweepRow> sweep_rows(const std::vector<const nlohmann::json*>& sweep_points) {
  std::vector<SweepRow> out;
  std::map<std::string, std::size_t> index;
  for (const auto* r : sweep_points) {
    SweepRow s;
    s.name = r->value("case", "");
    s.point = r->value("point", nlohmann::json::object());
    s.status = r->value("status", "ok"), s.reason = r->value("reason", ""), s.dir = r->value("dir", "");
    if (r->contains("error") && (*r)["error"].is_object()) s.reason = (*r)["error"].value("msg", "");
    s.resumed = r->value("resumed", false);
    s.tokens_per_s_per_gpu = r->value("tokens_per_s_per_gpu", 0.0), s.step_s = ms_value(*r, "step") / 1e3;
    s.tflops_per_gpu = r->value("tflops_per_gpu", 0.0), s.mfu = r->value("mfu", 0.0);
    s.peak_alloc_gib = r->value("peak_alloc_gib", 0.0);
    const std::string key = r->value("sweep", "") + "|" + s.name;
    if (index.count(key)) {
      out[index[key]] = s;
    } else {
      index[key] = out.size();
      out.push_back(s);
    }
  }
  int best = -1;
  for (std::size_t i = 0; i < out.size(); ++i)
    if (out[i].status == "ok" && (best < 0 || out[i].tokens_per_s_per_gpu > out[std::size_t(best)].tokens_per_s_per_gpu))
      best = int(i);
  if (best >= 0) out[std::size_t(best)].best = true;
  return out;
}

}  // namespace tb::report
