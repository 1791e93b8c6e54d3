// mlperf/data.cpp: the class-chain task (counter-based, core/counter_rng.h), the converted data set and the data
// folder's check.
#include "mlperf/data.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/counter_rng.h"
#include "core/error.h"

namespace tb::mlperf {

ChainTask ChainTask::llama2_70b_lora() {
  ChainTask t;
  t.train_rows = 3901, t.eval_rows = 173, t.vocab = 64, t.seq = 32;
  t.label = "synthetic class-chain task on a CPU proxy model: not comparable with MLPerf results";
  return t;
}

ChainTask ChainTask::gpt3() {
  ChainTask t;
  t.train_rows = 4096, t.eval_rows = 4, t.vocab = 64, t.seq = 2048, t.doc_len = 32, t.eps = 0.45;
  t.label = "synthetic class-chain task (packed rows of 2,048 tokens) on a CPU proxy model: not comparable with MLPerf "
            "results";
  return t;
}

double ChainTask::loss_floor() const {
  const double q = eps / vocab, p = 1 - eps + q;
  return -p * std::log(p) - (vocab - 1) * q * std::log(q);
}

train::Batch ChainTask::rows(bool eval, std::int64_t first, int count) const {
  TB_REQUIRE(count > 0 && seq > 0 && vocab >= classes && classes > 0 && (doc_len == 0 || seq % doc_len == 0),
             "MLPerf chain task: bad shape");
  train::Batch r;
  r.batch = count, r.seq = seq;
  r.tokens.resize(std::size_t(count) * seq);
  r.targets.resize(r.tokens.size());
  const std::int64_t n = eval ? eval_rows : train_rows;
  const std::uint64_t split = splitmix64(seed ^ (eval ? 0xe7a1ull : 0x7a11ull));
  for (int b = 0; b < count; ++b) {
    const std::int64_t row = eval ? first + b : (first + b) % n;
    TB_REQUIRE(row < n, fmt::format("MLPerf chain task: eval row {} of {}", row, n));
    const std::uint64_t rs = splitmix64(split + std::uint64_t(row));
    auto draw = [&](std::uint64_t i) { return uniform_value(rs, i); };
    std::int32_t w = 0;
    for (int i = 0; i < seq; ++i) {
      if (i == 0 || (doc_len > 0 && i % doc_len == 0))  // a chain starts: its first token uniform
        w = std::int32_t(draw(i == 0 ? 0 : 2 * std::uint64_t(seq) + 1 + std::uint64_t(i)) * float(vocab)) % vocab;
      std::int32_t next;
      if (draw(2 * std::uint64_t(i) + 1) < float(eps))
        next = std::int32_t(draw(2 * std::uint64_t(i) + 2) * float(vocab)) % vocab;
      else
        next = std::int32_t(splitmix64(seed + std::uint64_t(w % classes)) % std::uint64_t(vocab));
      r.tokens[std::size_t(b) * seq + i] = w;
      r.targets[std::size_t(b) * seq + i] = next;
      w = next;
    }
    if (doc_len > 0) {
      r.row_docs.push_back(seq / doc_len);
      r.doc_lens.insert(r.doc_lens.end(), std::size_t(seq / doc_len), doc_len);
    }
  }
  return r;
}

PackedSet::PackedSet(const std::filesystem::path& dir, int max_seq) {
  // Open once to learn the longest document, then at that row length (the index is checked each time).
  const auto train_index = dir / "train.index", eval_index = dir / "validation.index";
  seq = std::max(train::PackedFile(train_index, max_seq, 0).longest_document(),
                 train::PackedFile(eval_index, max_seq, 0).longest_document());
  train_.emplace(train_index, seq, 0);
  eval_.emplace(eval_index, seq, 0);
  vocab = int(std::max(train_->largest_token(), eval_->largest_token())) + 1;
  train_rows = train_->documents(), eval_rows = eval_->documents();
  label = fmt::format("MLPerf data converted in {} ({} train, {} eval samples) on a CPU proxy model: not comparable "
                      "with MLPerf results",
                      dir.string(), train_rows, eval_rows);
}

train::Batch PackedSet::rows(bool eval, std::int64_t first, int count) const {
  TB_REQUIRE(!eval || first + count <= eval_rows,
             fmt::format("MLPerf data: eval rows [{}, {}) of {}", first, first + count, eval_rows));
  return (eval ? *eval_ : *train_).documents(first, count);
}

std::string check_data_dir(const std::filesystem::path& dir, const std::string& files_needed) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return fmt::format("--data {}: not a folder; it must hold {}", dir.string(), files_needed);
  std::vector<std::string> missing;
  for (const char* f : {"train.bin", "train.index", "validation.bin", "validation.index"})
    if (!fs::is_regular_file(dir / f, ec)) missing.push_back(f);
  if (missing.empty()) return "";
  return fmt::format("--data {}: missing {}; the folder must hold {} (docs/MLPERF.md, 'Real data')", dir.string(),
                     fmt::join(missing, ", "), files_needed);
}

}  // namespace tb::mlperf
