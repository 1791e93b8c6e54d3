// train/packed_data.cpp: the packers of packed_data.h: synthetic documents from the length models, and the reader of
// FILE.index + FILE.bin.
#include "train/packed_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "train/row_rng.h"

namespace tb::train {
namespace {

constexpr char kMagic[8] = {'T', 'B', 'P', 'A', 'C', 'K', '0', '1'};
constexpr std::size_t kHeaderBytes = 32, kDocBytes = 16, kSpanBytes = 8;

template <class T>
T read_le(const std::byte* p) {  // the index is little-endian, as this host (train/data.cpp asserts it)
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Appends a document of `tokens` whose loss counts targets [begin, end) of each span to row `r`, at `at`.
struct RowWriter {
  Batch& b;
  int r;
  int at = 0;
  std::size_t offset() const { return std::size_t(r) * std::size_t(b.seq) + std::size_t(at); }
  void document(const std::vector<std::int32_t>& tokens) {
    const std::size_t o = offset();
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      b.tokens[o + i] = tokens[i];
      b.targets[o + i] = i + 1 < tokens.size() ? tokens[i + 1] : 0;
    }
    b.doc_lens.push_back(std::int32_t(tokens.size()));
    ++b.row_docs[std::size_t(r)];
  }
  void count(std::uint32_t begin, std::uint32_t end) {  // targets [begin, end) of the document just written
    const std::size_t o = offset();
    for (std::uint32_t i = begin; i < end; ++i) b.loss_mask[o + i] = 1;
  }
};

Batch empty_batch(int batch, int seq) {
  Batch b;
  b.batch = batch, b.seq = seq;
  const std::size_t n = std::size_t(batch) * std::size_t(seq);
  b.tokens.assign(n, 0), b.targets.assign(n, 0), b.loss_mask.assign(n, 0);
  b.row_docs.assign(std::size_t(batch), 0);
  return b;
}

int lognormal(RowRng& rng, double mean, double log_sd, int min) {
  const double x = std::exp(std::log(mean) - 0.5 * log_sd * log_sd + log_sd * rng.normal());
  return std::max(min, int(std::min(std::lround(x), long(std::numeric_limits<int>::max() / 4))));
}

}  // namespace

std::string_view packing_name(Packing p) { return p == Packing::squad ? "squad" : "govreport"; }

// The published averages in words (packed_data.h), to tokens: 1.3 per word, a 10-token prompt template and an
// end-of-text token after the answer.
LengthModel length_model(Packing p) {
  constexpr double kTokensPerWord = 1.3, kTemplate = 10, kEnd = 1;
  if (p == Packing::squad)
    return {kTokensPerWord * (117 + 10.1) + kTemplate, 0.45, 16, kTokensPerWord * 3.2 + kEnd, 0.6, 2};
  return {kTokensPerWord * 9409.4 + kTemplate, 0.6, 256, kTokensPerWord * 553.4 + kEnd, 0.35, 16};
}

PackedSynthetic::PackedSynthetic(Packing kind, int vocab, int seq, std::uint64_t seed)
    : kind_(kind), model_(length_model(kind)), vocab_(vocab), seq_(seq), seed_(seed) {
  TB_REQUIRE(vocab >= kMarkovFanout,
             fmt::format("packed-{} data: vocab must be >= {} (the markov chain), got {}", packing_name(kind),
                         kMarkovFanout, vocab));
  const int shortest = model_.prompt_min + model_.answer_min;
  TB_REQUIRE(seq >= shortest, fmt::format("packed-{} data: seq {} is shorter than its shortest document ({} tokens: a "
                                          "prompt of {} and an answer of {})",
                                          packing_name(kind), seq, shortest, model_.prompt_min, model_.answer_min));
}

// At most three times the documents of the mean length a row holds (and no more than fit at the minimum lengths): the
// segment capacity the CUDA attention is planned for.
int PackedSynthetic::max_documents_per_row() const {
  const int fit = seq_ / (model_.prompt_min + model_.answer_min);
  return std::max(1, std::min(fit, int(std::ceil(3.0 * seq_ / (model_.prompt_mean + model_.answer_mean)))));
}

double PackedSynthetic::loss_floor() const { return std::log(double(kMarkovFanout)); }

Batch PackedSynthetic::next(int batch) {
  TB_REQUIRE(batch >= 1, fmt::format("packed-{} data: batch must be >= 1 rows, got {}", packing_name(kind_), batch));
  Batch b = empty_batch(batch, seq_);
  std::vector<std::int32_t> doc;
  const int most = max_documents_per_row();
  for (int r = 0; r < batch; ++r) {
    RowRng rng(seed_, next_row_++);
    RowWriter w{b, r};
    while (b.row_docs[std::size_t(r)] < most) {
      const int answer = std::min(lognormal(rng, model_.answer_mean, model_.answer_log_sd, model_.answer_min),
                                  seq_ / 2);  // a document longer than the row is cut, the answer first
      const int prompt =
          std::min(lognormal(rng, model_.prompt_mean, model_.prompt_log_sd, model_.prompt_min), seq_ - answer);
      if (w.at + prompt + answer > seq_) break;
      doc.assign(1, std::int32_t(rng.below(std::uint64_t(vocab_))));
      for (int i = 1; i < prompt + answer; ++i) doc.push_back(markov_successor(seed_, doc.back(), vocab_, rng));
      w.document(doc);
      w.count(std::uint32_t(prompt - 1), std::uint32_t(prompt + answer - 1));
      w.at += prompt + answer;
    }
  }
  return b;
}

PackedFile::PackedFile(const std::filesystem::path& index, int seq, std::uint64_t seed, int vocab)
    : name_(fmt::format("packed data '{}'", index.string())), seq_(seq), vocab_(vocab), seed_(seed) {
  TB_REQUIRE(seq >= 1, fmt::format("{}: seq must be >= 1, got {}", name_, seq));
  TB_REQUIRE(index.extension() == ".index",
             fmt::format("{}: give the .index file (its tokens are the .bin beside it)", name_));
  index_ = MappedFile(index, name_);
  const std::byte* p = index_.data();
  const std::size_t bytes = index_.size();
  TB_REQUIRE(bytes >= kHeaderBytes && std::memcmp(p, kMagic, sizeof(kMagic)) == 0,
             fmt::format("{}: not a packed-data index (no TBPACK01 header); write it with "
                         "scripts/convert_mlperf_govreport.py or as train/packed_data.h describes",
                         name_));
  const auto token_size = read_le<std::uint32_t>(p + 8);
  TB_REQUIRE(token_size == 2 || token_size == 4,
             fmt::format("{}: {} bytes per token; the index says 2 (uint16) or 4 (uint32)", name_, token_size));
  type_ = token_size == 2 ? TokenType::uint16 : TokenType::uint32;
  const auto d = read_le<std::uint64_t>(p + 16), s = read_le<std::uint64_t>(p + 24);
  TB_REQUIRE(d >= 1 && d < (std::uint64_t(1) << 40) && s < (std::uint64_t(1) << 40) &&
                 bytes == kHeaderBytes + kDocBytes * d + kSpanBytes * s,
             fmt::format("{}: {} bytes for {} documents and {} loss spans ({} expected); a truncated or foreign file?",
                         name_, bytes, d, s, kHeaderBytes + kDocBytes * d + kSpanBytes * s));
  docs_ = std::int64_t(d), spans_ = std::int64_t(s);
  std::filesystem::path bin = index;
  bin.replace_extension(".bin");
  tokens_ = MappedFile(bin, fmt::format("{}: its tokens '{}'", name_, bin.string()));
  TB_REQUIRE(tokens_.size() % token_size == 0,
             fmt::format("{}: its tokens '{}' hold {} bytes, not a multiple of {} bytes per token", name_,
                         bin.string(), tokens_.size(), token_size));
  const std::uint64_t n_tokens = tokens_.size() / token_size;
  std::vector<std::uint32_t> lengths(static_cast<std::size_t>(docs_));
  for (std::int64_t i = 0; i < docs_; ++i) {
    const Doc x = doc(i);
    const std::uint32_t last_span = i + 1 < docs_ ? doc(i + 1).first_span : std::uint32_t(spans_);
    TB_REQUIRE(x.tokens >= 1 && x.first + x.tokens <= n_tokens,
               fmt::format("{}: document {} has {} tokens from token {}, outside the {} tokens of '{}'", name_, i,
                           x.tokens, x.first, n_tokens, bin.string()));
    TB_REQUIRE(x.tokens <= std::uint32_t(seq),
               fmt::format("{}: document {} has {} tokens, longer than the sequence ({}); train with a longer --seq "
                           "or cut the document when converting",
                           name_, i, x.tokens, seq));
    TB_REQUIRE(x.first_span <= last_span && last_span <= spans_,
               fmt::format("{}: document {}'s loss spans [{}, {}) are not in order within the {} spans", name_, i,
                           x.first_span, last_span, spans_));
    std::uint32_t after = 0;  // spans ascending and disjoint, within the document's targets
    for (std::uint32_t k = x.first_span; k < last_span; ++k) {
      std::uint32_t begin = 0, end = 0;
      span(k, begin, end);
      TB_REQUIRE(after <= begin && begin < end && end <= x.tokens - 1,
                 fmt::format("{}: document {} ({} tokens) has loss span [{}, {}); spans are ascending, disjoint and "
                             "within its {} targets",
                             name_, i, x.tokens, begin, end, x.tokens - 1));
      after = end;
    }
    lengths[std::size_t(i)] = x.tokens;
  }
  // The most documents a row can hold: as many of the shortest as fit (the segment capacity CUDA plans for).
  std::sort(lengths.begin(), lengths.end());
  longest_ = int(lengths.back());
  std::int64_t used = 0;
  max_docs_ = 0;
  for (std::uint32_t len : lengths) {
    if (used + len > seq) break;
    used += len, ++max_docs_;
  }
}

PackedFile::Doc PackedFile::doc(std::int64_t d) const {
  const std::byte* p = index_.data() + kHeaderBytes + kDocBytes * std::size_t(d);
  return {read_le<std::uint64_t>(p), read_le<std::uint32_t>(p + 8), read_le<std::uint32_t>(p + 12)};
}

void PackedFile::span(std::int64_t s, std::uint32_t& begin, std::uint32_t& end) const {
  const std::byte* p = index_.data() + kHeaderBytes + kDocBytes * std::size_t(docs_) + kSpanBytes * std::size_t(s);
  begin = read_le<std::uint32_t>(p), end = read_le<std::uint32_t>(p + 4);
}

int PackedFile::put(Batch& b, int r, int at, std::int64_t d, std::vector<std::int32_t>& tokens) const {
  const std::uint64_t limit =
      vocab_ > 0 ? std::uint64_t(vocab_) : std::uint64_t(std::numeric_limits<std::int32_t>::max()) + 1;
  const Doc x = doc(d);
  tokens.resize(x.tokens);
  for (std::uint32_t i = 0; i < x.tokens; ++i) {
    const std::uint32_t t = read_token(tokens_.data(), type_, std::int64_t(x.first + i));
    if (t >= limit) [[unlikely]]
      raise_config(fmt::format("{}: token {} of document {} is {}, {}; the data does not match this model's "
                               "vocabulary",
                               name_, i, d, t,
                               vocab_ > 0 ? fmt::format(">= vocab {}", vocab_) : std::string("> INT32_MAX")));
    tokens[i] = std::int32_t(t);
  }
  RowWriter w{b, r, at};
  w.document(tokens);
  const std::uint32_t last_span = d + 1 < docs_ ? doc(d + 1).first_span : std::uint32_t(spans_);
  for (std::uint32_t k = x.first_span; k < last_span; ++k) {
    std::uint32_t begin = 0, end = 0;
    span(k, begin, end);
    w.count(begin, end);
  }
  return int(x.tokens);
}

Batch PackedFile::next(int batch) {
  TB_REQUIRE(batch >= 1, fmt::format("{}: batch must be >= 1 rows, got {}", name_, batch));
  Batch b = empty_batch(batch, seq_);
  std::vector<std::int32_t> tokens;
  for (int r = 0; r < batch; ++r) {
    RowRng rng(seed_, next_row_++);
    for (int at = 0;;) {
      const auto d = std::int64_t(rng.below(std::uint64_t(docs_)));
      if (at + int(doc(d).tokens) > seq_) break;
      at += put(b, r, at, d, tokens);
    }
  }
  return b;
}

Batch PackedFile::documents(std::int64_t first, int count) const {
  TB_REQUIRE(count >= 1 && first >= 0, fmt::format("{}: documents from {}: count must be >= 1, got {}", name_,
                                                   first, count));
  Batch b = empty_batch(count, seq_);
  std::vector<std::int32_t> tokens;
  for (int r = 0; r < count; ++r) put(b, r, 0, (first + r) % docs_, tokens);
  return b;
}

std::uint32_t PackedFile::largest_token() const {
  std::uint32_t top = 0;
  for (std::int64_t d = 0; d < docs_; ++d) {
    const Doc x = doc(d);
    for (std::uint32_t i = 0; i < x.tokens; ++i)
      top = std::max(top, read_token(tokens_.data(), type_, std::int64_t(x.first + i)));
  }
  return top;
}

}  // namespace tb::train
