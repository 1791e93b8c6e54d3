// mlperf/summarize.cpp: read the logs, check them, drop and average as the result summarizer does.
#include "mlperf/summarize.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <regex>

#include "core/error.h"
#include "mlperf/benchmark.h"

namespace tb::mlperf {
namespace {

// Of `rulesets`, those whose compliance checker holds `benchmark` (all of them for a benchmark trainbench does not
// know); a note names each one left out.
std::vector<std::string> rulesets_holding(const std::string& benchmark, const std::vector<std::string>& rulesets,
                                          std::vector<std::string>& notes) {
  const auto b = std::ranges::find(benchmarks(), benchmark, &Benchmark::name);
  if (b == benchmarks().end()) return rulesets;
  std::vector<std::string> out;
  for (const auto& r : rulesets) {
    if (std::ranges::find(b->rulesets, r) != b->rulesets.end())
      out.push_back(r);
    else
      notes.push_back(fmt::format("ruleset {} does not hold {} (its rulesets: {}): not checked against it", r, b->name,
                                  fmt::join(b->rulesets, ", ")));
  }
  return out;
}

}  // namespace

std::optional<double> olympic_mean(std::vector<double> scores, int dropped, int max_dropped) {
  std::sort(scores.begin(), scores.end());
  const long lo = max_dropped, hi = long(scores.size()) - (max_dropped - dropped);
  if (hi <= lo) return std::nullopt;
  return std::accumulate(scores.begin() + lo, scores.begin() + hi, 0.0) / double(hi - lo);
}

LogSummary read_log(const std::filesystem::path& file) {
  LogSummary s;
  s.file = file;
  std::ifstream in(file);
  if (!in) raise_config(fmt::format("{}: cannot read", file.string()));
  std::optional<double> start, stop;
  std::string line;
  constexpr std::string_view kTag = ":::MLLOG ";
  for (int n = 1; std::getline(in, line); ++n) {
    const auto at = line.find(kTag);
    if (at == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line.substr(at + kTag.size()));
    } catch (const std::exception& e) {
      raise_config(fmt::format("{}:{}: not an MLLOG line: {}", file.string(), n, e.what()));
    }
    const std::string key = j.value("key", "");
    const double t = j.value("time_ms", 0.0);
    if (key == "submission_benchmark" && j["value"].is_string()) s.benchmark = j["value"];
    if (key == "submission_division" && j["value"].is_string()) s.division = j["value"];
    if (key == "trainbench_data" && j["value"].is_string()) s.not_comparable = j["value"];
    if (key == "run_start" && !start) start = t;
    if (key == "run_stop" && !stop) {
      stop = t;
      if (j.contains("metadata") && j["metadata"].contains("status")) s.status = j["metadata"]["status"];
    }
  }
  if (start && stop) s.ttt_min = (*stop - *start) / 60000.0;
  return s;
}

Summary summarize(const std::filesystem::path& dir, const std::vector<std::string>& rulesets,
                  const std::string& pythonpath) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) raise_config(fmt::format("mlperf summarize {}: not a folder", dir.string()));
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && std::regex_match(e.path().filename().string(), std::regex(R"(result_\d+\.txt)")))
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  if (files.empty())
    raise_config(fmt::format("mlperf summarize {}: no result_*.txt logs (trainbench mlperf writes them)", dir.string()));

  Summary sum;
  const std::string unavailable = rulesets.empty() ? "no ruleset given" : checker_unavailable(pythonpath);
  if (!unavailable.empty()) sum.notes.push_back("compliance not checked: " + unavailable);
  std::vector<double> times;
  std::string not_comparable;
  std::vector<std::string> checked;  // the rulesets that hold the benchmark (the first log's)
  for (const fs::path& f : files) {
    LogSummary s = read_log(f);
    if (sum.benchmark.empty()) {
      sum.benchmark = s.benchmark;
      if (unavailable.empty()) checked = rulesets_holding(s.benchmark, rulesets, sum.notes);
    }
    if (s.benchmark != sum.benchmark)
      raise_config(fmt::format("mlperf summarize: {} is {}, {} is {}: one benchmark per folder", files[0].string(),
                               sum.benchmark, f.string(), s.benchmark));
    if (unavailable.empty())
      for (const auto& r : checked) s.verdicts.push_back(check_compliance(f, r, pythonpath));
    for (const auto& v : s.verdicts)
      if (v.checked && !v.passed && !s.dropped) s.dropped = true, s.drop_reason = "compliance " + v.ruleset + ": " + v.why;
    if (!s.dropped && s.status != "success")
      s.dropped = true, s.drop_reason = fmt::format("run_stop status '{}'", s.status);
    if (!s.dropped && !s.ttt_min) s.dropped = true, s.drop_reason = "no run_start / run_stop";
    if (s.dropped) ++sum.dropped;
    else times.push_back(*s.ttt_min);
    if (not_comparable.empty()) not_comparable = s.not_comparable;
    sum.logs.push_back(std::move(s));
  }
  try {
    sum.runs_required = find_benchmark(sum.benchmark).runs;
  } catch (const Error&) {
    sum.notes.push_back(fmt::format("benchmark '{}' is not one trainbench knows: run count not checked", sum.benchmark));
  }
  constexpr int kMaxDropped = 1;  // 4 for unet3d, which trainbench does not run
  if (sum.dropped > kMaxDropped)
    sum.notes.push_back(fmt::format("{} runs dropped (at most {}): no score", sum.dropped, kMaxDropped));
  else
    sum.score_min = olympic_mean(times, sum.dropped, kMaxDropped);
  if (!sum.score_min && sum.dropped <= kMaxDropped)
    sum.notes.push_back(fmt::format("{} usable runs: too few for an olympic mean", times.size()));
  if (sum.runs_required > 0 && int(files.size()) != sum.runs_required)
    sum.notes.push_back(fmt::format("{} logs; the rules want exactly {} for a {} result", files.size(),
                                    sum.runs_required, sum.benchmark));
  if (!not_comparable.empty()) sum.notes.push_back(not_comparable);
  sum.valid = sum.score_min && not_comparable.empty() && unavailable.empty() && int(files.size()) == sum.runs_required;
  return sum;
}

}  // namespace tb::mlperf
