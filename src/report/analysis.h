// report/analysis.h: the numbers the report derives from records.
// Stragglers and jitter, from "rank_steps" records (one per rank: data.rank, data.step_ms = the measured steps'
// times in ms, optional host, device; grouped by the record's "run" id):
//   per rank: median, p10, p90, max of its step times (core/stats.h)
//   vs_median = rank median / median of the rank medians - 1; straggler when vs_median > 5% (kStragglerFraction)
//   slowest rank = the largest rank median;  spread = (max rank median - min rank median) / min rank median
//   jitter of a rank = (p90 - p10) / median; the run's jitter = the largest rank's
//   with telemetry (the rank's GPU over its measured steps): its mean SM clock and what limited it; the summary
//   names the slowest rank's clock when it is more than 3% (kClockLowFraction) below the median of the ranks' clocks
//   (a GPU held back by power, heat or a slowdown, not by the work or the network)
// Scaling, from "scale.point" records (data.gpus, data.source, data.tokens_per_s_per_gpu, ...):
//   efficiency(N) = tokens/s per GPU at N / tokens/s per GPU at the smallest N of the same source. This is both
//   weak-scaling efficiency (global batch grows with N) and strong-scaling efficiency (fixed global batch:
//   T(N0) N0 / (T(N) N)) since tokens/s per GPU = global batch x seq / (step x N).
// Sweeps, from "sweep.point" records: the last record of each point wins (a resumed sweep appends), the best point
// has the highest tokens/s per GPU among the ok ones.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "core/stats.h"

namespace tb::report {

inline constexpr double kStragglerFraction = 0.05;
inline constexpr double kClockLowFraction = 0.03;

struct RankStat {
  int rank = 0, device = -1;
  std::string host;
  Summary step_ms;
  double vs_median = 0, jitter = 0;
  bool straggler = false;
  double sm_clock_mhz = 0;            // mean over the measured steps; 0: no telemetry
  std::vector<std::string> throttle;  // clock-limit reasons seen
};

struct StragglerReport {
  std::string run;
  std::vector<RankStat> ranks;        // by rank
  std::vector<std::vector<double>> steps;  // per rank (same order), the raw step times, for the timeline
  int slowest = -1;                   // rank number
  double spread = 0, jitter = 0;
  std::string summary() const;        // "slowest rank 3 (node1 GPU 3): median 118.2 ms, +17.6% over ..."
};

std::vector<StragglerReport> analyze_stragglers(const std::vector<const nlohmann::json*>& rank_steps);

struct ScaleRow {
  int gpus = 0;
  std::string source;   // "measured" (multi-GPU run), "proxy" (per-GPU shard on one GPU), "projected"
  std::string status = "ok", reason;
  double tokens_per_s_per_gpu = 0, step_s = 0, efficiency = 0;
  double comm_share = -1;  // exposed communication / step; -1 unknown
  std::string mode;
};
std::vector<ScaleRow> scale_rows(const std::vector<const nlohmann::json*>& scale_points);  // efficiency filled

struct SweepRow {
  nlohmann::json point;  // {key: value}
  std::string name, status, reason, dir;
  bool resumed = false, best = false;
  double tokens_per_s_per_gpu = 0, step_s = 0, tflops_per_gpu = 0, mfu = 0, peak_alloc_gib = 0;
};
std::vector<SweepRow> sweep_rows(const std::vector<const nlohmann::json*>& sweep_points);  // deduped, best marked

}  // namespace tb::report
