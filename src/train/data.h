// train/data.h: training batches, synthetic (seeded) or from a memory-mapped pre-tokenised file.
//
// A Batch is `batch` rows of `seq` tokens, row-major; targets[i] is the token that follows tokens[i] (each row
// is a window of seq + 1 tokens w: tokens = w[0..seq), targets = w[1..seq]).
//
// Both sources are counter-based: row k of the stream (k = 0, 1, 2, ... over all next() calls) depends only on
// (seed, k), so next(8) yields the same rows as next(4) twice (gradient accumulation does not change the data)
// and two instances with the same seed give the same batches, on any platform (own splitmix64, not <random>).
// For data parallelism give each rank its own seed (e.g. seed + rank).
//
// SyntheticData tasks (V = vocab, S = seq):
//   random: every token uniform in [0, V), independent. Not learnable: loss floor = ln V. For throughput runs.
//   copy:   the window repeats a random prefix of h = floor(S / 2) tokens: w[i] = w[i mod h] for i >= h
//           (w[0..h) uniform). The target at position i is w[i + 1]: unpredictable for i + 1 < h (h - 1
//           positions, floor ln V each), a copy of the already-seen token w[i + 1 - h] otherwise (floor 0).
//           Mean loss floor = (h - 1) / S * ln V, e.g. S = 8: 3/8 ln V. Needs S >= 2. Learnable only through
//           an induction mechanism (attend h tokens back): slow to learn for small models.
//   markov: a fixed random chain: token v is followed by one of the K = 4 tokens (base(v) + j) mod V,
//           j uniform, base(v) a seeded hash of v (w[0] uniform). Every target has entropy ln 4 given its
//           predecessor: loss floor = ln 4. Learnable within a few hundred steps (the demo task). Needs V >= 4.
//
// TokenFile: tokens back to back, little-endian uint16 or uint32, no header (the nanoGPT / Megatron .bin
// format). Mapped read-only with mmap and unmapped on destruction. Row k is the window of seq + 1 tokens
// starting at a position drawn uniformly (from (seed, k)) in [0, n - seq - 1]. The constructor checks that
// the file exists, is a regular non-empty file, has a size that is a multiple of the token size and holds at
// least seq + 1 tokens. Tokens are checked on the fly in next() (each drawn token < vocab when vocab > 0,
// and <= INT32_MAX always); validate(vocab) scans the whole file once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/packing.h"
#include "train/mapped_file.h"

namespace tb::train {

struct Batch {
  std::vector<std::int32_t> tokens;   // [batch, seq] row-major
  std::vector<std::int32_t> targets;  // [batch, seq]: the token after each token
  int batch = 0;
  int seq = 0;
  // Packed rows (core/packing.h; train/packed_data.h): the documents of each row (empty: one filling each row), and
  // which targets the loss counts [batch, seq] (1 counted; empty: every one).
  std::vector<std::int32_t> doc_lens, row_docs;
  std::vector<std::uint8_t> loss_mask;
  Documents docs() const { return {doc_lens, row_docs}; }
  std::int64_t loss_tokens() const;  // the targets the loss counts
};

// What a step's micro-batches hold (every data-parallel rank's together): tokens (rows x seq), the targets the loss
// counts, and the documents' tokens and squared lengths (model/flops.h packed_flops; unpacked rows are one document
// each, padding never is one).
struct StepTokens {
  double tokens = 0, loss_tokens = 0, doc_tokens = 0, doc_squares = 0;
  bool packed = false;
  void add(const Batch& b);
};

// The loss of a step over packed data (a loss mask) is the mean cross-entropy over the counted targets of the whole
// step: every data-parallel rank draws the step's M micro-batches (train/trainer.h), so each knows their counted
// targets N without communication. Micro-batch m's loss weights w = mask · M / N (ops/cpu/cross_entropy.h) keep the
// trainers' unmasked arithmetic: its loss sum_r w_r CE_r replaces its mean, the step's loss is the mean over the M
// micro-batches (sum_m sum_r mask CE / N), and each micro-batch's gradient keeps the scale 1 / M. (Gradient
// accumulation and data parallel thus weight every counted token alike, however the counted tokens fall in the
// micro-batches, as Megatron-LM's per-token loss does.) Empty for a batch without a mask; zeros when N is 0.
std::vector<double> loss_weights(const Batch& b, int micro_batches, std::int64_t counted);

enum class Task { random, copy, markov };
std::string_view task_name(Task task);  // "random" | "copy" | "markov"

class SyntheticData {
 public:
  SyntheticData(int vocab, int seq, std::uint64_t seed, Task task);

  Batch next(int batch);      // the next `batch` rows of the stream
  double loss_floor() const;  // mean cross-entropy (nats per token) of the ideal model, formula above

  int vocab() const { return vocab_; }
  int seq() const { return seq_; }
  Task task() const { return task_; }
  std::int64_t rows_drawn() const { return next_row_; }
  void skip(std::int64_t rows) { next_row_ += rows; }

 private:
  int vocab_;
  int seq_;
  std::uint64_t seed_;
  Task task_;
  std::int64_t next_row_ = 0;
};

enum class TokenType { uint16, uint32 };
std::string_view token_type_name(TokenType type);  // "uint16" | "uint32"
std::size_t token_bytes(TokenType type);           // 2 | 4

// Token i of little-endian tokens of `type` at `tokens` (no checks).
std::uint32_t read_token(const std::byte* tokens, TokenType type, std::int64_t i);

class TokenFile {
 public:
  // vocab > 0: tokens drawn by next() are checked against it; 0: no vocabulary check.
  TokenFile(const std::filesystem::path& path, TokenType type, int seq, std::uint64_t seed, int vocab = 0);

  Batch next(int batch);
  void validate(int vocab) const;  // scans every token; throws naming the file, index and value of the first bad one

  void skip(std::int64_t rows) { next_row_ += rows; }
  std::int64_t size() const { return map_.data() ? n_ : 0; }  // tokens in the file (0 once moved from)
  std::uint32_t at(std::int64_t i) const;   // raw token i (no checks beyond the index)
  const std::filesystem::path& path() const { return path_; }
  TokenType type() const { return type_; }
  int seq() const { return seq_; }

 private:
  std::filesystem::path path_;
  TokenType type_;
  int seq_;
  std::uint64_t seed_;
  int vocab_;
  MappedFile map_;
  std::int64_t n_ = 0;
  std::int64_t next_row_ = 0;
};

// The --data argument behind one next(batch): "markov", "copy", "random" (synthetic tasks), "packed-squad",
// "packed-govreport" (synthetic packed documents, train/packed_data.h), the path of a packed-data index (FILE.index,
// train/packed_data.h) or the path of a token file of `token_type`. loss_floor(): the synthetic task's (0 for a file).
class PackedSynthetic;
class PackedFile;
class DataSource {
 public:
  DataSource(const std::string& data, TokenType token_type, int vocab, int seq, std::uint64_t seed);
  ~DataSource();
  Batch next(int batch);
  void skip(std::int64_t rows);  // as if next() had drawn `rows` rows (a resumed run continues the stream)
  double loss_floor() const { return floor_; }
  // Packed rows: the most documents a row holds (0: not packed).
  int max_documents_per_row() const;

 private:
  std::variant<std::monostate, SyntheticData, TokenFile, std::unique_ptr<PackedSynthetic>, std::unique_ptr<PackedFile>>
      data_;
  double floor_ = 0;
};

}  // namespace tb::train
