// report/charts.h: the report's charts, drawn by gnuplot (pngcairo) from data files written next to a generated
// script, one PNG per chart (embedded in the HTML as base64). Each chart only when its records exist:
//   scaling         tokens/s per GPU (left axis) and efficiency (right axis) vs GPUs, one line per source
//   sweep           tokens/s per GPU per sweep point (bars; skipped points absent), the best one marked
//   rank_dist       step-time distribution per rank: box p10..p90, whiskers min..max, median tick ("rank_steps")
//   rank_timeline   step time per step, one line per rank (jitter, stragglers)
//   telemetry       power (W), SM clock (MHz) and temperature (C) against time, per GPU ("telemetry.series")
//   busbw           NCCL busbw vs message size per collective (log x), expected minimum of the check dashed
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "report/inputs.h"

namespace tb::report {

struct Chart {
  std::string id, title, caption;
  std::string png;  // the image's bytes
};

struct ChartOptions {
  std::filesystem::path workdir;  // data files, scripts and PNGs go here (kept: they reproduce the charts)
  std::string gnuplot = "gnuplot";
};

// Charts that could not be drawn (gnuplot missing or failing) raise Error{io} with gnuplot's output.
std::vector<Chart> build_charts(const Inputs& in, const ChartOptions& opt);

}  // namespace tb::report
