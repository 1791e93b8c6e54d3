// train/data.cpp: see data.h. Random numbers: splitmix64 (Steele et al.), one stream per (seed, row).
#include "train/data.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "core/error.h"

namespace tb::train {
namespace {

static_assert(std::endian::native == std::endian::little, "TokenFile reads little-endian tokens in place");

constexpr int kMarkovFanout = 4;  // successors per token in the markov task

std::uint64_t mix64(std::uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The random stream of row k: splitmix64 started from a state that mixes seed and k.
class RowRng {
 public:
  RowRng(std::uint64_t seed, std::int64_t row) : state_(mix64(seed ^ mix64(std::uint64_t(row) + 1))) {}
  std::uint64_t next() { return mix64(state_ += 0x9E3779B97F4A7C15ull); }
  // Uniform in [0, n): modulo of 64 bits, bias below n / 2^64 (negligible for any vocabulary or file).
  std::uint64_t below(std::uint64_t n) { return next() % n; }

 private:
  std::uint64_t state_;
};

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

[[noreturn]] void raise_io(const std::filesystem::path& path, std::string_view what, int err) {
  raise_error(Error::Kind::io, fmt::format("token file '{}': {} ({}); check the path and permissions", path.string(),
                                           what, std::strerror(err)));
}

}  // namespace

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
        const std::uint64_t base = mix64(seed_ ^ 0xA5A5A5A5u ^ std::uint64_t(w[i - 1])) % v;
        w[i] = std::int32_t((base + rng.below(kMarkovFanout)) % v);
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
  const int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) raise_io(path, "cannot open", errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    raise_io(path, "cannot stat", err);
  }
  const std::size_t tsize = token_bytes(type);
  const auto fail = [&](std::string msg) {
    ::close(fd);
    raise_config(msg);
  };
  if (!S_ISREG(st.st_mode)) fail(fmt::format("token file '{}': not a regular file; give a .bin token file", name));
  const auto bytes = std::size_t(st.st_size);
  if (bytes == 0) fail(fmt::format("token file '{}': the file is empty; re-run the tokeniser", name));
  if (bytes % tsize != 0)
    fail(
        fmt::format("token file '{}': size {} bytes is not a multiple of the {} token size ({} bytes); "
                    "wrong token type, or a truncated file?",
                    name, bytes, token_type_name(type), tsize));
  const auto n = std::int64_t(bytes / tsize);
  if (n < std::int64_t(seq) + 1)
    fail(
        fmt::format("token file '{}': holds {} tokens, fewer than seq + 1 = {} (one window); use a longer "
                    "file or a shorter sequence",
                    name, n, std::int64_t(seq) + 1));
  void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (p == MAP_FAILED) raise_io(path, "cannot mmap", err);
  data_ = static_cast<const std::byte*>(p);
  bytes_ = bytes;
  n_ = n;
}

TokenFile::~TokenFile() { unmap(); }

TokenFile::TokenFile(TokenFile&& other) noexcept
    : path_(std::move(other.path_)),
      type_(other.type_),
      seq_(other.seq_),
      seed_(other.seed_),
      vocab_(other.vocab_),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      n_(std::exchange(other.n_, 0)),
      next_row_(other.next_row_) {}

TokenFile& TokenFile::operator=(TokenFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    type_ = other.type_;
    seq_ = other.seq_;
    seed_ = other.seed_;
    vocab_ = other.vocab_;
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    n_ = std::exchange(other.n_, 0);
    next_row_ = other.next_row_;
  }
  return *this;
}

void TokenFile::unmap() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), bytes_);
  data_ = nullptr;
  bytes_ = 0;
}

std::uint32_t TokenFile::at(std::int64_t i) const {
  if (type_ == TokenType::uint16) {
    std::uint16_t t;
    std::memcpy(&t, data_ + std::size_t(i) * 2, 2);
    return t;
  }
  std::uint32_t t;
  std::memcpy(&t, data_ + std::size_t(i) * 4, 4);
  return t;
}

Batch TokenFile::next(int batch) {
  check_batch(batch, fmt::format("token file '{}'", path_.string()));
  TB_REQUIRE(data_ != nullptr, "token file: next() on a moved-from TokenFile");
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
  TB_REQUIRE(data_ != nullptr, "token file: validate() on a moved-from TokenFile");
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
  } else {
    std::error_code ec;
    TB_REQUIRE(std::filesystem::is_regular_file(data, ec),
               fmt::format("--data '{}': no such file; give markov, copy or random (synthetic tasks) or the path of a "
                           "token file",
                           data));
    data_.emplace<TokenFile>(data, token_type, seq, seed, vocab);
  }
}

Batch DataSource::next(int batch) {
  if (auto* s = std::get_if<SyntheticData>(&data_)) return s->next(batch);
  return std::get<TokenFile>(data_).next(batch);
}

}  // namespace tb::train
