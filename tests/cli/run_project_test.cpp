// Tests `trainbench run tiny --device cpu` then `trainbench project tiny --from <that folder>`: the CPU run measures
// two layer counts (1 and tiny's 2), so its record carries the fit (extrapolated.fit.f0_ms ... in ms) and its
// uncertainty (extrapolated.se), and the projection works from it, to CPU ranks (references/systems/cpu.toml, the
// default target for a CPU measurement). Seconds of CPU: 2 points x (1 warmup + 3 measured) steps of tiny.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../support/cli_run.h"

namespace {
tb::testing_support::CliResult run(std::vector<std::string> args) {
  return tb::testing_support::run_cli(std::move(args));
}
}  // namespace

TEST(RunProject, TinyOnTheCpuThenProjectFromIt) {
  const auto dir = std::filesystem::temp_directory_path() / ("tb_run_project_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const auto r = run({"run", "tiny", "--device", "cpu", "--steps", "3", "--warmup-steps", "1", "--out", dir.string()});
  ASSERT_TRUE(r.rc == 0 || r.rc == 1) << r.err;  // 1: measured, below the CPU smoke baseline on a slow machine
  EXPECT_NE(r.out.find("point: 1 layer\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("point: 2 layers\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" ± "), std::string::npos) << r.out;  // "5,400 ± 260 tokens/s/GPU"
  EXPECT_NE(r.out.find("tokens/s/GPU"), std::string::npos) << r.out;

  std::ifstream in(dir / "results.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const auto j = nlohmann::json::parse(line);
  ASSERT_EQ(j["points"].size(), 2u);
  const auto& x = j["extrapolated"];
  for (const char* k : {"step_ms", "microbatch_ms", "optimizer_ms", "tokens_per_s_per_gpu"})
    EXPECT_GT(x[k].get<double>(), 0) << k;
  EXPECT_GT(x["fit"]["f1_ms"].get<double>(), 0);
  EXPECT_GE(x["se"]["step_ms"].get<double>(), 0);
  EXPECT_GE(x["se"]["tokens_per_s_per_gpu"].get<double>(), 0);
  EXPECT_FALSE(x.contains("step_s"));  // one unit: ms

  auto p = run({"project", "tiny", "--gpus", "2", "--from", dir.string()});
  ASSERT_EQ(p.rc, 0) << p.err << p.out;
  EXPECT_NE(p.out.find("to 2 GPUs of CPU"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("tokens/s/GPU"), std::string::npos) << p.out;
  p = run({"project", "tiny", "--gpus", "4", "--from", dir.string(), "--json"});
  ASSERT_EQ(p.rc, 0) << p.err;
  const auto pj = nlohmann::json::parse(p.out);
  EXPECT_GT(pj["step_ms"].get<double>(), 0);
  EXPECT_GT(pj["tokens_per_s_per_gpu"].get<double>(), 0);
  double sum = 0;
  for (const auto& [k, v] : pj["breakdown_ms"].items()) sum += v.get<double>();
  EXPECT_NEAR(sum, pj["step_ms"].get<double>(), 1e-6 * pj["step_ms"].get<double>());
  std::filesystem::remove_all(dir);
}

// A run record written before the units were made one (seconds under _s keys) still projects.
TEST(RunProject, OlderRecordsWithSecondsStillProject) {
  const auto dir = std::filesystem::temp_directory_path() / ("tb_run_project_old_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "results.jsonl")
      << R"({"schema":"trainbench.result.v1","run":"r","bench":"run","case":"tiny/fp32/1gpus","world":1,)"
      << R"("status":"ok","recipe":"tiny","precision":"fp32","release":"","gpu":"CPU","backend":"cpu",)"
      << R"("layout":{"gpus":1,"tp":1,"pp":1,"cp":1,"vp":1,"dp":1,"micro_batch":2,"global_batch":4,"layers":2,)"
      << R"("seq":64,"where":"x"},"extrapolated":{"step_s":0.048,"microbatch_s":0.0235,"optimizer_s":0.001,)"
      << R"("grad_accum":2,"tokens_per_s_per_gpu":5333,"fit":{"f0_s":0.0005,"f1_s":0.0115,"o0_s":0.0002,)"
      << R"("o1_s":0.0004}}})"
      << "\n";
  const auto p = run({"project", "tiny", "--gpus", "2", "--from", dir.string(), "--json"});
  ASSERT_EQ(p.rc, 0) << p.err;
  EXPECT_GT(nlohmann::json::parse(p.out)["step_ms"].get<double>(), 0);
  std::filesystem::remove_all(dir);
}
