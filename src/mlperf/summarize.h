// mlperf/summarize.h: the score of several runs' MLLOG files, as MLCommons' result summarizer computes it
// (mlperf_logging/result_summarizer/result_summarizer.py):
//   time to train of a file = (first run_stop time_ms - first run_start time_ms) / 60000   (minutes)
//   a file is dropped when the compliance checker fails it (closed: also a run that never reached the target), or,
//     without the checker, when its run_stop status is not success; at most 1 may be dropped (else no score)
//   score = olympic mean: the times sorted, keep t[1 : n - (1 - dropped)], their mean
// The rules want exactly Benchmark::runs files per result (10 for Llama 2 70B LoRA, 3 for GPT-3); another count
// still gets a score, marked not valid with the reason.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "mlperf/compliance.h"

namespace tb::mlperf {

struct LogSummary {
  std::filesystem::path file;
  std::string benchmark, division, status;  // status: run_stop's
  std::optional<double> ttt_min;            // absent: no run_start / run_stop
  std::string not_comparable;              // why not (the trainbench_data key: a proxy run); "" when comparable
  std::vector<CheckerVerdict> verdicts;     // one per ruleset
  bool dropped = false;
  std::string drop_reason;
};

struct Summary {
  std::string benchmark;
  std::vector<LogSummary> logs;
  int dropped = 0, runs_required = 0;
  std::optional<double> score_min;  // olympic mean
  bool valid = false;               // a score the rules would accept (count, drops, real data)
  std::vector<std::string> notes;   // why not valid, checker availability
};

// Olympic mean of `scores` when `dropped` of the runs were already dropped, max_dropped 1 (result_summarizer's
// _compute_olympic_average); nullopt when nothing remains.
std::optional<double> olympic_mean(std::vector<double> scores, int dropped, int max_dropped = 1);

// Reads one MLLOG file (lines without ":::MLLOG " are skipped; a malformed one raises Error{config} with file:line).
LogSummary read_log(const std::filesystem::path& file);

// Every result_*.txt in `dir` (sorted by name); each checked against `rulesets` when the checker can run (none given:
// not checked).
Summary summarize(const std::filesystem::path& dir, const std::vector<std::string>& rulesets,
                  const std::string& pythonpath);

}  // namespace tb::mlperf
