// mlperf/data.h: the sequences an MLPerf run trains and evaluates on: a fixed train set and a fixed eval set, read as
// rows of train/data.h's Batch (train rows wrap around: epochs; row k of a split is always the same row).
//
// Real data (--data DIR, PackedSet): the benchmark's preprocessed data set converted into trainbench's packed format
// (scripts/convert_mlperf_govreport.py writes OUT.bin + OUT.index); DIR holds train.{bin,index} and
// validation.{bin,index}, read by train/packed_data.h's PackedFile one document (an MLPerf sample) per row, its loss
// mask counting the summary's targets. Rows are as long as the longest document of the two sets (8,192 tokens for
// the real set); the vocabulary is the largest token id + 1 (a proxy model needs no more; Llama 2's is 32,000).
// check_data_dir says what is missing.
//
// Synthetic (no --data, ChainTask): a convergence task with its own target, not comparable with MLPerf results.
// "class chain" over V tokens and C classes: w[0] uniform; w[i+1] = succ(w[i] mod C) with probability 1 - eps, else
// uniform in [0, V) (succ(c) = a seeded hash of c, mod V). The ideal model's loss (nats per token):
//   floor = -(1 - eps + eps/V) ln(1 - eps + eps/V) - (V - 1) (eps/V) ln(eps/V)
// (V 64, C 8, eps 0.1: 0.729; eps 0.45: 2.522). The next token depends on the class only, so the map to learn has rank
// C: LoRA adapters of rank 16 on a frozen base can learn it. Row k of a split depends only on (task seed, split, k).
// ChainTask::llama2_70b_lora(): V 64, seq 32, eps 0.1, 3,901 train and 173 eval rows (as the MLPerf GovReport sets).
// ChainTask::gpt3(): V 64, eps 0.45, rows of 2,048 tokens packed with 64 chains of 32 (documents: each restarts, the
// attention stays within it, as packed pretraining rows), 4,096 train and 4 eval rows; its floor 2.522 lies below the
// GPT-3 target log perplexity 2.69, which the proxy reaches as the benchmark does, from a pretrained checkpoint.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "train/data.h"
#include "train/packed_data.h"

namespace tb::mlperf {

class Dataset {
 public:
  virtual ~Dataset() = default;
  // count rows of a split from row `first` (train rows wrap around; eval rows must exist)
  virtual train::Batch rows(bool eval, std::int64_t first, int count) const = 0;
  std::int64_t train_rows = 0, eval_rows = 0;
  int vocab = 0, seq = 0;
  std::string label;  // what the data is, for the log (trainbench_data) and the record
};

struct ChainTask final : Dataset {
  int classes = 8;
  double eps = 0.1;
  int doc_len = 0;                // > 0: each row holds seq / doc_len chains of doc_len tokens (packed documents)
  std::uint64_t seed = 20240501;  // the task's (fixed: every run sees the same data set)

  static ChainTask llama2_70b_lora();
  static ChainTask gpt3();
  double loss_floor() const;
  train::Batch rows(bool eval, std::int64_t first, int count) const override;
};

class PackedSet final : public Dataset {
 public:
  // dir/train.index and dir/validation.index (with their .bin), documents of at most max_seq tokens
  PackedSet(const std::filesystem::path& dir, int max_seq);
  train::Batch rows(bool eval, std::int64_t first, int count) const override;

 private:
  std::optional<train::PackedFile> train_, eval_;
};

// Problems with an MLPerf data folder for `benchmark`: "" when it holds every expected file, else one message with
// the folder, what is missing and how to make it.
std::string check_data_dir(const std::filesystem::path& dir, const std::string& files_needed);

}  // namespace tb::mlperf
