// tests/mlperf/ttt_test.cpp: the time-to-train projection by hand, the benchmarks' evaluation schedule, and the report
// of `project --ttt` (throughput from tokens/s per GPU, the published row it picks, the error) by hand.
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

recipe::ReferenceRow ttt_row(std::string recipe, std::string gpu, std::string release, int gpus, double minutes) {
  recipe::ReferenceRow r;
  r.recipe = std::move(recipe), r.gpu = std::move(gpu), r.releases = {std::move(release)}, r.precision = "fp8";
  r.gpus = gpus, r.time_to_train_min = minutes, r.global_batch = 8, r.samples_to_target = 3225.6;
  return r;
}

TEST(MlperfTtt, ReportBesideThePublishedRow) {
  const std::vector<recipe::ReferenceRow> rows = {
      ttt_row("mlperf-llama2-70b-lora", "H200", "4.0", 8, 24.689), ttt_row("mlperf-llama2-70b-lora", "H200", "4.1", 8, 24.116),
      ttt_row("mlperf-llama2-70b-lora", "H100", "4.1", 8, 27.928), ttt_row("mlperf-llama2-70b-lora", "H200", "4.1", 64, 5.0),
      ttt_row("mlperf-gpt3-175b", "H100", "4.1", 512, 49.795)};
  // 2560 tokens/s/GPU x 8 GPUs / 8192 = 2.5 samples/s; 3456 samples / 2.5 = 1382.4 s; 6 x 173 / 7.5 = 138.4 s;
  // 1520.8 s = 25.34667 min; beside the newest 8 x H200 row (v4.1, 24.116): +5.1031%
  const TttReport r = ttt_report("mlperf-llama2-70b-lora", 8, 8, 8192, 2560, rows, "NVIDIA H200", "fp8");
  EXPECT_DOUBLE_EQ(r.samples_per_s, 2.5);
  EXPECT_DOUBLE_EQ(r.ttt.samples, 3456);
  EXPECT_DOUBLE_EQ(r.ttt.train_s, 1382.4);
  EXPECT_NEAR(r.ttt.eval_s, 138.4, 1e-9);
  EXPECT_NEAR(r.ttt.minutes, 25.3466667, 1e-6);
  ASSERT_NE(r.published, nullptr);
  EXPECT_EQ(r.published->time_to_train_min, 24.116);
  EXPECT_NEAR(r.error, 0.0510311, 1e-6);
  EXPECT_NE(render_ttt(r).find("+5.1%"), std::string::npos) << render_ttt(r);
  EXPECT_EQ(ttt_report("mlperf-llama2-70b-lora", 8, 8, 8192, 2560, rows, "NVIDIA H200", "bf16").published, nullptr);
  EXPECT_EQ(ttt_report("mlperf-llama2-70b-lora", 8, 8, 8192, 2560, rows, "NVIDIA H100", "fp8").published->gpu, "H100");

  // GPT-3: 1000 tokens/s/GPU x 512 / 2048 = 250 samples/s; the RCP at GBS 2048 (1.183e9 tokens = 577,636.7 samples)
  // rounded up to 24 intervals of 12 steps x 2048 = 589,824 samples: 2359.296 s; 24 x 24,567 / 750 = 786.144 s;
  // 52.424 min against 49.795: +5.2796%
  const TttReport g = ttt_report("mlperf-gpt3-175b", 512, 2048, 2048, 1000, rows, "H100", "fp8");
  EXPECT_DOUBLE_EQ(g.ttt.samples, 589824);
  EXPECT_EQ(g.ttt.evals, 24);
  EXPECT_NEAR(g.ttt.minutes, 52.424, 1e-9);
  EXPECT_NEAR(g.error, 0.0527965, 1e-6);

  EXPECT_THROW(ttt_report("llama3-70b-lora", 8, 8, 8192, 2560, rows, "H200", "fp8"), Error);
  EXPECT_THROW(ttt_report("mlperf-llama2-70b-lora", 8, 8, 8192, 0, rows, "H200", "fp8"), Error);
}

}  // namespace
}  // namespace tb::mlperf
