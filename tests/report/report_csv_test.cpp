// tests/report/report_csv_test.cpp: `trainbench report --format csv` on the golden results (tests/report/golden/)
// read back as a CSV reader would (RFC 4180): one file per table beside the index, a header row of snake_case
// names, every row as wide as its header, and every cell of a numeric column (a unit in its name, or a count or
// fraction) empty or a plain number: no unit, % sign or thousands separator inside. Known cells against the records:
// the train table's tokens_per_s, the scaling table's step_ms (an older record's step_s x 1e3), MFU as a fraction.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace {
namespace fs = std::filesystem;
using Row = std::vector<std::string>;

// RFC 4180: quoted fields may hold commas, doubled quotes and newlines.
std::vector<Row> parse_csv(const std::string& text) {
  std::vector<Row> rows;
  Row row{""};
  bool quoted = false, any = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    any = true;
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"')
        row.back() += '"', ++i;
      else if (c == '"')
        quoted = false;
      else
        row.back() += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      row.emplace_back();
    } else if (c == '\n') {
      rows.push_back(row), row = {""}, any = false;
    } else {
      row.back() += c;
    }
  }
  if (any) rows.push_back(row);
  return rows;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool numeric_column(const std::string& name) {
  static const std::set<std::string> counts_and_fractions = {
      "tflops",     "mfu",       "ratio",         "efficiency", "comm_share", "jitter",       "vs_median",
      "gpus",       "rank",      "steps",         "bytes",      "value",      "expected_min", "sibling_median",
      "loss_first", "loss_last", "reference_mfu", "rows",       "micro_batch"};
  static const std::regex unit(R"(.*_(ms|s|us|gib|w|gbps|tbps|mhz|per_s|per_gpu|per_token|se|median|p10|p90|max)$)");
  return counts_and_fractions.count(name) || std::regex_match(name, unit);
}

bool plain_number(const std::string& s) {
  if (s.empty()) return true;  // no value
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(v) && s.find_first_of("%, ") == std::string::npos;
}

std::map<std::string, std::string> cells(const std::vector<Row>& t, std::size_t row) {
  std::map<std::string, std::string> m;
  for (std::size_t i = 0; i < t[0].size(); ++i) m[t[0][i]] = t[row][i];
  return m;
}

nlohmann::json first_record(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  return nlohmann::json::parse(line);
}

TEST(ReportCsv, EveryTableReadsBackWithPlainNumbers) {
  const fs::path dir = fs::temp_directory_path() / "tb-report-csv-test";
  fs::remove_all(dir);
  std::vector<std::string> args{"trainbench report",     "tests/report/golden", "--format", "csv", "-o",
                                (dir / "r.csv").string()};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  ASSERT_EQ(tb::cli::cmd_report(int(argv.size()), argv.data()), 0);

  const auto index = parse_csv(slurp(dir / "r.csv"));
  ASSERT_GE(index.size(), 2u);
  EXPECT_EQ(index[0], (Row{"table", "file", "title", "rows", "notes"}));
  std::map<std::string, std::vector<Row>> tables;
  const std::regex snake("[a-z][a-z0-9_]*");
  for (std::size_t i = 1; i < index.size(); ++i) {
    const auto e = cells(index, i);
    ASSERT_TRUE(fs::exists(dir / e.at("file"))) << e.at("file");
    const auto t = parse_csv(slurp(dir / e.at("file")));
    ASSERT_GE(t.size(), 1u) << e.at("file");
    EXPECT_EQ(std::to_string(t.size() - 1), e.at("rows")) << e.at("file");
    for (const auto& h : t[0]) EXPECT_TRUE(std::regex_match(h, snake)) << e.at("file") << ": header '" << h << "'";
    std::size_t numbers = 0;
    for (std::size_t r = 1; r < t.size(); ++r) {
      ASSERT_EQ(t[r].size(), t[0].size()) << e.at("file") << " row " << r;
      for (std::size_t c = 0; c < t[0].size(); ++c) {
        if (!numeric_column(t[0][c])) continue;
        EXPECT_TRUE(plain_number(t[r][c])) << e.at("file") << " row " << r << " " << t[0][c] << ": '" << t[r][c] << "'";
        numbers += !t[r][c].empty();
      }
    }
    if (e.at("table") != "provenance") {
      EXPECT_GT(numbers, 0u) << e.at("file");
    }
    tables[e.at("table")] = t;
  }
  for (const char* id : {"provenance", "comparison", "train", "sweep", "scaling", "stragglers", "collectives"})
    EXPECT_TRUE(tables.count(id)) << id;

  // Known cells: the train record's tokens/s and MFU-free CPU row; the older scale.point's step_s in ms.
  const auto train = first_record("tests/report/golden/train-cpu.jsonl");
  const auto tr = cells(tables.at("train"), 1);
  EXPECT_NEAR(std::stod(tr.at("tokens_per_s")), train["tokens_per_s"].get<double>(),
              1e-9 * train["tokens_per_s"].get<double>());
  EXPECT_NEAR(std::stod(tr.at("step_ms_median")), train["step_ms"]["median"].get<double>(), 1e-9);
  const auto scale = first_record("tests/report/golden/scale.jsonl");
  const auto sc = cells(tables.at("scaling"), 1);
  EXPECT_EQ(sc.at("gpus"), "1");
  EXPECT_NEAR(std::stod(sc.at("step_ms")), 1e3 * scale["step_s"].get<double>(), 1e-6);
  EXPECT_EQ(sc.at("efficiency"), "1");  // a fraction, not "100.0%"
  const auto cmp = cells(tables.at("comparison"), 1);
  const double mfu = std::stod(cmp.at("mfu"));
  EXPECT_GT(mfu, 0.1);
  EXPECT_LT(mfu, 1.0);  // a fraction
  fs::remove_all(dir);
}

TEST(ReportCsv, OneTableToStdoutOrAClearError) {
  std::vector<std::string> args{"trainbench report", "tests/report/golden", "--format", "csv", "-o", "-"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  testing::internal::CaptureStderr();
  EXPECT_EQ(tb::cli::cmd_report(int(argv.size()), argv.data()), 2);  // several tables, one stdout
  EXPECT_NE(testing::internal::GetCapturedStderr().find("--table"), std::string::npos);
  args.insert(args.end(), {"--table", "scaling"});
  argv.clear();
  for (auto& a : args) argv.push_back(a.data());
  testing::internal::CaptureStdout();
  EXPECT_EQ(tb::cli::cmd_report(int(argv.size()), argv.data()), 0);
  const auto t = parse_csv(testing::internal::GetCapturedStdout());
  ASSERT_GE(t.size(), 2u);
  EXPECT_EQ(t[0].front(), "gpus");
}

}  // namespace
