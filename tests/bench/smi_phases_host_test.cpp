// bench/smi_phases.py (each run's mean power, SM clock and power-cap share from an nvidia-smi log and run marks) on
// crafted files: only the samples inside a run's window and above the power threshold count; lines nvidia-smi could
// not fill are skipped; a run without samples says so; --min-w moves the threshold.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "../support/shell.h"

namespace fs = std::filesystem;

namespace {

using Out = tb::testing_support::ShellResult;

class SmiPhases : public testing::Test {
 protected:
  fs::path dir = fs::temp_directory_path() / ("tb_smi_" + std::to_string(::getpid()));
  void SetUp() override {
    fs::create_directories(dir);
    // Run a: 10:00:01-10:00:03 (samples at 1.0, 1.5, 2.0 and an idle one at 2.5); run b: 10:00:04-10:00:05 (samples
    // of 300 W only); a sample between the runs (3.5) and an unfilled line.
    std::ofstream(dir / "smi.csv") << "2026/12/01 10:00:00.500, 80.00 W, 345 MHz, 40, Not Active\n"
                                      "2026/12/01 10:00:01.000, 700.00 W, 1500 MHz, 60, Active\n"
                                      "2026/12/01 10:00:01.500, 680.00 W, 1600 MHz, 61, Active\n"
                                      "2026/12/01 10:00:02.000, 660.00 W, 1700 MHz, 61, Not Active\n"
                                      "2026/12/01 10:00:02.500, 100.00 W, 1980 MHz, 55, Not Active\n"
                                      "2026/12/01 10:00:03.500, 690.00 W, 1400 MHz, 62, Active\n"
                                      "2026/12/01 10:00:04.000, [N/A], [N/A], 62, [N/A]\n"
                                      "2026/12/01 10:00:04.500, 300.00 W, 1980 MHz, 58, Not Active\n";
    std::ofstream(dir / "marks.txt") << "10:00:01.000 start a\n10:00:03.000 end a\n10:00:04.000 start b\n"
                                        "10:00:05.000 end b\n";
  }
  void TearDown() override { fs::remove_all(dir); }
  Out run(const std::string& extra = "") {
    return tb::testing_support::run_shell("python3 bench/smi_phases.py " + (dir / "smi.csv").string() + " " +
                                          (dir / "marks.txt").string() + " " + extra + " 2>&1");
  }
};

TEST_F(SmiPhases, MeansTheBusySamplesOfEachRun) {
  const Out o = run();
  ASSERT_EQ(o.rc, 0) << o.out;
  EXPECT_NE(o.out.find("a                   3 samples  power  680.0 W  SM clock  1600 MHz  power cap active  67%"),
            std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("b                no samples above 450 W"), std::string::npos) << o.out;
}

TEST_F(SmiPhases, TheThresholdIsAnOption) {
  const Out o = run("--min-w 200");
  ASSERT_EQ(o.rc, 0) << o.out;
  EXPECT_NE(o.out.find("b                   1 samples  power  300.0 W  SM clock  1980 MHz  power cap active   0%"),
            std::string::npos)
      << o.out;
}

}  // namespace
