// packed_data_test: train/packed_data.h and the loss weights of train/data.h.
//   - the synthetic packers: every row is a valid packing (documents fit, padding uncounted, targets the next token
//     inside a document, the answer's targets counted, markov successors), the stream is counter-based, and the
//     documents' prompt and answer lengths have the documented means (squad at seq 4096; govreport at a long sequence,
//     and cut to fit at 8192);
//   - the reader: a FILE.index + FILE.bin written here round-trips (documents, tokens, spans), drawn or read in order
//     (documents()); an index written by
//     scripts/convert_mlperf_govreport.py from a tiny MLPerf-shaped parquet file reads back as that file's samples;
//   - bad input: a document longer than the sequence (named), a foreign or truncated index, spans out of order or past
//     the targets, tokens outside the vocabulary, a .bin of the wrong size;
//   - loss weights: mask x M / N, summing to M over a step; --data dispatch (packed-squad, FILE.index).
#include "train/packed_data.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/packing.h"
#include "../support/config_error.h"
#include "../support/packed_files.h"
#include "../support/shell.h"
#include "train/data.h"
#include "train/row_rng.h"

namespace tb::train {
namespace {

namespace fs = std::filesystem;

struct DocView {  // one document of a drawn row
  int row, at, len, prompt, answer;
};

// Checks the packing invariants of b and returns its documents (prompt: the tokens before the first counted target
// + 1; answer: the counted targets, one contiguous run at the end for the synthetic packers).
std::vector<DocView> documents(const Batch& b) {
  std::vector<DocView> out;
  EXPECT_EQ(b.row_docs.size(), std::size_t(b.batch));
  EXPECT_NO_THROW(segment_offsets(b.docs(), b.seq));
  std::size_t d = 0;
  for (int r = 0; r < b.batch; ++r) {
    int at = 0;
    for (int i = 0; i < b.row_docs[std::size_t(r)]; ++i, ++d) {
      const int len = b.doc_lens[d];
      int first = -1, counted = 0;
      for (int j = 0; j < len; ++j) {
        const std::size_t t = std::size_t(r * b.seq + at + j);
        if (j + 1 < len) {
          EXPECT_EQ(b.targets[t], b.tokens[t + 1]) << "row " << r << " doc " << i << " pos " << j;
        }
        if (b.loss_mask[t]) counted++, first = first < 0 ? j : first;
      }
      EXPECT_EQ(b.loss_mask[std::size_t(r * b.seq + at + len - 1)], 0) << "a document's last position has no target";
      out.push_back({r, at, len, first + 1, counted});
      at += len;
    }
    for (int j = at; j < b.seq; ++j) {  // padding
      const std::size_t t = std::size_t(r * b.seq + j);
      EXPECT_EQ(b.tokens[t], 0);
      EXPECT_EQ(b.targets[t], 0);
      EXPECT_EQ(b.loss_mask[t], 0);
    }
  }
  EXPECT_EQ(d, b.doc_lens.size());
  return out;
}

TEST(PackedSynthetic, RowsArePackingsOfMarkovDocuments) {
  const int vocab = 97, seq = 512;
  PackedSynthetic data(Packing::squad, vocab, seq, 3);
  const Batch b = data.next(6);
  std::int64_t counted = 0;
  for (const DocView& d : documents(b)) {
    EXPECT_GE(d.prompt, 16);
    EXPECT_GE(d.answer, 2);
    EXPECT_EQ(d.prompt + d.answer, d.len);  // the answer is the document's last A tokens
    counted += d.answer;
    for (int j = 1; j < d.len; ++j) {  // each token one of the markov successors of the one before
      const std::size_t t = std::size_t(d.row * seq + d.at + j);
      const std::int32_t prev = b.tokens[t - 1], cur = b.tokens[t];
      const auto base = std::int32_t(mix64(3 ^ 0xA5A5A5A5u ^ std::uint64_t(prev)) % vocab);
      EXPECT_LT((cur - base + vocab) % vocab, kMarkovFanout);
    }
  }
  EXPECT_EQ(b.loss_tokens(), counted);
  for (int r = 0; r < b.batch; ++r) EXPECT_LE(b.row_docs[std::size_t(r)], data.max_documents_per_row());
  EXPECT_NEAR(data.loss_floor(), std::log(4.0), 1e-15);
  // Counter-based: two halves are the whole; another seed differs.
  PackedSynthetic again(Packing::squad, vocab, seq, 3), other(Packing::squad, vocab, seq, 4);
  Batch h1 = again.next(3), h2 = again.next(3);
  h1.tokens.insert(h1.tokens.end(), h2.tokens.begin(), h2.tokens.end());
  h1.doc_lens.insert(h1.doc_lens.end(), h2.doc_lens.begin(), h2.doc_lens.end());
  EXPECT_EQ(h1.tokens, b.tokens);
  EXPECT_EQ(h1.doc_lens, b.doc_lens);
  EXPECT_NE(other.next(6).tokens, b.tokens);
}

// Mean prompt and answer lengths over `rows` rows against the model's means.
void expect_means(Packing kind, int seq, int rows, double tolerance) {
  PackedSynthetic data(kind, 1000, seq, 11);
  const LengthModel m = length_model(kind);
  double prompt = 0, answer = 0;
  int n = 0;
  for (int k = 0; k < rows; k += 10)
    for (const DocView& d : documents(data.next(10))) prompt += d.prompt, answer += d.answer, ++n;
  EXPECT_GE(n, 300);
  EXPECT_NEAR(prompt / n / m.prompt_mean, 1.0, tolerance) << packing_name(kind) << " over " << n << " documents";
  EXPECT_NEAR(answer / n / m.answer_mean, 1.0, tolerance) << packing_name(kind) << " over " << n << " documents";
}

TEST(PackedSynthetic, LengthsHaveTheDocumentedMeans) {
  EXPECT_NEAR(length_model(Packing::squad).prompt_mean, 1.3 * (117 + 10.1) + 10, 1e-9);
  EXPECT_NEAR(length_model(Packing::squad).answer_mean, 1.3 * 3.2 + 1, 1e-9);
  EXPECT_NEAR(length_model(Packing::govreport).prompt_mean, 1.3 * 9409.4 + 10, 1e-9);
  EXPECT_NEAR(length_model(Packing::govreport).answer_mean, 1.3 * 553.4 + 1, 1e-9);
  expect_means(Packing::squad, 4096, 100, 0.05);
  expect_means(Packing::govreport, 65536, 100, 0.08);
}

TEST(PackedSynthetic, GovReportDocumentsAreCutToTheSequence) {
  PackedSynthetic data(Packing::govreport, 1000, 8192, 5);
  int cut = 0, n = 0;
  for (const DocView& d : documents(data.next(40))) {
    EXPECT_LE(d.len, 8192);
    EXPECT_LE(d.answer, 4096);
    cut += d.len == 8192, ++n;
  }
  EXPECT_GT(cut, n / 3);  // reports average ~12k tokens: most are cut to the row
  EXPECT_THROW(PackedSynthetic(Packing::govreport, 1000, 200, 1), Error);  // shorter than the shortest document
  EXPECT_THROW(PackedSynthetic(Packing::squad, 3, 512, 1), Error);         // no markov chain in 3 tokens
}

// ---- FILE.index + FILE.bin ---------------------------------------------------------------------------------------

using testing_support::DocSpec;

fs::path write_temp(const std::string& stem, const std::vector<DocSpec>& docs) {
  return testing_support::write_packed(fs::temp_directory_path() / ("tb_packed_" + stem), docs);
}

std::vector<DocSpec> three_documents() {
  std::vector<DocSpec> docs(3);
  for (std::uint16_t i = 0; i < 5; ++i) docs[0].tokens.push_back(100 + i);
  for (std::uint16_t i = 0; i < 9; ++i) docs[1].tokens.push_back(200 + i);
  for (std::uint16_t i = 0; i < 3; ++i) docs[2].tokens.push_back(300 + i);
  docs[0].spans = {{2, 4}};
  docs[1].spans = {{0, 2}, {5, 8}};  // two answers
  return docs;
}

TEST(PackedFile, ReadsTheDocumentsItsIndexNames) {
  const std::vector<DocSpec> docs = three_documents();
  const fs::path index = write_temp("three", docs);
  PackedFile f(index, 12, 7, 400);
  EXPECT_EQ(f.documents(), 3);
  EXPECT_EQ(f.max_documents_per_row(), 2);  // the shortest two (3 + 5 tokens) fit a row of 12, not the third
  const Batch b = f.next(20);
  std::vector<int> seen(3, 0);
  for (const DocView& d : documents(b)) {
    const int which = b.tokens[std::size_t(d.row * 12 + d.at)] / 100 - 1;
    ASSERT_TRUE(which >= 0 && which < 3);
    ++seen[std::size_t(which)];
    const DocSpec& want = docs[std::size_t(which)];
    ASSERT_EQ(std::size_t(d.len), want.tokens.size());
    std::vector<std::uint8_t> mask(want.tokens.size(), 0);
    for (const auto& [s, e] : want.spans) std::fill(mask.begin() + s, mask.begin() + e, 1);
    for (int j = 0; j < d.len; ++j) {
      EXPECT_EQ(b.tokens[std::size_t(d.row * 12 + d.at + j)], want.tokens[std::size_t(j)]);
      EXPECT_EQ(b.loss_mask[std::size_t(d.row * 12 + d.at + j)], mask[std::size_t(j)]);
    }
  }
  for (int k = 0; k < 3; ++k) EXPECT_GT(seen[std::size_t(k)], 0) << "document " << k << " never drawn";
  PackedFile again(index, 12, 7, 400);
  Batch h = again.next(10), h2 = again.next(10);
  h.tokens.insert(h.tokens.end(), h2.tokens.begin(), h2.tokens.end());
  EXPECT_EQ(h.tokens, b.tokens);
  DataSource source(index.string(), TokenType::uint32, 400, 12, 7);  // the index names its own token type
  EXPECT_EQ(source.next(20).tokens, b.tokens);
  EXPECT_EQ(source.max_documents_per_row(), 2);
}

TEST(PackedFile, ReadsAFixedSetInOrder) {  // documents(first, n): one document per row, wrapping around
  const std::vector<DocSpec> docs = three_documents();
  const PackedFile f(write_temp("in_order", docs), 12, 7, 400);
  EXPECT_EQ(f.longest_document(), 9);
  EXPECT_EQ(f.largest_token(), 302u);
  const Batch b = f.documents(2, 4);
  const std::vector<int> want_docs = {2, 0, 1, 2};
  EXPECT_EQ(b.row_docs, std::vector<std::int32_t>(4, 1));
  EXPECT_EQ(b.doc_lens, (std::vector<std::int32_t>{3, 5, 9, 3}));
  for (int r = 0; r < 4; ++r) {
    const DocSpec& want = docs[std::size_t(want_docs[std::size_t(r)])];
    std::vector<std::uint8_t> mask(12, 0);
    for (const auto& [s, e] : want.spans) std::fill(mask.begin() + s, mask.begin() + e, 1);
    for (int j = 0; j < 12; ++j) {
      const std::size_t at = std::size_t(r * 12 + j), len = want.tokens.size();
      EXPECT_EQ(b.tokens[at], std::size_t(j) < len ? want.tokens[std::size_t(j)] : 0) << r << " " << j;
      EXPECT_EQ(b.targets[at], std::size_t(j) + 1 < len ? want.tokens[std::size_t(j) + 1] : 0) << r << " " << j;
      EXPECT_EQ(b.loss_mask[at], mask[std::size_t(j)]) << r << " " << j;
    }
  }
}

TEST(PackedFile, BadInputIsRefusedWithOneClearMessage) {
  std::vector<DocSpec> docs = three_documents();
  const fs::path index = write_temp("bad", docs);
  EXPECT_NE(testing_support::error_message([&] { PackedFile(index, 8, 1); })
                .find("document 1 has 9 tokens, longer than the sequence (8)"),
            std::string::npos);
  EXPECT_NE(testing_support::error_message([&] { PackedFile(index, 12, 1, 250).next(20); }).find(">= vocab 250"), std::string::npos);
  const auto refused = [&](std::vector<DocSpec> d, const std::string& needle) {
    const fs::path p = write_temp("bad2", d);
    const std::string msg = testing_support::error_message([&] { PackedFile(p, 12, 1); });
    EXPECT_NE(msg.find(needle), std::string::npos) << needle << ": " << msg;
  };
  std::vector<DocSpec> d = docs;
  d[1].spans = {{5, 8}, {0, 2}};
  refused(d, "document 1 (9 tokens) has loss span [0, 2)");  // out of order
  d = docs;
  d[0].spans = {{2, 5}};
  refused(d, "document 0 (5 tokens) has loss span [2, 5)");  // past the last target
  // A foreign file, a truncated index, a .bin of the wrong size, a missing .bin.
  const fs::path p = write_temp("bad3", docs);
  std::ofstream(p, std::ios::binary) << "not an index at all, really not at all";
  EXPECT_NE(testing_support::error_message([&] { PackedFile(p, 12, 1); }).find("no TBPACK01 header"), std::string::npos);
  write_temp("bad3", docs);
  fs::resize_file(p, fs::file_size(p) - 8);
  EXPECT_NE(testing_support::error_message([&] { PackedFile(p, 12, 1); }).find("a truncated or foreign file"), std::string::npos);
  write_temp("bad3", docs);
  fs::path bin = p;
  bin.replace_extension(".bin");
  std::ofstream(bin, std::ios::binary) << "abc";
  EXPECT_NE(testing_support::error_message([&] { PackedFile(p, 12, 1); }).find("not a multiple of 2 bytes per token"), std::string::npos);
  fs::remove(bin);
  EXPECT_NE(testing_support::error_message([&] { PackedFile(p, 12, 1); }).find("cannot open"), std::string::npos);
  EXPECT_NE(testing_support::error_message([&] { DataSource("no-such.index", TokenType::uint16, 10, 8, 1); }).find("packed-squad"),
            std::string::npos);
}

TEST(PackedFile, ReadsWhatTheMlperfConverterWrites) {
  const fs::path dir = fs::temp_directory_path() / "tb_govreport";
  fs::create_directories(dir);
  const std::string py = "PYTHONPATH=.deps/pytools python3 ";
  const auto w = testing_support::run_shell(py + "tests/train/govreport_parquet.py " + (dir / "g.parquet").string() +
                                            " 2>&1");
  ASSERT_EQ(w.rc, 0) << w.out << "(scripts/setup.sh installs pyarrow into .deps/pytools)";
  const auto c = testing_support::run_shell(py + "scripts/convert_mlperf_govreport.py " + (dir / "g.parquet").string() +
                                            " --out " + (dir / "gov").string() + " 2>&1");
  ASSERT_EQ(c.rc, 0) << c.out;
  EXPECT_NE(c.out.find("6 documents, 66 uint16 tokens, 7 loss spans"), std::string::npos) << c.out;
  PackedFile f(dir / "gov.index", 16, 3, 1000);
  EXPECT_EQ(f.documents(), 6);
  const Batch b = f.next(30);
  for (const DocView& d : documents(b)) {
    const int r = b.tokens[std::size_t(d.row * 16 + d.at)] / 100;
    for (int j = 0; j < d.len; ++j) EXPECT_EQ(b.tokens[std::size_t(d.row * 16 + d.at + j)], 100 * r + j + 1);
    std::vector<std::uint8_t> want(std::size_t(d.len), 0);
    if (r < 5) {
      EXPECT_EQ(d.len, 6 + 2 * r);
      std::fill(want.begin() + (3 + r) - 1, want.end() - 1, 1);  // predicting the summary's tokens
    } else {
      EXPECT_EQ(d.len, 16);
      std::fill(want.begin() + 7, want.begin() + 11, 1), std::fill(want.begin() + 12, want.begin() + 15, 1);
    }
    for (int j = 0; j < d.len; ++j)
      EXPECT_EQ(b.loss_mask[std::size_t(d.row * 16 + d.at + j)], want[std::size_t(j)]) << "sample " << r << " " << j;
  }
  fs::remove_all(dir);
}

// ---- loss weights, --data ------------------------------------------------------------------------------------------

TEST(LossWeights, AreTheMaskOverTheStepsCountedTokens) {
  PackedSynthetic data(Packing::squad, 100, 256, 2);
  std::vector<Batch> step;
  std::int64_t counted = 0;
  for (int m = 0; m < 4; ++m) step.push_back(data.next(2)), counted += step.back().loss_tokens();
  double sum = 0;
  for (const Batch& b : step) {
    const std::vector<double> w = loss_weights(b, 4, counted);
    ASSERT_EQ(w.size(), b.loss_mask.size());
    for (std::size_t i = 0; i < w.size(); ++i) {
      EXPECT_EQ(w[i], b.loss_mask[i] ? 4.0 / double(counted) : 0.0);
      sum += w[i];
    }
  }
  EXPECT_NEAR(sum, 4.0, 1e-12);  // the mean over the 4 micro-batches of their sums is 1 per counted token
  EXPECT_TRUE(loss_weights(SyntheticData(10, 8, 1, Task::markov).next(1), 4, 32).empty());
  EXPECT_EQ(loss_weights(step[0], 4, 0), std::vector<double>(step[0].loss_mask.size(), 0.0));
  DataSource s("packed-squad", TokenType::uint16, 100, 256, 2);
  EXPECT_EQ(s.next(2).tokens, step[0].tokens);
  EXPECT_EQ(s.max_documents_per_row(), 5);  // 3 x 256 / (175.2 + 5.2), rounded up
  EXPECT_EQ(DataSource("markov", TokenType::uint16, 100, 256, 2).max_documents_per_row(), 0);
}

}  // namespace
}  // namespace tb::train
