// Tests cli/cmd_project (`trainbench project`), called directly: the message without a measurement, the
// projection's report and JSON, --system by name, --validate's exit code, FP8, --layer-time, a 2-GPU train record
// in --from, and the errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../support/cli_run.h"

namespace {
tb::testing_support::CliResult project(std::vector<std::string> args) {
  args.insert(args.begin(), "project");
  return tb::testing_support::run_cli(std::move(args));
}

const std::string kFrom = "references/measured/h200-recipes";  // tests run in the source tree
}  // namespace

TEST(ProjectCli, WithoutAMeasurementSaysHowToGetOne) {
  const auto r = project({"llama3.1-70b", "--gpus", "1024"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("trainbench run llama3.1-70b"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--from /"), std::string::npos) << r.err;  // the shipped folder, by an absolute path
  EXPECT_NE(r.err.find("references/measured/h200-recipes\n"), std::string::npos) << r.err;
  EXPECT_EQ(project({"llama3.1-70b"}).rc, 2);  // no --gpus
  EXPECT_EQ(project({}).rc, 2);
}

TEST(ProjectCli, ReportHasTheBreakdownSensitivityAndConfidence) {
  const auto r = project({"llama3.1-70b", "--gpus", "1024", "--from", kFrom});
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char* s :
       {"step time", "compute", "TP communication exposed", "CP communication exposed", "pipeline bubble",
        "DP communication exposed", "stragglers", "E[max of dp]", "slowest of 32 replicas", "tokens/s/GPU",
        "TFLOP/s/GPU", "MFU", "sensitivity", "scale-out bandwidth -20%", "straggler sigma 0:", "how sure",
        "its weak scaling 64 -> 2048", "published (25.04.02"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
}

TEST(ProjectCli, JsonNearThePublishedReference) {
  const auto r = project({"llama3.1-405b", "--gpus", "2048", "--from", kFrom, "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["layout"]["tp"], 8);
  EXPECT_EQ(j["layout"]["pp"], 8);
  EXPECT_EQ(j["flop_convention"], "full");
  const double tok = j["tokens_per_s_per_gpu"];
  EXPECT_NEAR(tok / (422175.0 / 2048), 1, 0.15);  // v25.04.02 H100: 422,175 tokens/s on 2048 GPUs
  double sum = 0;
  for (const auto& [k, v] : j["breakdown_ms"].items()) sum += v.get<double>();
  EXPECT_NEAR(sum, j["step_ms"].get<double>(), 1e-6);
  // trainbench's own kernels (efficiency 1) project faster than the reference software
  const auto own = nlohmann::json::parse(
      project({"llama3.1-405b", "--gpus", "2048", "--from", kFrom, "--json", "--efficiency", "1"}).out);
  EXPECT_GT(own["tokens_per_s_per_gpu"].get<double>(), tok);
}

TEST(ProjectCli, SystemByNameAndUnknownSystem) {
  const auto r = project({"llama3.1-8b", "--gpus", "64", "--from", kFrom, "--system", "h200", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["system"], "H200 SXM");
  const auto bad = project({"llama3.1-8b", "--gpus", "64", "--from", kFrom, "--system", "h10"});
  EXPECT_EQ(bad.rc, 2);  // a configuration error
  EXPECT_NE(bad.err.find("did you mean 'h100'"), std::string::npos) << bad.err;
  EXPECT_EQ(project({"llama3.1-8b", "--gpus", "64", "--from", "/no/such/results"}).rc, 2);
  EXPECT_EQ(project({"llama3.1-8b", "--gpus", "64", "--from", kFrom, "--precision", "fp8"}).rc, 2);
  // One GPU fits the 8B recipe (cp 2) only with --set cp=1: derived from the smallest listed run.
  EXPECT_EQ(project({"llama3.1-8b", "--gpus", "1", "--from", kFrom}).rc, 2);
  EXPECT_EQ(project({"llama3.1-8b", "--gpus", "1", "--set", "cp=1", "--from", kFrom}).rc, 0);
  const auto r7 = project({"llama3.1-8b", "--gpus", "7", "--from", kFrom});  // no layout for 7 GPUs
  EXPECT_EQ(r7.rc, 2);
  EXPECT_NE(r7.err.find("7 GPUs"), std::string::npos) << r7.err;
}

TEST(ProjectCli, ValidatePassesTheAcceptanceAndFailsATighterOne) {
  auto r = project({"--validate", "--from", kFrom});
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("acceptance (primary rows)"), std::string::npos);
  r = project({"--validate", "--from", kFrom, "--max-error", "1"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("NO"), std::string::npos);
  r = project({"--validate", "--from", kFrom, "--system", "h200"});  // no H200 reference rows are published
  EXPECT_EQ(r.rc, 2);
}

TEST(ProjectCli, Fp8AndTheLayerTimeAndATwoGpuStep) {
  const std::string fp8 = "references/measured/h200-fp8",
                    tp2 = "references/measured/h200x2-train/70b-L4-tp2";
  auto r = project({"llama3.1-70b", "--gpus", "64", "--precision", "fp8", "--from", kFrom, "--from", fp8, "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["layout"]["pp"], 8);  // 25.04 FP8: TP4 PP8 CP1
  EXPECT_EQ(j["layer"]["from"], "fit");
  const auto m = nlohmann::json::parse(project({"llama3.1-70b", "--gpus", "64", "--precision", "fp8", "--from", kFrom,
                                                "--from", fp8, "--json", "--layer-time", "measured"})
                                           .out);
  EXPECT_EQ(m["layer"]["from"], "measured");
  EXPECT_DOUBLE_EQ(m["layer"]["measured_ms"].get<double>(), j["layer"]["measured_ms"].get<double>());
  EXPECT_NE(m["step_ms"].get<double>(), j["step_ms"].get<double>());
  EXPECT_EQ(project({"llama3.1-70b", "--gpus", "64", "--from", kFrom, "--layer-time", "typo"}).rc, 2);
  // a 2-GPU tensor-parallel train record: the model of that layout next to it, and in the "how sure" line
  r = project({"llama3.1-70b", "--gpus", "1024", "--from", kFrom, "--from", tp2});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("measured vs modelled, trainbench's own multi-GPU steps"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("dp1 cp1 pp1 tp2 L4 s8192 gb1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("a real 2-GPU step of it (tp 2 pp 1 cp 1 dp 1): the model"), std::string::npos) << r.out;
  // a folder of result folders: the train records below it, every layout measured on 2 GPUs
  r = project({"llama3.1-70b", "--gpus", "1024", "--from", kFrom, "--from", "references/measured/h200x2-train"});
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char* layout : {"dp1 cp1 pp1 tp2", "dp1 cp1 pp2 tp1", "dp1 cp2 pp1 tp1", "dp2 cp1 pp1 tp1"})
    EXPECT_NE(r.out.find(layout), std::string::npos) << layout << "\n" << r.out;
}
