// tests/report/report_test.cpp: the report from golden JSONL (tests/report/golden/, written by make_golden.py):
// every table and chart present and non-empty, Markdown holds the same cells as the HTML tables and CSV the same rows
// (report_csv_test.cpp reads the CSV files back), straggler
// and jitter analysis names the slow rank, sweep rows dedupe and mark the best, scaling efficiency.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "cli/commands.h"
#include "report/analysis.h"
#include "report/charts.h"
#include "report/exec.h"
#include "report/inputs.h"
#include "report/render.h"
#include "report/tables.h"


namespace tb::report {
namespace {
namespace fs = std::filesystem;
using Cells = std::vector<std::vector<std::string>>;

const fs::path kGolden = "tests/report/golden";

std::string unescape(std::string s) {
  for (auto [from, to] : {std::pair{"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&amp;", "&"}}) {
    for (std::size_t p; (p = s.find(from)) != std::string::npos;) s.replace(p, std::string(from).size(), to);
  }
  return s;
}

std::map<std::string, Cells> html_tables(const std::string& html) {
  std::map<std::string, Cells> out;
  const std::regex table(R"re(<table data-table="([^"]+)">([\s\S]*?)</table>)re"),
      row(R"re(<tr[^>]*>([\s\S]*?)</tr>)re"), cell(R"re(<t[hd]>([\s\S]*?)</t[hd]>)re");
  for (std::sregex_iterator t(html.begin(), html.end(), table), e; t != e; ++t) {
    Cells& c = out[(*t)[1]];
    const std::string body = (*t)[2];
    for (std::sregex_iterator r(body.begin(), body.end(), row); r != e; ++r) {
      const std::string rb = (*r)[1];
      c.emplace_back();
      for (std::sregex_iterator x(rb.begin(), rb.end(), cell); x != e; ++x) c.back().push_back(unescape((*x)[1]));
    }
  }
  return out;
}

std::vector<std::string> csv_line(const std::string& line) {
  std::vector<std::string> cells{""};
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') cells.back() += '"', ++i;
      else if (c == '"') quoted = false;
      else cells.back() += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      cells.emplace_back();
    } else {
      cells.back() += c;
    }
  }
  return cells;
}

std::vector<Cells> md_tables(const std::string& md) {
  std::vector<Cells> out;
  std::stringstream ss(md);
  bool in = false;
  for (std::string line; std::getline(ss, line);) {
    if (!line.starts_with("|")) {
      in = false;
      continue;
    }
    if (!in) out.emplace_back(), in = true;
    if (line.starts_with("| --- |")) continue;
    std::vector<std::string> cells;
    std::string cur;
    for (std::size_t i = 1; i < line.size(); ++i) {
      if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') cur += '|', ++i;
      else if (line[i] == '|') cells.push_back(cur), cur.clear();
      else cur += line[i];
    }
    for (auto& c : cells) {
      c = c.substr(1, c.size() - 2);  // the padding spaces
      if (c.size() >= 4 && c.starts_with("**") && c.ends_with("**")) c = c.substr(2, c.size() - 4);
    }
    out.back().push_back(cells);
  }
  return out;
}

Inputs golden() { return load_inputs({kGolden}); }

TEST(Report, EveryTableFromGolden) {
  const auto tables = build_tables(golden(), {});
  std::vector<std::string> ids;
  for (const auto& t : tables) {
    ids.push_back(t.id);
    EXPECT_FALSE(t.rows.empty()) << t.id;
    for (const auto& r : t.rows) EXPECT_EQ(r.size(), t.columns.size()) << t.id;
  }
  EXPECT_EQ(ids, (std::vector<std::string>{"provenance", "comparison", "train", "sweep", "scaling", "stragglers", "check",
                                           "collectives"}));
}

TEST(Report, StragglerIsTheSlowRank) {
  const auto reps = analyze_stragglers(select(golden(), "rank_steps"));
  ASSERT_EQ(reps.size(), 1u);
  EXPECT_EQ(reps[0].slowest, 2);
  EXPECT_NEAR(reps[0].spread, 0.18, 0.03);
  for (const auto& r : reps[0].ranks) EXPECT_EQ(r.straggler, r.rank == 2) << r.rank;
  // rank 1 jitters most (gauss sigma 6 ms on 100): (p90 - p10) / median about 2 x 1.28 x 6%
  EXPECT_GT(reps[0].ranks[1].jitter, reps[0].ranks[0].jitter);
  EXPECT_NE(reps[0].summary().find("slowest rank 2 (node01 GPU 2)"), std::string::npos) << reps[0].summary();
  // its GPU held a lower clock: the summary says so, with the reason; the ranks at the common clock are not named
  EXPECT_EQ(reps[0].ranks[2].sm_clock_mhz, 1262);
  EXPECT_NE(reps[0].summary().find("its GPU's SM clock 1262 MHz against the ranks' median 1502 (limited by: "
                                   "sw_power_cap, sw_thermal)"),
            std::string::npos)
      << reps[0].summary();
  const auto g = golden();  // the same clocks everywhere: no clock note
  std::vector<nlohmann::json> copies;
  for (const auto* r : select(g, "rank_steps")) {
    copies.push_back(*r);
    copies.back()["telemetry"]["sm_clock_mhz_mean"] = 1500.0;
  }
  std::vector<const nlohmann::json*> ptrs;
  for (const auto& c : copies) ptrs.push_back(&c);
  const auto same = analyze_stragglers(ptrs);
  ASSERT_EQ(same.size(), 1u);
  EXPECT_EQ(same[0].summary().find("SM clock"), std::string::npos) << same[0].summary();
}

TEST(Report, SweepDedupesAndMarksTheBest) {
  const auto rows = sweep_rows(select(golden(), "sweep.point"));
  ASSERT_EQ(rows.size(), 6u);  // 7 records, one point resumed
  int best = 0, skipped = 0;
  for (const auto& r : rows) {
    best += r.best;
    if (r.best) {
      EXPECT_EQ(r.name, "micro_batch=2,recompute=none");
    }
    if (r.status == "skipped") {
      ++skipped;
      EXPECT_NE(r.reason.find("GiB"), std::string::npos);
    }
  }
  EXPECT_EQ(best, 1);
  EXPECT_EQ(skipped, 1);
  EXPECT_TRUE(rows[0].resumed);  // the last record of the point wins
}

TEST(Report, ScalingEfficiencyAgainstTheSmallestCount) {
  const auto rows = scale_rows(select(golden(), "scale.point"));
  ASSERT_EQ(rows.size(), 8u);
  for (const auto& r : rows) {
    if (r.gpus == 1) {
      EXPECT_DOUBLE_EQ(r.efficiency, 1.0);
    }
    if (r.gpus == 8 && r.source == "projected") {
      EXPECT_NEAR(r.efficiency, 10638.0 / 11900.0, 1e-9);
      EXPECT_NEAR(r.comm_share, 0.061, 1e-9);
    }
    if (r.source == "proxy") {
      EXPECT_LT(r.comm_share, 0);  // unknown
    }
  }
}

TEST(Report, CsvAndMarkdownHoldTheHtmlTables) {
  const auto tables = build_tables(golden(), {});
  const auto html = html_tables(render_html(tables, {}, {}));
  const auto md = md_tables(render_markdown(tables, {}));
  ASSERT_EQ(html.size(), tables.size());
  ASSERT_EQ(md.size(), tables.size());
  for (std::size_t i = 0; i < tables.size(); ++i) {
    const auto& id = tables[i].id;
    ASSERT_TRUE(html.count(id)) << id;
    EXPECT_EQ(html.at(id), md[i]) << id;
    EXPECT_EQ(html.at(id).size(), tables[i].rows.size() + 1) << id;
    // CSV (one file per table): the header and the same rows, every row as wide as the header
    Cells csv;
    std::stringstream ss(render_csv(tables[i]));
    for (std::string line; std::getline(ss, line);) csv.push_back(csv_line(line));
    ASSERT_EQ(csv.size(), tables[i].rows.size() + 1) << id;
    EXPECT_EQ(csv.front(), tables[i].csv_columns) << id;
    for (const auto& row : csv) EXPECT_EQ(row.size(), tables[i].csv_columns.size()) << id;
  }
}

TEST(Report, EveryChartDrawnAndNonEmpty) {
  if (find_program("gnuplot").empty()) GTEST_SKIP() << "gnuplot is not installed (scripts/setup.sh installs gnuplot-nox)";
  const fs::path dir = fs::temp_directory_path() / "tb-report-charts-test";
  fs::remove_all(dir);
  const auto charts = build_charts(golden(), {dir, "gnuplot"});
  std::vector<std::string> ids;
  for (const auto& c : charts) {
    ids.push_back(c.id);
    ASSERT_GT(c.png.size(), 5000u) << c.id;  // a real plot, not an empty canvas
    EXPECT_EQ(c.png.substr(0, 4), "\x89PNG") << c.id;
  }
  EXPECT_EQ(ids, (std::vector<std::string>{"scaling", "sweep", "rank_dist", "rank_timeline", "telemetry", "busbw"}));
  fs::remove_all(dir);
}

TEST(Report, CommandWritesSelfContainedHtmlMdCsv) {
  const fs::path dir = fs::temp_directory_path() / "tb-report-cmd-test";
  fs::remove_all(dir);
  for (std::string fmt : {"html", "md", "csv"}) {
    const std::string out = (dir / ("r." + fmt)).string(), golden_dir = kGolden.string();
    std::vector<std::string> args{"trainbench report", golden_dir, "-o", out};
    if (fmt == "html" && find_program("gnuplot").empty()) args.push_back("--no-charts");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    ASSERT_EQ(tb::cli::cmd_report(int(argv.size()), argv.data()), 0) << fmt;
    std::ifstream in(out);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    EXPECT_NE(text.find("slowest rank 2"), std::string::npos) << fmt;  // csv: the notes in the index
    EXPECT_NE(text.find("micro_batch=2,recompute=none"), std::string::npos) << fmt;
    if (fmt == "csv")
      for (const char* t : {"comparison", "train", "sweep", "scaling", "stragglers", "collectives"}) {
        EXPECT_NE(text.find(std::string("r.") + t + ".csv"), std::string::npos) << t;
        EXPECT_TRUE(fs::exists(dir / (std::string("r.") + t + ".csv"))) << t;
      }
    if (fmt == "html") {
      EXPECT_EQ(text.find("src=\"http"), std::string::npos);  // nothing fetched from the network
      EXPECT_EQ(text.find("href=\"http"), std::string::npos);
      if (!find_program("gnuplot").empty()) {
        std::size_t n = 0;
        for (std::size_t p = 0; (p = text.find("data:image/png;base64,", p)) != std::string::npos; ++p) ++n;
        EXPECT_EQ(n, 6u);
      }
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tb::report
