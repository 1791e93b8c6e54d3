// bench/accuracy_table.py (the FP8 accuracy criterion per seed) on crafted run folders: the mean of the last N losses,
// the difference to BF16 of the same seed, the mean and sd over seeds, and the exit code (0 only when every seed of
// every precision is within the bound and no run is missing), --against another precision; bench/accuracy_curves.py (the loss curves) on the same
// folders: the trailing mean's difference at the last step, the chart, a missing BF16 run.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../support/shell.h"

namespace fs = std::filesystem;

namespace {

using Out = tb::testing_support::ShellResult;
Out sh(const std::string& cmd) { return tb::testing_support::run_shell(cmd + " 2>&1"); }

class AccuracyTable : public testing::Test {
 protected:
  fs::path dir = fs::temp_directory_path() / ("tb_acc_" + std::to_string(::getpid()));
  void SetUp() override { fs::create_directories(dir); }
  void TearDown() override { fs::remove_all(dir); }

  // A run with the given losses (one JSONL record of the train bench, after another record).
  void run(const std::string& name, const std::vector<double>& losses) {
    fs::create_directories(dir / name);
    std::ofstream f(dir / name / "train.jsonl");
    f << R"({"bench":"info"})" << "\n" << R"({"bench":"train","loss":[)";
    for (std::size_t i = 0; i < losses.size(); ++i) f << (i ? "," : "") << losses[i];
    f << "]}\n";
  }
  // Losses whose last two are a and b, after values the table must not read.
  void run(const std::string& name, double a, double b) { run(name, {9.0, 9.0, 9.0, a, b}); }
  Out table(const std::string& extra = "") {
    return sh("python3 bench/accuracy_table.py " + dir.string() + " --tag t --last 2 " + extra);
  }
};

TEST_F(AccuracyTable, WithinTheBoundOnEverySeedExitsZero) {
  for (int s : {1, 2}) {
    run("t-s" + std::to_string(s) + "-text-bf16", 1.9, 2.1);                         // mean 2.0
    run("t-s" + std::to_string(s) + "-text-fp8_--fp8-recipe_delayed", 2.01, 2.01);  // +0.50%
  }
  const Out o = table();
  EXPECT_EQ(o.rc, 0) << o.out;
  EXPECT_NE(o.out.find("| fp8 --fp8-recipe delayed | 2.0100 (+0.50%) | 2.0100 (+0.50%) | +0.50% (0.00%) | "
                        "0.50%: within 1.5% on every seed |"),
            std::string::npos)
      << o.out;
}

TEST_F(AccuracyTable, OneSeedOverTheBoundFailsAndTheMeanShowsTheShift) {
  run("t-s1-markov-bf16", 2.0, 2.0);
  run("t-s2-markov-bf16", 2.0, 2.0);
  run("t-s1-markov-fp8", 2.04, 2.04);  // +2%
  run("t-s2-markov-fp8", 1.98, 1.98);  // -1%
  const Out o = table();
  EXPECT_EQ(o.rc, 1) << o.out;
  EXPECT_NE(o.out.find("+0.50% (2.12%) | 2.00%: OVER 1.5% on 1 of 2 seeds |"), std::string::npos) << o.out;
  EXPECT_EQ(table("--tol 0.025").rc, 0);
}

TEST_F(AccuracyTable, MissingBf16RunOrTooFewLossesFail) {
  run("t-s1-text-bf16", 2.0, 2.0);
  run("t-s1-text-fp8", 2.0, 2.0);
  run("t-s2-text-fp8", 2.0, 2.0);  // no BF16 run for seed 2
  Out o = table();
  EXPECT_EQ(o.rc, 1);
  EXPECT_NE(o.out.find("missing"), std::string::npos) << o.out;
  run("t-s2-text-bf16", std::vector<double>{2.0});  // one loss, --last 2
  o = table();
  EXPECT_NE(o.rc, 0);
  EXPECT_NE(o.out.find("no train record with at least 2 losses"), std::string::npos) << o.out;
  EXPECT_NE(sh("python3 bench/accuracy_table.py " + dir.string() + " --tag none").rc, 0);
}

TEST_F(AccuracyTable, AgainstAnotherPrecisionOfTheSameSeed) {
  run("t-s1-text-bf16", 2.0, 2.0);
  run("t-s1-text-fp8", 2.02, 2.02);                // +1% over BF16
  run("t-s1-text-fp8_--fp8-lm-head", 2.0402, 2.0402);  // +1% over fp8, +2.01% over BF16
  Out o = table("--against fp8");
  EXPECT_EQ(o.rc, 0) << o.out;
  EXPECT_NE(o.out.find("difference to fp8 of the same seed"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("| bf16 | 2.0000 (-0.99%) | -0.99% |"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("| fp8 | 2.0200 |  |  |"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("| fp8 --fp8-lm-head | 2.0402 (+1.00%) | +1.00% |"), std::string::npos) << o.out;
  EXPECT_NE(table("--against 'fp8 --fp8-lm-head'").out.find("| fp8 | 2.0200 (-0.99%) |"), std::string::npos);
  EXPECT_EQ(table().rc, 1);  // against BF16 the head's +2.01% is over the bound
  o = table("--against fp8_delayed");
  EXPECT_NE(o.rc, 0);
  EXPECT_NE(o.out.find("text: no runs of --against 'fp8_delayed'; the precisions are: bf16, fp8, fp8_--fp8-lm-head"),
            std::string::npos)
      << o.out;
}

TEST_F(AccuracyTable, CurvesEndAtTheTablesDifferenceAndDrawAChart) {
  for (int s : {1, 2}) {  // a trailing mean over 2 steps ends at 2.0 and 2.02: +1.00% (over all 3 steps: +0.50%)
    run("t-s" + std::to_string(s) + "-text-bf16", {4.0, 2.0, 2.0});
    run("t-s" + std::to_string(s) + "-text-fp8", {4.0, 2.02, 2.02});
  }
  const std::string curves = "python3 bench/accuracy_curves.py " + dir.string() + " --tag t --window 2 --out ";
  const Out o = sh(curves + (dir / "c").string());
  EXPECT_EQ(o.rc, 0) << o.out;
  EXPECT_NE(o.out.find("  fp8: +1.00% (2 seeds)"), std::string::npos) << o.out;
  ASSERT_TRUE(fs::exists(dir / "c-text.png")) << o.out;
  EXPECT_GT(fs::file_size(dir / "c-text.png"), 1000u);
  fs::remove_all(dir / "t-s2-text-bf16");
  const Out missing = sh(curves + (dir / "d").string());
  EXPECT_NE(missing.rc, 0);
  EXPECT_NE(missing.out.find("text: no BF16 run for seed(s) [2]"), std::string::npos) << missing.out;
}

}  // namespace
