// tests/mlperf/ttt_test.cpp: the time-to-train projection by hand, and the benchmarks' evaluation schedule.
#include "mlperf/ttt.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace tb::mlperf {
namespace {

TEST(MlperfTtt, EvalSchedule) {
  const Benchmark& lora = find_benchmark("llama2_70b_lora");
  EXPECT_EQ(lora.eval_every_steps(8), 48);     // 384 / 8
  EXPECT_EQ(lora.eval_skipped(8), 3);          // floor(0.125 * 8 + 2)
  EXPECT_EQ(lora.eval_skipped(128), 18);       // floor(16 + 2)
  EXPECT_EQ(lora.eval_every_steps(256), 2);    // ceil(384 / 256)
  const Benchmark& gpt3 = find_benchmark("gpt3");
  EXPECT_EQ(gpt3.eval_every_steps(1536), 16);  // 24576 / 1536
  EXPECT_EQ(gpt3.eval_skipped(1536), 0);
  EXPECT_EQ(gpt3.runs, 3);
}

TEST(MlperfTtt, LoraAtGbs8) {
  // RCP at GBS 8: 3178.7 samples -> 9 intervals of 384 = 3456 samples (NVIDIA's v4.0 8xH100 log stops at 3456);
  // 9 - 3 = 6 evaluations of 173 samples
  const auto p = project_ttt(find_benchmark("llama2_70b_lora"), 8, 10.0);
  ASSERT_TRUE(p.has_value());
  EXPECT_DOUBLE_EQ(p->samples, 3456);
  EXPECT_EQ(p->evals, 6);
  EXPECT_DOUBLE_EQ(p->train_s, 345.6);
  EXPECT_DOUBLE_EQ(p->eval_s, 6 * 173 / 30.0);
  EXPECT_DOUBLE_EQ(p->minutes, (345.6 + 6 * 173 / 30.0) / 60);
  // GBS 12 has no RCP of its own: the nearest (16) is used
  EXPECT_EQ(project_ttt(find_benchmark("llama2_70b_lora"), 12, 10.0)->point.global_batch, 16);
  EXPECT_THROW(project_ttt(find_benchmark("llama2_70b_lora"), 8, 0), Error);
}

}  // namespace
}  // namespace tb::mlperf
