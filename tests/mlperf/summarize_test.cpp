// tests/mlperf/summarize_test.cpp: the olympic mean as result_summarizer computes it, and the times read from logs
// written with a fake clock (run_stop - run_start, the first of each).
#include "mlperf/summarize.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "mlperf/mllog.h"

namespace tb::mlperf {
namespace {

TEST(MlperfSummarize, OlympicMean) {
  // 5 runs: drop the fastest (1) and the slowest (9): mean of 2, 3, 4
  EXPECT_DOUBLE_EQ(*olympic_mean({9, 3, 1, 4, 2}, 0), 3.0);
  // one run already dropped (did not converge: it counts as the slowest): drop only the fastest of the rest
  EXPECT_DOUBLE_EQ(*olympic_mean({9, 3, 1, 4}, 1), (3.0 + 4 + 9) / 3);
  EXPECT_FALSE(olympic_mean({1, 2}, 0).has_value());
  EXPECT_FALSE(olympic_mean({}, 1).has_value());
}

// A log whose run lasts `minutes` (fake clock: each line 1 ms later, run_start at 1000 ms).
void write_log(const std::filesystem::path& p, double minutes, const char* status) {
  std::FILE* f = std::fopen(p.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::int64_t t = 0;
  MllogWriter log(f, false, [&t] { return t; });
  log.event("submission_benchmark", "llama2_70b_lora");
  t = 1000;
  log.start("run_start");
  t = 1000 + std::int64_t(minutes * 60000);
  log.end("run_stop", 0.92, {{"samples_count", 1536}, {"status", status}});
  t += 5000;
  log.end("run_stop", 0.91, {{"samples_count", 1920}, {"status", status}});  // only the first counts
  std::fclose(f);
}

TEST(MlperfSummarize, ScoreFromLogs) {
  const auto dir = std::filesystem::temp_directory_path() / ("tb_mlperf_sum_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const double minutes[] = {10, 12, 11, 30, 9};
  for (int k = 0; k < 5; ++k)
    write_log(dir / ("result_" + std::to_string(k) + ".txt"), minutes[k], k == 3 ? "aborted" : "success");
  const LogSummary one = read_log(dir / "result_0.txt");
  EXPECT_EQ(one.benchmark, "llama2_70b_lora");
  EXPECT_DOUBLE_EQ(*one.ttt_min, 10.0);
  // no ruleset, so no checker: run 3 dropped by its status
  const Summary s = summarize(dir, {}, "");
  EXPECT_EQ(s.dropped, 1);
  ASSERT_TRUE(s.score_min.has_value());
  EXPECT_DOUBLE_EQ(*s.score_min, (10.0 + 11 + 12) / 3);  // 9 dropped as the fastest, the aborted run as the slowest
  EXPECT_FALSE(s.valid);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tb::mlperf
