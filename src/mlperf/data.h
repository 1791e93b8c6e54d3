// mlperf/data.h: the sequences an MLPerf run trains and evaluates on: a fixed train set and a fixed eval set.
//
// Real data (--data DIR): the benchmark's preprocessed data set converted into trainbench's packed format
// (scripts/convert_mlperf_govreport.py writes OUT.bin + OUT.index); DIR must hold train.{bin,index} and
// validation.{bin,index}. check_data_dir says what is missing. Reading it goes through the packed-data reader
// (train/packed_data.h); until this build has one, a complete DIR is refused with that reason.
//
// Synthetic (no --data): a convergence task with its own target, not comparable with MLPerf results. "class chain"
// over V tokens and C classes: w[0] uniform; w[i+1] = succ(w[i] mod C) with probability 1 - eps, else uniform in
// [0, V) (succ(c) = a seeded hash of c, mod V). The ideal model's loss (nats per token):
//   floor = -(1 - eps + eps/V) ln(1 - eps + eps/V) - (V - 1) (eps/V) ln(eps/V)
// (V 64, C 8, eps 0.1: 0.729). The next token depends on the class only, so the map to learn has rank C: LoRA
// adapters of rank 16 on a frozen base can learn it. Row k of a split depends only on (task seed, split, k).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tb::mlperf {

struct Rows {
  std::vector<std::int32_t> tokens, targets;  // [batch, seq] row-major; targets[i] follows tokens[i]
  int batch = 0, seq = 0;
};

struct ChainTask {
  int vocab = 64, classes = 8, seq = 32;
  double eps = 0.1;
  std::uint64_t seed = 20240501;  // the task's (fixed: every run sees the same data set)
  int train_rows = 3901, eval_rows = 173;  // as the MLPerf GovReport sets

  double loss_floor() const;
  // count rows of the split starting at row `first` (train rows wrap around: epochs)
  Rows rows(bool eval, std::int64_t first, int count) const;
};

// Problems with an MLPerf data folder for `benchmark`: "" when it holds every expected file, else one message with
// the folder, what is missing and how to make it.
std::string check_data_dir(const std::filesystem::path& dir, const std::string& files_needed);

}  // namespace tb::mlperf
