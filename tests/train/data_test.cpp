// Tests train/data: SyntheticData (determinism by seed, shifted targets, copy task structure, range, loss
// floor) and TokenFile (windows of a uint16 / uint32 file, determinism, errors naming the file).
#include "train/data.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"

namespace fs = std::filesystem;
using tb::train::Batch;
using tb::train::SyntheticData;
using tb::train::Task;
using tb::train::TokenFile;
using tb::train::TokenType;

namespace {

void expect_shifted(const Batch& b, std::string_view where) {
  ASSERT_EQ(b.tokens.size(), std::size_t(b.batch) * std::size_t(b.seq)) << where;
  ASSERT_EQ(b.targets.size(), b.tokens.size()) << where;
  for (int r = 0; r < b.batch; ++r)
    for (int i = 0; i + 1 < b.seq; ++i)
      ASSERT_EQ(b.targets[std::size_t(r * b.seq + i)], b.tokens[std::size_t(r * b.seq + i + 1)])
          << where << " row " << r << " pos " << i;
}

// Concatenates batches row-wise (for next(8) == next(4) + next(4)).
std::vector<std::int32_t> cat(const Batch& a, const Batch& b) {
  std::vector<std::int32_t> out = a.tokens;
  out.insert(out.end(), b.tokens.begin(), b.tokens.end());
  return out;
}

}  // namespace

TEST(SyntheticData, DeterministicBySeedAndIndependentOfBatchSplit) {
  for (Task task : {Task::random, Task::copy}) {
    SyntheticData a(1000, 16, 42, task), b(1000, 16, 42, task), c(1000, 16, 43, task);
    const Batch a1 = a.next(8), b1 = b.next(4), b2 = b.next(4), c1 = c.next(8);
    EXPECT_EQ(a1.batch, 8);
    EXPECT_EQ(a1.seq, 16);
    EXPECT_EQ(a1.tokens, cat(b1, b2)) << tb::train::task_name(task);
    EXPECT_NE(a1.tokens, c1.tokens) << tb::train::task_name(task);
    EXPECT_NE(a.next(8).tokens, a1.tokens) << "the stream must advance";
    EXPECT_EQ(a.rows_drawn(), 16);
  }
}

TEST(SyntheticData, RandomTokensAreShiftedInRangeAndUniform) {
  SyntheticData d(4, 100, 7, Task::random);
  const Batch b = d.next(100);
  expect_shifted(b, "random");
  int count[4] = {};
  for (auto t : b.tokens) {
    ASSERT_GE(t, 0);
    ASSERT_LT(t, 4);
    ++count[t];
  }
  for (int v = 0; v < 4; ++v) EXPECT_NEAR(count[v], 2500, 200) << v;  // 10000 draws: sd ~43
  for (auto t : b.targets) ASSERT_TRUE(t >= 0 && t < 4);
  EXPECT_DOUBLE_EQ(d.loss_floor(), std::log(4.0));
}

TEST(SyntheticData, CopyTaskRepeatsTheFirstHalf) {
  for (int seq : {8, 9, 64}) {
    const int h = seq / 2;
    SyntheticData d(50000, seq, 3, Task::copy);
    const Batch b = d.next(5);
    expect_shifted(b, "copy");
    for (int r = 0; r < b.batch; ++r) {
      const auto* tok = b.tokens.data() + r * seq;
      const auto* tgt = b.targets.data() + r * seq;
      for (int i = h; i < seq; ++i) ASSERT_EQ(tok[i], tok[i - h]) << "seq " << seq << " row " << r << " pos " << i;
      // Every target from position h - 1 on is a token already seen h - 1 positions back.
      for (int i = h - 1; i < seq; ++i) ASSERT_EQ(tgt[i], tok[i + 1 - h]) << "seq " << seq << " pos " << i;
      // The prefix itself is random (50000 values: a repeat within 32 tokens is unlikely but possible).
      std::vector<std::int32_t> prefix(tok, tok + h);
      std::sort(prefix.begin(), prefix.end());
      EXPECT_GE(std::unique(prefix.begin(), prefix.end()) - prefix.begin(), h - 1);
    }
    for (auto t : b.tokens) ASSERT_TRUE(t >= 0 && t < 50000);
  }
  // Floor: (h - 1) / seq unpredictable targets at ln V each.
  EXPECT_DOUBLE_EQ(SyntheticData(100, 8, 1, Task::copy).loss_floor(), 3.0 / 8.0 * std::log(100.0));
  EXPECT_DOUBLE_EQ(SyntheticData(100, 9, 1, Task::copy).loss_floor(), 3.0 / 9.0 * std::log(100.0));
  EXPECT_DOUBLE_EQ(SyntheticData(100, 2, 1, Task::copy).loss_floor(), 0.0);
}

