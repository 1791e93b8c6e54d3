// train/data.cpp: see data.h. Random numbers: train/row_rng.h, one stream per (seed, row).
#include "train/data.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "core/error.h"
#include "train/packed_data.h"
#include "train/row_rng.h"

namespace tb::train {
namespace {

static_assert(std::endian::native == std::endian::little, "TokenFile reads little-endian tokens in place");

void check_batch(int batch, std::string_view who) {
  TB_REQUIRE(batch >= 1, fmt::format("{}: batch must be >= 1 rows, got {}", who, batch));
}

Batch make_batch(int batch, int seq) {
  Batch b;
  b.batch = batch;
  b.seq = seq;
  b.tokens.resize(std::size_t(batch) * std::size_t(seq));
  b.targets.resize(b.tokens.size());
  return b;
}

// Splits a window of seq + 1 tokens into row r of tokens / targets.
void store_row(Batch& b, int r, const std::vector<std::int32_t>& window) {
  const std::size_t off = std::size_t(r) * std::size_t(b.seq);
  for (int i = 0; i < b.seq; ++i) {
    b.tokens[off + std::size_t(i)] = window[std::size_t(i)];
    b.targets[off + std::size_t(i)] = window[std::size_t(i) + 1];
  }
}

}  // namespace

std::int64_t Batch::loss_tokens() const {
  if (loss_mask.empty()) return std::int64_t(targets.size());
  std::int64_t n = 0;
  for (std::uint8_t m : loss_mask) n += m != 0;
  return n;
}

void StepTokens::add(const Batch& b) {
  const double rows = b.batch, s = b.seq;
  tokens += rows * s;
  loss_tokens += double(b.loss_tokens());
  packed = packed || b.docs().packed();
  if (!b.docs().packed()) {
    doc_tokens += rows * s, doc_squares += rows * s * s;
    return;
  }
  for (std::int32_t len : b.doc_lens) doc_tokens += len, doc_squares += double(len) * len;
}

std::vector<double> loss_weights(const Batch& b, int micro_batches, std::int64_t counted) {
  std::vector<double> w;
  if (b.loss_mask.empty()) return w;
  TB_REQUIRE(micro_batches >= 1 && counted >= 0,
             fmt::format("loss weights: {} micro-batches, {} counted targets", micro_batches, counted));
  const double each = counted > 0 ? double(micro_batches) / double(counted) : 0.0;
  w.reserve(b.loss_mask.size());
  for (std::uint8_t m : b.loss_mask) w.push_back(m != 0 ? each : 0.0);
  return w;
}

std::string_view task_name(Task task) {
  switch (task) {
    case Task::random: return "random";
    case Task::copy: return "copy";
    case Task::markov: return "markov";
  }
  return "?";
}

SyntheticData::SyntheticData(int vocab, int seq, std::uint64_t seed, Task task)
    : vocab_(vocab), seq_(seq), seed_(seed), task_(task) {
  TB_REQUIRE(vocab >= 2, fmt::format("synthetic data: vocab must be >= 2, got {}", vocab));
  TB_REQUIRE(seq >= 1, fmt::format("synthetic data: seq must be >= 1, got {}", seq));
  TB_REQUIRE(
      task != Task::copy || seq >= 2,
      fmt::format("synthetic data: the copy task needs seq >= 2 (a prefix of seq/2 tokens repeated), got {}", seq));
  TB_REQUIRE(task != Task::markov || vocab >= kMarkovFanout,
             fmt::format("synthetic data: the markov task needs vocab >= {}, got {}", kMarkovFanout, vocab));
}

Batch SyntheticData::next(int batch) {
  check_batch(batch, "synthetic data");
  Batch b = make_batch(batch, seq_);
  std::vector<std::int32_t> w(std::size_t(seq_) + 1);
  const std::size_t h = task_ == Task::copy ? std::size_t(seq_ / 2) : w.size();
  const auto v = std::uint64_t(vocab_);
  for (int r = 0; r < batch; ++r) {
    RowRng rng(seed_, next_row_++);
    for (std::size_t i = 0; i < w.size(); ++i) {
      if (task_ == Task::markov && i > 0) {  // one of the K successors of the previous token
        w[i] = markov_successor(seed_, w[i - 1], vocab_, rng);
      } else {
        w[i] = i < h ? std::int32_t(rng.below(v)) : w[i % h];
      }
    }
    store_row(b, r, w);
  }
  return b;
}

double SyntheticData::loss_floor() const {
  const double ln_v = std::log(double(vocab_));
  if (task_ == Task::random) return ln_v;
  if (task_ == Task::markov) return std::log(double(kMarkovFanout));
  const int h = seq_ / 2;
  return double(h - 1) / double(seq_) * ln_v;
}

std::string_view token_type_name(TokenType type) { return type == TokenType::uint16 ? "uint16" : "uint32"; }
std::size_t token_bytes(TokenType type) { return type == TokenType::uint16 ? 2 : 4; }

TokenFile::TokenFile(const std::filesystem::path& path, TokenType type, int seq, std::uint64_t seed, int vocab)
    : path_(path), type_(type), seq_(seq), seed_(seed), vocab_(vocab) {
  const std::string name = path.string();
  TB_REQUIRE(seq >= 1, fmt::format("token file '{}': seq must be >= 1, got {}", name, seq));
  TB_REQUIRE(vocab >= 0, fmt::format("token file '{}': vocab must be >= 0 (0: no check), got {}", name, vocab));
  map_ = MappedFile(path, fmt::format("token file '{}'", name));
  const std::size_t bytes = map_.size(), tsize = token_bytes(type);
  TB_REQUIRE(bytes % tsize == 0, fmt::format("token file '{}': size {} bytes is not a multiple of the {} token size "
                                             "({} bytes); wrong token type, or a truncated file?",
                                             name, bytes, token_type_name(type), tsize));
  n_ = std::int64_t(bytes / tsize);
  TB_REQUIRE(n_ >= std::int64_t(seq) + 1,
             fmt::format("token file '{}': holds {} tokens, fewer than seq + 1 = {} (one window); use a longer file or "
                         "a shorter sequence",
                         name, n_, std::int64_t(seq) + 1));
}

std::uint32_t TokenFile::at(std::int64_t i) const { return read_token(map_.data(), type_, i); }

std::uint32_t read_token(const std::byte* tokens, TokenType type, std::int64_t i) {
  if (type == TokenType::uint16) {
    std::uint16_t t;
    std::memcpy(&t, tokens + std::size_t(i) * 2, 2);
    return t;
  }
  std::uint32_t t;
  std::memcpy(&t, tokens + std::size_t(i) * 4, 4);
  return t;
}

Batch TokenFile::next(int batch) {
  check_batch(batch, fmt::format("token file '{}'", path_.string()));
  TB_REQUIRE(map_.data() != nullptr, "token file: next() on a moved-from TokenFile");
  Batch b = make_batch(batch, seq_);
  std::vector<std::int32_t> w(std::size_t(seq_) + 1);
  const auto starts = std::uint64_t(n_ - seq_);  // valid window starts: [0, n - seq - 1]
  const std::uint64_t limit =
      vocab_ > 0 ? std::uint64_t(vocab_) : std::uint64_t(std::numeric_limits<std::int32_t>::max()) + 1;
  for (int r = 0; r < batch; ++r) {
    RowRng rng(seed_, next_row_++);
    const auto start = std::int64_t(rng.below(starts));
    for (std::size_t i = 0; i < w.size(); ++i) {
      const std::int64_t at_i = start + std::int64_t(i);
      const std::uint32_t t = at(at_i);
      if (t >= limit) [[unlikely]]
        raise_config(fmt::format(
            "token file '{}': the token at index {} (byte {}) is {}, {}; the file does "
            "not match this model's vocabulary (or token type {})",
            path_.string(), at_i, std::uint64_t(at_i) * token_bytes(type_), t,
            vocab_ > 0 ? fmt::format(">= vocab {}", vocab_) : std::string("> INT32_MAX"), token_type_name(type_)));
      w[i] = std::int32_t(t);
    }
    store_row(b, r, w);
  }
  return b;
}

void TokenFile::validate(int vocab) const {
  TB_REQUIRE(vocab >= 1,
             fmt::format("token file '{}': validate(vocab) needs vocab >= 1, got {}", path_.string(), vocab));
  TB_REQUIRE(map_.data() != nullptr, "token file: validate() on a moved-from TokenFile");
  for (std::int64_t i = 0; i < n_; ++i) {
    const std::uint32_t t = at(i);
    if (t >= std::uint32_t(vocab)) [[unlikely]]
      raise_config(
          fmt::format("token file '{}': the token at index {} (byte {}) is {}, >= vocab {}; the file "
                      "does not match this model's vocabulary (or token type {})",
                      path_.string(), i, std::uint64_t(i) * token_bytes(type_), t, vocab, token_type_name(type_)));
  }
}

DataSource::DataSource(const std::string& data, TokenType token_type, int vocab, int seq, std::uint64_t seed) {
  if (data == "copy" || data == "random" || data == "markov") {
    const Task task = data == "copy" ? Task::copy : data == "random" ? Task::random : Task::markov;
    floor_ = data_.emplace<SyntheticData>(vocab, seq, seed, task).loss_floor();
  } else if (data == "packed-squad" || data == "packed-govreport") {
    const Packing p = data == "packed-squad" ? Packing::squad : Packing::govreport;
    floor_ = data_.emplace<std::unique_ptr<PackedSynthetic>>(std::make_unique<PackedSynthetic>(p, vocab, seq, seed))
                 ->loss_floor();
  } else {
    std::error_code ec;
    TB_REQUIRE(std::filesystem::is_regular_file(data, ec),
               fmt::format("--data '{}': no such file; give markov, copy or random (synthetic tasks), packed-squad or "
                           "packed-govreport (synthetic packed documents), a packed-data FILE.index or a token file",
                           data));
    if (std::filesystem::path(data).extension() == ".index")
      data_.emplace<std::unique_ptr<PackedFile>>(std::make_unique<PackedFile>(data, seq, seed, vocab));
    else
      data_.emplace<TokenFile>(data, token_type, seq, seed, vocab);
  }
}

DataSource::~DataSource() = default;

Batch DataSource::next(int batch) {
  if (auto* s = std::get_if<SyntheticData>(&data_)) return s->next(batch);
  if (auto* s = std::get_if<std::unique_ptr<PackedSynthetic>>(&data_)) return (*s)->next(batch);
  if (auto* s = std::get_if<std::unique_ptr<PackedFile>>(&data_)) return (*s)->next(batch);
  return std::get<TokenFile>(data_).next(batch);
}

void DataSource::skip(std::int64_t rows) {
  TB_REQUIRE(rows >= 0, fmt::format("data: cannot skip {} rows", rows));
  std::visit(
      [&](auto& d) {
        if constexpr (requires { d.skip(rows); }) d.skip(rows);
        else if constexpr (requires { d->skip(rows); }) d->skip(rows);
      },
      data_);
}

int DataSource::max_documents_per_row() const {
  if (auto* s = std::get_if<std::unique_ptr<PackedSynthetic>>(&data_)) return (*s)->max_documents_per_row();
  if (auto* s = std::get_if<std::unique_ptr<PackedFile>>(&data_)) return (*s)->max_documents_per_row();
  return 0;
}

}  // namespace tb::train
