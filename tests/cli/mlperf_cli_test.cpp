// tests/cli/mlperf_cli_test.cpp: `trainbench mlperf` end to end on the CPU: two runs of the Llama 2 70B LoRA proxy reach
// the synthetic target and write result_0.txt, result_1.txt and two records; `mlperf summarize` reads them back; bad
// input (an unknown benchmark, a data folder without the files, a fixed hyperparameter in the closed division, a GPT-3
// run) is one message and exit 2 with nothing written. `project --ttt`: the time to train of the LoRA recipe at 8 H200
// from the shipped H200 measurements, its parts by the formula from the projected tokens/s, beside NVIDIA's row.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "../support/cli_run.h"

namespace fs = std::filesystem;

namespace {

tb::testing_support::CliResult run(std::vector<std::string> args) { return tb::testing_support::run_cli(std::move(args)); }

fs::path fresh(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("tb_mlperf_cli_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

TEST(MlperfCli, RunsAndSummarizes) {
  const fs::path out = fresh("runs");
  const auto r = run({"mlperf", "llama2_70b_lora", "--runs", "2", "--seed", "7", "-o", out.string()});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("run 1 (seed 8): reached the target"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(out / "result_0.txt"));
  EXPECT_TRUE(fs::exists(out / "result_1.txt"));
  std::ifstream records(out / "results.jsonl");
  int lines = 0;
  for (std::string l; std::getline(records, l);) {
    ++lines;
    EXPECT_NE(l.find("\"comparable\":false"), std::string::npos) << l;
  }
  EXPECT_EQ(lines, 2);
  // two runs: too few for an olympic mean of the 10 the rules want
  const auto s = run({"mlperf", "summarize", out.string(), "--ruleset", "5.0.0"});
  EXPECT_NE(s.out.find("result_0.txt"), std::string::npos) << s.out << s.err;
  EXPECT_NE(s.out.find("the rules want exactly 10"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("not comparable with MLPerf results"), std::string::npos) << s.out;
  fs::remove_all(out);
}

TEST(MlperfCli, BadInputIsOneMessage) {
  const fs::path out = fresh("bad");
  auto r = run({"mlperf", "llama2_70b_lroa", "-o", out.string()});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("did you mean 'llama2_70b_lora'"), std::string::npos) << r.err;
  r = run({"mlperf", "llama2_70b_lora", "--set", "clip=1.0", "-o", out.string()});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--division open"), std::string::npos) << r.err;
  fs::create_directories(out / "data");
  r = run({"mlperf", "llama2_70b_lora", "--data", (out / "data").string(), "-o", (out / "run").string()});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("missing train.bin"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out / "run"));  // refused before anything was written
  r = run({"mlperf", "gpt3", "--data", (out / "data").string(), "-o", (out / "gpt3").string()});
  EXPECT_EQ(r.rc, 2);  // real C4 is not read: the synthetic task, and the projection of the real one
  EXPECT_NE(r.err.find("real C4 data is not read"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("trainbench project mlperf-gpt3-175b"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out / "gpt3"));
  r = run({"mlperf", "gpt3", "--set", "clip=0.5", "-o", (out / "gpt3").string()});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("closed_gpt3.yaml: opt_gradient_clip_norm == 1.0"), std::string::npos) << r.err;
  // the open division takes the change and logs it
  r = run({"mlperf", "llama2_70b_lora", "--division", "open", "--set", "clip=1.0", "--max-steps", "4", "-o",
           (out / "open").string()});
  EXPECT_EQ(r.rc, 1) << r.out << r.err;  // 4 steps: stopped before the first evaluation
  std::ifstream log(out / "open" / "result_0.txt");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"key\": \"trainbench_overrides\", \"value\": {\"clip\": 1.0}"), std::string::npos) << text;
  EXPECT_NE(text.find("\"key\": \"opt_gradient_clip_norm\", \"value\": 1.0"), std::string::npos);
  fs::remove_all(out);
}

TEST(MlperfCli, ProjectsTimeToTrain) {
  auto r = run({"project", "mlperf-llama2-70b-lora", "--gpus", "8", "--system", "h200", "--from",
                "references/measured/h200-fp8", "--ttt", "--json"});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["layout"]["tp"], 1);  // NVIDIA's H200 layout: TP1 CP2, GA 2
  EXPECT_EQ(j["layout"]["cp"], 2);
  const double x = j["tokens_per_s_per_gpu"].get<double>() * 8 / 8192;  // samples/s
  const auto& t = j["time_to_train"];
  EXPECT_NEAR(t["samples_per_s"].get<double>(), x, 1e-9 * x);
  EXPECT_EQ(t["samples"], 3456);  // the RCP at GBS 8 (3178.7) rounded up to 9 intervals of 384
  EXPECT_EQ(t["evals"], 6);       // 9 - floor(0.125 x 8 + 2)
  const double minutes = (3456 / x + 6 * 173 / (3 * x)) / 60;
  EXPECT_NEAR(t["minutes"].get<double>(), minutes, 1e-9 * minutes);
  EXPECT_EQ(t["published"]["minutes"], 24.116);  // v4.1 8 x H200
  EXPECT_NEAR(t["published"]["error"].get<double>(), minutes / 24.116 - 1, 1e-9);
  r = run({"project", "mlperf-gpt3-175b", "--gpus", "512", "--from", "references/measured/h200-fp8", "--ttt"});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("time to train (MLPerf gpt3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("49.80  min: 512 H100 x fp8 (MLPerf v4.1"), std::string::npos) << r.out;
  r = run({"project", "llama3.1-8b", "--gpus", "8", "--from", "references/measured/h200-fp8", "--ttt"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("is no MLPerf benchmark; the MLPerf recipes: mlperf-llama2-70b-lora, mlperf-gpt3-175b"),
            std::string::npos)
      << r.err;
}

}  // namespace