TEST(SyntheticData, RejectsBadInput) {
  EXPECT_THROW(SyntheticData(1, 8, 0, Task::random), tb::Error);
  EXPECT_THROW(SyntheticData(100, 0, 0, Task::random), tb::Error);
  EXPECT_THROW(SyntheticData(100, 1, 0, Task::copy), tb::Error);
  SyntheticData d(100, 8, 0, Task::random);
  EXPECT_THROW(d.next(0), tb::Error);
}

class TokenFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tb_data_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  template <class T>
  fs::path write(const std::string& name, const std::vector<T>& tokens) {
    const fs::path p = dir_ / name;
    std::ofstream f(p, std::ios::binary);
    f.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * sizeof(T)));
    return p;
  }
  fs::path write_bytes(const std::string& name, std::size_t bytes) {
    return write(name, std::vector<std::uint8_t>(bytes, 1));
  }
  // The message of the tb::Error that f throws ("" when it does not throw).
  template <class F>
  static std::string error_of(F f) {
    try {
      f();
    } catch (const tb::Error& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

TEST_F(TokenFileTest, Uint16WindowsComeFromTheFile) {
  // Token i = i: a window starting at s holds s, s+1, ..., so each row checks its own provenance.
  const int n = 40, seq = 16;
  std::vector<std::uint16_t> tokens(n);
  for (int i = 0; i < n; ++i) tokens[std::size_t(i)] = std::uint16_t(i);
  TokenFile f(write("u16.bin", tokens), TokenType::uint16, seq, 5, /*vocab=*/n);
  EXPECT_EQ(f.size(), n);
  EXPECT_EQ(f.at(n - 1), std::uint32_t(n - 1));
  f.validate(n);
  const Batch b = f.next(2000);
  EXPECT_EQ(b.batch, 2000);
  EXPECT_EQ(b.seq, seq);
  int min_start = n, max_start = 0;
  for (int r = 0; r < b.batch; ++r) {
    const int s = b.tokens[std::size_t(r * seq)];
    min_start = std::min(min_start, s);
    max_start = std::max(max_start, s);
    for (int i = 0; i < seq; ++i) {
      ASSERT_EQ(b.tokens[std::size_t(r * seq + i)], s + i) << "row " << r;
      ASSERT_EQ(b.targets[std::size_t(r * seq + i)], s + i + 1) << "row " << r;  // the next token of the file
    }
  }
  // Starts cover exactly [0, n - seq - 1] (the last target is the file's last token); 2000 draws over 24
  // starts miss one with probability ~24 * (23/24)^2000 ~ 1e-36.
  EXPECT_EQ(min_start, 0);
  EXPECT_EQ(max_start, n - seq - 1);
}

TEST_F(TokenFileTest, Uint32WindowsAndDeterminism) {
  // Values above 65535 prove 4-byte reads.
  const int n = 300, seq = 7;
  std::vector<std::uint32_t> tokens(n);
  for (int i = 0; i < n; ++i) tokens[std::size_t(i)] = std::uint32_t(100000 + 3 * i);
  const fs::path p = write("u32.bin", tokens);
  TokenFile a(p, TokenType::uint32, seq, 9), b(p, TokenType::uint32, seq, 9), c(p, TokenType::uint32, seq, 10);
  const Batch a1 = a.next(6), b1 = b.next(3), b2 = b.next(3), c1 = c.next(6);
  EXPECT_EQ(a1.tokens, cat(b1, b2));
  EXPECT_NE(a1.tokens, c1.tokens);
  expect_shifted(a1, "uint32");
  for (int r = 0; r < a1.batch; ++r) {
    const int s = (a1.tokens[std::size_t(r * seq)] - 100000) / 3;
    ASSERT_EQ(a1.tokens[std::size_t(r * seq)], 100000 + 3 * s);
    for (int i = 0; i < seq; ++i) ASSERT_EQ(a1.targets[std::size_t(r * seq + i)], 100000 + 3 * (s + i + 1));
  }
  TokenFile moved = std::move(a);  // RAII: the mapping moves, the source is empty
  EXPECT_EQ(moved.size(), n);
  EXPECT_EQ(a.size(), 0);
  EXPECT_EQ(moved.next(1).seq, seq);
}

TEST_F(TokenFileTest, ErrorsNameTheFile) {
  const auto missing = dir_ / "missing.bin";
  std::string msg = error_of([&] { TokenFile(missing, TokenType::uint16, 4, 0); });
  EXPECT_NE(msg.find("missing.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;

  msg = error_of([&] { TokenFile(write_bytes("empty.bin", 0), TokenType::uint16, 4, 0); });
  EXPECT_NE(msg.find("empty.bin': the file is empty"), std::string::npos) << msg;

  msg = error_of([&] { TokenFile(write_bytes("odd.bin", 11), TokenType::uint16, 4, 0); });
  EXPECT_NE(msg.find("odd.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a multiple"), std::string::npos) << msg;
  msg = error_of([&] { TokenFile(write_bytes("six.bin", 6), TokenType::uint32, 1, 0); });
  EXPECT_NE(msg.find("uint32"), std::string::npos) << msg;

  // 5 tokens hold one window only up to seq = 4.
  const auto short_file = write("short.bin", std::vector<std::uint16_t>{1, 2, 3, 4, 5});
  EXPECT_NO_THROW(TokenFile(short_file, TokenType::uint16, 4, 0));
  msg = error_of([&] { TokenFile(short_file, TokenType::uint16, 5, 0); });
  EXPECT_NE(msg.find("short.bin': holds 5 tokens, fewer than seq + 1 = 6"), std::string::npos) << msg;

  msg = error_of([&] { TokenFile(dir_, TokenType::uint16, 4, 0); });
  EXPECT_NE(msg.find("not a regular file"), std::string::npos) << msg;
}

TEST_F(TokenFileTest, OutOfVocabularyTokens) {
  std::vector<std::uint16_t> tokens(64, 7);
  tokens[37] = 5000;
  const auto p = write("oov.bin", tokens);
  TokenFile scan(p, TokenType::uint16, 8, 0);
  EXPECT_NO_THROW(scan.validate(5001));
  std::string msg = error_of([&] { scan.validate(1000); });
  EXPECT_NE(msg.find("oov.bin': the token at index 37 (byte 74) is 5000, >= vocab 1000"), std::string::npos) << msg;
  // On the fly: seq = 63 leaves one window, which holds the bad token.
  TokenFile fly(p, TokenType::uint16, 63, 0, /*vocab=*/1000);
  msg = error_of([&] { fly.next(1); });
  EXPECT_NE(msg.find("index 37"), std::string::npos) << msg;
  EXPECT_NE(msg.find(">= vocab 1000"), std::string::npos) << msg;
  TokenFile no_check(p, TokenType::uint16, 63, 0);
  EXPECT_EQ(no_check.next(1).tokens[37], 5000);
  // uint32 values that do not fit int32 are rejected even without a vocabulary.
  TokenFile big(write("big.bin", std::vector<std::uint32_t>{1, 0x80000000u, 2}), TokenType::uint32, 2, 0);
  msg = error_of([&] { big.next(1); });
  EXPECT_NE(msg.find("INT32_MAX"), std::string::npos) << msg;
}

TEST(SyntheticMarkov, EveryTokenHasAtMostFourConsecutiveSuccessors) {
  tb::train::SyntheticData d(64, 32, 7, tb::train::Task::markov);
  EXPECT_NEAR(d.loss_floor(), std::log(4.0), 1e-12);
  std::map<int, std::set<int>> succ;
  for (int step = 0; step < 50; ++step) {
    const auto b = d.next(8);
    for (std::size_t i = 0; i < b.tokens.size(); ++i) succ[b.tokens[i]].insert(b.targets[i]);
  }
  EXPECT_GT(succ.size(), 50u);  // most tokens were seen
  for (const auto& [tok, s] : succ) {
    ASSERT_LE(s.size(), 4u) << "token " << tok;
    // consecutive modulo the vocabulary: some element starts a run covering all of them within 4
    bool run = false;
    for (int start : s) {
      bool all = true;
      for (int t : s) all = all && ((t - start + 64) % 64) < 4;
      run = run || all;
    }
    EXPECT_TRUE(run) << "token " << tok;
  }
  tb::train::SyntheticData again(64, 32, 7, tb::train::Task::markov), other(64, 32, 8, tb::train::Task::markov);
  const auto a = again.next(4), c = other.next(4);
  tb::train::SyntheticData first(64, 32, 7, tb::train::Task::markov);
  EXPECT_EQ(first.next(4).targets, a.targets);
  EXPECT_NE(c.targets, a.targets);
  EXPECT_THROW(tb::train::SyntheticData(3, 8, 1, tb::train::Task::markov), tb::Error);
}
