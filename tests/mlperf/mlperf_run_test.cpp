// tests/mlperf/mlperf_run_test.cpp: the MLPerf run on the CPU proxy: it reaches its target within the step limit, logs the
// evaluations at the rules' sample counts, stops at the step limit with status aborted, and refuses what the closed
// division fixes.
#include "mlperf/run.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace tb::mlperf {
namespace {

std::filesystem::path fresh_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("tb_mlperf_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  return d;
}

std::string read(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(MlperfRun, LoraProxyReachesItsTarget) {
  RunSpec spec;
  spec.benchmark = "llama2_70b_lora";
  spec.out = fresh_dir("converge");
  const auto outs = run_mlperf(spec);
  ASSERT_EQ(outs.size(), 1u);
  const RunOutcome& o = outs[0];
  EXPECT_TRUE(o.converged) << "steps " << o.steps << ", last eval " << (o.evals.empty() ? -1 : o.evals.back().loss);
  ASSERT_FALSE(o.evals.empty());
  // GBS 8: eval every 384 samples, the first floor(0.125 * 8 + 2) = 3 skipped: the first at 4 * 384 samples
  EXPECT_EQ(o.evals[0].samples, 1536);
  for (std::size_t i = 1; i + 1 < o.evals.size(); ++i) EXPECT_EQ(o.evals[i].samples - o.evals[i - 1].samples, 384);
  EXPECT_LE(o.evals.back().loss, 0.925);
  const std::string log = read(o.log);
  EXPECT_NE(log.find("\"key\": \"run_stop\", \"value\": " ), std::string::npos);
  EXPECT_NE(log.find("\"status\": \"success\""), std::string::npos);
  EXPECT_NE(log.find("not comparable with MLPerf results"), std::string::npos);
  std::filesystem::remove_all(spec.out);
}

TEST(MlperfRun, StepLimitAborts) {
  RunSpec spec;
  spec.benchmark = "llama2_70b_lora";
  spec.out = fresh_dir("abort");
  spec.max_steps = 200;  // the first evaluation after step 192, the second would be after 240
  const auto outs = run_mlperf(spec);
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_FALSE(outs[0].converged);
  EXPECT_EQ(outs[0].steps, 200);
  EXPECT_NE(read(outs[0].log).find("\"status\": \"aborted\""), std::string::npos);
  std::filesystem::remove_all(spec.out);
}

TEST(MlperfRun, ClosedDivisionRefusesFixedSettings) {
  RunSpec spec;
  spec.benchmark = "llama2_70b_lora";
  spec.overrides["clip"] = 1.0;
  try {
    resolve_settings(find_benchmark(spec.benchmark), spec);
    FAIL() << "clip is fixed in the closed division";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--division open"), std::string::npos) << e.what();
  }
  spec.division = Division::open;
  EXPECT_EQ(resolve_settings(find_benchmark(spec.benchmark), spec).at("clip"), 1.0);
  spec.division = Division::closed;
  spec.overrides = {{"lr", 1e-3}};  // free in both divisions
  EXPECT_EQ(resolve_settings(find_benchmark(spec.benchmark), spec).at("lr"), 1e-3);
  spec.overrides = {{"cilp", 1.0}};
  try {
    resolve_settings(find_benchmark(spec.benchmark), spec);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'clip'"), std::string::npos) << e.what();
  }
}

TEST(MlperfRun, BadInput) {
  try {
    find_benchmark("llama2_70b_lroa");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'llama2_70b_lora'"), std::string::npos) << e.what();
  }
  RunSpec spec;
  spec.benchmark = "llama2_70b_lora";
  spec.out = fresh_dir("bad");
  spec.data = spec.out.string();
  std::filesystem::create_directories(spec.out);
  try {
    run_mlperf(spec);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing train.bin, train.index, validation.bin, validation.index"),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(spec.out);
}

}  // namespace
}  // namespace tb::mlperf
