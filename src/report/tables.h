// report/tables.h: every table of a report, built once from the records and rendered three ways (render.h), so
// the HTML, Markdown and CSV tables hold the same cells by construction. Tables (each only when it has rows):
//   provenance   run.json of each run: run id, time, host, GPUs, driver/CUDA, build, command
//   comparison   "run" records against the published references (report/compare.h): ours and the reference's
//                tokens/s per GPU, step, TFLOP/s, MFU, ratio, verdict
//   train        "train" records: step time median/p10/p90, tokens/s, TFLOP/s, MFU, memory, power, J/token
//   sweep        "sweep.point" records: the point's keys, status, tokens/s per GPU, step, MFU, memory, reason;
//                the best point highlighted (analysis.h)
//   scaling      "scale.point" records: GPUs, source (measured | proxy | projected), tokens/s per GPU, step,
//                efficiency vs the smallest count, communication share
//   stragglers   "rank_steps" records: per rank median/p10/p90/max, vs the median of ranks, jitter, flag
//   check        "check" records (the system check's verdicts): measured, expected, verdict
//   collectives  micro.nccl.* records: op, bytes, time, algbw, busbw
#pragma once

#include <string>
#include <vector>

#include "recipe/reference.h"
#include "report/inputs.h"

namespace tb::report {

struct Table {
  std::string id, title;
  std::vector<std::string> notes;  // sentences shown above the table (e.g. the slowest rank)
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;
  std::vector<int> highlight;      // row indexes drawn highlighted (the best sweep point, stragglers)
  // The same rows for CSV (render.h): headers named as the record keys with the unit in the name (step_ms,
  // tokens_per_s_per_gpu, peak_alloc_gib; fractions such as mfu and efficiency unitless, 0.5 = 50%), cells plain
  // numbers in that unit or text, "" where there is no value. A human column may be two CSV columns (loss first ->
  // last: loss_first, loss_last).
  std::vector<std::string> csv_columns;
  std::vector<std::vector<std::string>> csv_rows;
};

// refs: the published reference rows (empty: each run record's own "comparison" is used as it is).
std::vector<Table> build_tables(const Inputs& in, const std::vector<recipe::ReferenceRow>& refs);

}  // namespace tb::report
