// Tests report/compare: verdict thresholds; a run record against the published Llama 3.1 8B 8-GPU BF16 row
// (ratio of tokens/s per GPU, TFLOP/s in the reference's convention from the record's FLOPs per token, MFU against
// our peak); a record without a matching reference lists the GPU counts that exist; a distributed run's `measured`
// figures compare without the [proxy] label (with [--set] and its differences when overridden).
#include <gtest/gtest.h>

#include "recipe/reference.h"
#include "recipe/system.h"
#include "report/compare.h"

namespace {

namespace tr = tb::recipe;
namespace rp = tb::report;

TEST(Compare, VerdictThresholds) {
  EXPECT_EQ(rp::ref_verdict_for(0.949), rp::RefVerdict::below);
  EXPECT_EQ(rp::ref_verdict_for(0.95), rp::RefVerdict::meets);
  EXPECT_EQ(rp::ref_verdict_for(1.05), rp::RefVerdict::meets);
  EXPECT_EQ(rp::ref_verdict_for(1.051), rp::RefVerdict::above);
}

nlohmann::json record(double tokens_per_gpu, int gpus) {
  return {{"bench", "run"},
          {"recipe", "llama3.1-8b"},
          {"precision", "bf16"},
          {"release", "24.11.1"},
          {"gpu", "NVIDIA H200"},
          {"proxy", true},
          {"peak_tflops", 989.0},
          {"layout", {{"gpus", gpus}}},
          {"flops_per_token", {{"full", 4.74e14 / 8192}, {"causal", 4.0e14 / 8192}}},
          {"extrapolated", {{"tokens_per_s_per_gpu", tokens_per_gpu}, {"step_s", 1.0}}}};
}

TEST(Compare, AgainstThePublished8GpuRow) {
  const auto rows = tr::load_reference_dir(tr::find_references_dir(std::nullopt));
  const rp::Comparison c = rp::compare_run(record(10152.75 * 1.1, 8), rows, "H100");  // 24.11.1: 81222 / 8 per GPU
  ASSERT_NE(c.verdict, rp::RefVerdict::none) << c.why_none;
  EXPECT_EQ(c.ref_release, "24.11.1");
  EXPECT_NEAR(c.ref_tokens_per_gpu, 81222.0 / 8, 1e-9);
  EXPECT_NEAR(c.ratio, 1.1, 1e-9);
  EXPECT_EQ(c.verdict, rp::RefVerdict::above);
  EXPECT_EQ(c.convention, "full");
  EXPECT_NEAR(c.tflops, 10152.75 * 1.1 * 4.74e14 / 8192 / 1e12, 1e-6);
  EXPECT_NEAR(c.mfu, c.tflops / 989.0, 1e-12);
  EXPECT_NEAR(c.ref_mfu, 0.5937, 1e-12);
  EXPECT_NE(rp::render_comparisons({c}).find("above"), std::string::npos);
}

TEST(Compare, MissingReferenceListsWhatExists) {
  const auto rows = tr::load_reference_dir(tr::find_references_dir(std::nullopt));
  const rp::Comparison c = rp::compare_run(record(1000, 12), rows, "H100");
  EXPECT_EQ(c.verdict, rp::RefVerdict::none);
  EXPECT_NE(c.why_none.find("8, 16"), std::string::npos) << c.why_none;
}

TEST(Compare, ADistributedRunIsMeasuredNotAProxy) {
  const auto rows = tr::load_reference_dir(tr::find_references_dir(std::nullopt));
  nlohmann::json r = record(0, 8);
  r.erase("extrapolated");
  r["proxy"] = false, r["mode"] = "distributed";
  r["measured"] = {{"tokens_per_s_per_gpu", 10152.75}, {"step_ms", 12900.0}, {"se", {{"tokens_per_s_per_gpu", 40.0}}}};
  const rp::Comparison c = rp::compare_run(r, rows, "H100");
  EXPECT_TRUE(c.distributed);
  EXPECT_NEAR(c.ratio, 1.0, 1e-9);
  EXPECT_NEAR(c.step_s, 12.9, 1e-12);
  const std::string out = rp::render_comparisons({c});
  EXPECT_EQ(out.find("[proxy]"), std::string::npos) << out;
  EXPECT_NE(out.find("10,153 ± 40 tokens/s/GPU (± one standard error of the step over the measured steps)"),
            std::string::npos)
      << out;

  r["proxy"] = true, r["differences"] = {"--set layers=4", "4 of the model's 32 layers"};
  const rp::Comparison d = rp::compare_run(r, rows, "H100");
  EXPECT_EQ(d.caveat, "not the reference run: --set layers=4; 4 of the model's 32 layers");
  const std::string out_set = rp::render_comparisons({d});
  EXPECT_NE(out_set.find("[--set]"), std::string::npos) << out_set;
  EXPECT_EQ(out_set.find("[proxy]"), std::string::npos) << out_set;
}

}  // namespace

namespace {
// Each reference in its own convention: NeMo's Mixtral tables print tokens/s per GPU, 8x7B's TFLOP/s in the full
// count, 8x22B's in the causal one (references/nemo-perf.toml); a Grok-1 row in the causal count of its README.
TEST(Compare, EachReferenceInItsOwnConvention) {
  const auto rows = tr::load_reference_dir(tr::find_references_dir(std::nullopt));
  auto rec = [](const char* recipe, const char* precision, int gpus, double tokens, double full, double causal) {
    return nlohmann::json{{"bench", "run"},
                          {"recipe", recipe},
                          {"precision", precision},
                          {"gpu", "NVIDIA H200"},
                          {"proxy", true},
                          {"layout", {{"gpus", gpus}}},
                          {"flops_per_token", {{"full", full}, {"causal", causal}}},
                          {"extrapolated", {{"tokens_per_s_per_gpu", tokens}, {"step_ms", 1000.0}}}};
  };
  rp::Comparison c = rp::compare_run(rec("mixtral-8x7b", "fp8", 64, 15457, 8.293e10, 7.971e10), rows, "B200");
  ASSERT_NE(c.verdict, rp::RefVerdict::none) << c.why_none;
  EXPECT_EQ(c.convention, "full");
  EXPECT_DOUBLE_EQ(c.ref_tokens_per_gpu, 15457);  // printed per GPU
  EXPECT_NEAR(c.ratio, 1, 1e-12);
  EXPECT_NEAR(c.tflops, 15457 * 8.293e10 / 1e12, 1e-9);
  c = rp::compare_run(rec("mixtral-8x22b", "fp8", 256, 2232, 5.043e11, 3.690e11), rows, "B200");
  EXPECT_EQ(c.convention, "causal");
  EXPECT_NEAR(c.tflops / c.ref_tflops, 1, 0.001);  // 823.6 against the printed 824
  c = rp::compare_run(rec("grok1-314b", "bf16", 512, 786.6, 5.41e11, 5.217e11), rows, "H100");
  EXPECT_EQ(c.convention, "causal");
  EXPECT_NEAR(c.tflops, 786.6 * 5.217e11 / 1e12, 1e-9);
}
}  // namespace
