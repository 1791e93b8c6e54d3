// train/packed_data.h: packed fine-tuning data (core/packing.h): rows of seq tokens holding several documents, each a
// prompt followed by its answer, and the loss mask that counts the answers only. Both sources are counter-based like
// train/data.h's: row k of the stream depends on (seed, k) only, so next(8) yields next(4) twice.
//
// Rows. Row k draws documents from its own random stream and appends each while it fits; the first that does not fit
// (or the synthetic packers' most documents per row) ends the row and the rest of the row is padding (token 0, target
// 0, not counted). A document of L tokens w[0..L)
// gives positions i < L with target w[i+1] (i < L - 1); its last position has no target (target 0, not counted). The
// loss counts the targets of the document's loss spans: for a prompt of P tokens and an answer of A (L = P + A), the
// answer's A tokens, i.e. positions [P - 1, L - 1). Counted tokens of a row: the sum of its documents' answers.
//
// PackedSynthetic: document lengths drawn from a lognormal model of a public dataset (prompt and answer apart; mean m,
// log-sd s: exp(ln m - s^2 / 2 + s z), z standard normal, rounded, at least the minimum), tokens of the markov chain
// (train/row_rng.h) restarted in each document: every counted target has entropy ln 4 given the token before it (the
// loss floor). Words to tokens: 1.3 tokens per English word (a SentencePiece / BPE rule of thumb) plus the template.
//   squad      SQuAD v1.1 (Rajpurkar et al. 2016, 87,599 training questions on Wikipedia paragraphs), in the prompt
//              form of NeMo's SQuAD fine-tuning ("Context: ... Question: ... Answer:"). Published averages (Reddy et
//              al. 2019, CoQA, Table 3, for SQuAD): paragraph 117 words, question 10.1, answer 3.2. Prompt: mean
//              1.3 (117 + 10.1) + 10 = 175 tokens, log-sd 0.45, at least 16; answer: 1.3 x 3.2 + 1 (end of text) = 5.2
//              tokens, log-sd 0.6, at least 2.
//   govreport  GovReport (Huang et al. 2021, NAACL, Table 1: 19,466 reports of 9,409.4 words on average, summaries of
//              553.4 words), the MLPerf Llama 2 70B LoRA task (a report, then its summary). Prompt: mean
//              1.3 x 9,409.4 + 10 = 12,242 tokens, log-sd 0.6, at least 256; answer: 1.3 x 553.4 + 1 = 720 tokens,
//              log-sd 0.35, at least 16. A document longer than the sequence is cut as MLPerf's samples are (to 8,192
//              tokens): the answer to at most half the sequence, then the prompt to the rest.
//
// PackedFile: pre-tokenised documents in two files, FILE.bin (the tokens of every document back to back, little-endian
// uint16 or uint32, no header: train/data.h's token file) and FILE.index (little-endian):
//   offset 0        8 bytes   magic "TBPACK01"
//          8        u32       bytes per token in FILE.bin: 2 or 4
//          12       u32       0 (reserved)
//          16       u64 D     documents
//          24       u64 S     loss spans
//          32       D x 16    per document: u64 its first token in FILE.bin, u32 its tokens L >= 1, u32 its first span
//          32 + 16D S x 8     per span: u32 begin, u32 end: target positions [begin, end) of the document whose loss
//                             counts (position i's target is the document's token i + 1, so end <= L - 1)
//   Document d's spans are [first span of d, first span of d + 1) (S for the last), ascending and disjoint; a document
//   without spans counts nothing. scripts/convert_mlperf_govreport.py writes the MLPerf dataset in this format.
//   The constructor checks the whole index (sizes, bounds, spans) and refuses a document longer than the sequence,
//   naming it; drawn tokens are checked against the vocabulary in next() (as the token file does).
//   next() packs rows of randomly drawn documents (row k's from its own stream); documents(first, n) reads a fixed set
//   in order, one document per row (MLPerf's train and eval samples, mlperf/data.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "train/data.h"
#include "train/mapped_file.h"

namespace tb::train {

enum class Packing { squad, govreport };
std::string_view packing_name(Packing p);  // "squad" | "govreport"

// The lognormal length model of a packing (above): prompt and answer tokens.
struct LengthModel {
  double prompt_mean, prompt_log_sd;
  int prompt_min;
  double answer_mean, answer_log_sd;
  int answer_min;
};
LengthModel length_model(Packing p);

class PackedSynthetic {
 public:
  PackedSynthetic(Packing kind, int vocab, int seq, std::uint64_t seed);
  Batch next(int batch);
  void skip(std::int64_t rows) { next_row_ += rows; }
  // A row holds at most 3 seq / (mean prompt + mean answer) documents (next() stops there; at most seq over the
  // minimum lengths): the segment capacity the CUDA attention is planned for.
  int max_documents_per_row() const;
  double loss_floor() const;          // ln 4 (the markov chain), over the counted targets

 private:
  Packing kind_;
  LengthModel model_;
  int vocab_, seq_;
  std::uint64_t seed_;
  std::int64_t next_row_ = 0;
};

class PackedFile {
 public:
  // index: FILE.index (FILE.bin beside it); vocab > 0: drawn tokens are checked against it.
  PackedFile(const std::filesystem::path& index, int seq, std::uint64_t seed, int vocab = 0);
  Batch next(int batch);
  void skip(std::int64_t rows) { next_row_ += rows; }
  std::int64_t documents() const { return docs_; }
  int max_documents_per_row() const { return max_docs_; }  // as many of the shortest documents as fit a row
  // A fixed data set read in order (MLPerf's samples): row r holds document (first + r) mod D alone, then padding.
  Batch documents(std::int64_t first, int count) const;
  int longest_document() const { return longest_; }  // tokens
  std::uint32_t largest_token() const;                 // over every document (a pass over FILE.bin)

 private:
  struct Doc {
    std::uint64_t first;
    std::uint32_t tokens, first_span;
  };
  Doc doc(std::int64_t d) const;
  void span(std::int64_t s, std::uint32_t& begin, std::uint32_t& end) const;
  // Writes document d into row r of b from position at (tokens, targets, its loss spans); returns its tokens.
  int put(Batch& b, int r, int at, std::int64_t d, std::vector<std::int32_t>& scratch) const;

  std::string name_;  // "packed data 'FILE.index'"
  int seq_, vocab_;
  std::uint64_t seed_;
  MappedFile index_, tokens_;
  TokenType type_ = TokenType::uint16;
  std::int64_t docs_ = 0, spans_ = 0;
  int max_docs_ = 1, longest_ = 0;
  std::int64_t next_row_ = 0;
};

}  // namespace tb::train
