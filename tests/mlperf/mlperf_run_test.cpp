// tests/mlperf/mlperf_run_test.cpp: the MLPerf run on the CPU proxy: it reaches its target within the step limit (the
// Llama 2 70B LoRA proxy, and GPT-3's from its checkpoint into the checker's window), logs the evaluations at the
// rules' sample counts, stops at the step limit with status aborted, and refuses what the closed division fixes; on a
// converted data folder written here (train/packed_data.h's format) it learns the counted targets only (the prompts are
// noise the target could not be reached on) and refuses a broken folder.
#include "mlperf/run.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "../support/config_error.h"
#include "../support/packed_files.h"
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

// GPT-3: the proxy starts from its checkpoint (steps 1..10 during init), evaluates after every step and stops at the
// first log perplexity <= 2.69, which lands within the checker's window (2.6, 2.69]; the first evaluation is above the
// target (the checkpoint is not converged); samples count from the checkpoint.
TEST(MlperfRun, Gpt3ProxyReachesItsTargetFromItsCheckpoint) {
  RunSpec spec;
  spec.benchmark = "gpt3";
  spec.out = fresh_dir("gpt3");
  const RunOutcome o = run_mlperf(spec).at(0);
  EXPECT_TRUE(o.converged) << "steps " << o.steps << ", last eval " << (o.evals.empty() ? -1 : o.evals.back().loss);
  ASSERT_GE(o.evals.size(), 2u);
  EXPECT_GT(o.evals[0].loss, 2.69);
  EXPECT_EQ(o.evals[0].samples, 2);  // GBS 2, one step
  EXPECT_LE(o.evals.back().loss, 2.69);
  EXPECT_GT(o.evals.back().loss, 2.6);
  EXPECT_EQ(o.samples, 2 * o.steps);
  const std::string log = read(o.log);
  for (const char* key : {"\"init_checkpoint_step\", \"value\": 10", "\"opt_base_learning_rate\", \"value\": 2e-05",
                          "\"max_sequence_length\", \"value\": 2048",
                          "\"trainbench_lr_width_multiplier\", \"value\": 192.0"})
    EXPECT_NE(log.find(key), std::string::npos) << key;
  EXPECT_NE(log.find("not comparable with MLPerf results"), std::string::npos);
  spec.data = spec.out.string();  // real C4: refused, with what to run instead
  EXPECT_NE(testing_support::config_error([&] { validate(spec); }).find("real C4 data is not read"), std::string::npos);
  std::filesystem::remove_all(spec.out);
}

// n documents of 32 tokens: 16 uniform tokens (a prompt no model can predict: ln 64 = 4.16 nats), then 16 of a class
// chain (as ChainTask: the next token is succ(class) with probability 0.9), whose 15 inner targets are the loss span.
std::vector<testing_support::DocSpec> chain_documents(int n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> token(0, 63);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<testing_support::DocSpec> docs(static_cast<std::size_t>(n));
  for (auto& d : docs) {
    for (int i = 0; i < 16; ++i) d.tokens.push_back(std::uint16_t(token(rng)));
    d.tokens.push_back(std::uint16_t(token(rng)));
    for (int i = 17; i < 32; ++i)
      d.tokens.push_back(std::uint16_t(u(rng) < 0.1 ? token(rng) : (d.tokens.back() % 8) * 37 % 64));
    d.spans = {{16, 31}};
  }
  return docs;
}

TEST(MlperfRun, ConvertedDataTrainsTheCountedTargets) {
  RunSpec spec;
  spec.benchmark = "llama2_70b_lora";
  spec.out = fresh_dir("packed");
  const auto data = spec.out / "data";
  std::filesystem::create_directories(data);
  testing_support::write_packed(data / "train", chain_documents(400, 1));
  testing_support::write_packed(data / "validation", chain_documents(64, 2));
  spec.data = data.string();
  const auto outs = run_mlperf(spec);
  ASSERT_EQ(outs.size(), 1u);
  const RunOutcome& o = outs[0];
  ASSERT_FALSE(o.evals.empty());
  EXPECT_EQ(o.evals[0].samples, 1536);  // 400 train samples: the step's rows wrap around
  EXPECT_TRUE(o.converged) << "steps " << o.steps << ", last eval " << o.evals.back().loss;
  const std::string log = read(o.log);
  EXPECT_NE(log.find("\"key\": \"train_samples\", \"value\": 400"), std::string::npos) << log;
  EXPECT_NE(log.find("\"key\": \"eval_samples\", \"value\": 64"), std::string::npos);
  EXPECT_NE(log.find("\"key\": \"max_sequence_length\", \"value\": 32"), std::string::npos);
  EXPECT_NE(o.data.find("MLPerf data converted in"), std::string::npos) << o.data;

  // A truncated index is refused before anything is written.
  std::filesystem::resize_file(data / "validation.index", std::filesystem::file_size(data / "validation.index") - 8);
  spec.out = fresh_dir("packed_bad");
  EXPECT_NE(testing_support::error_message([&] { run_mlperf(spec); }).find("a truncated or foreign file"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(spec.out));
  std::filesystem::remove_all(data.parent_path());
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
  // GPT-3's LR is free within the rules' two values
  spec.benchmark = "gpt3";
  spec.overrides = {{"lr", 3e-5}};
  EXPECT_EQ(resolve_settings(find_benchmark(spec.benchmark), spec).at("lr"), 3e-5);
  spec.overrides = {{"lr", 1e-4}};
  EXPECT_NE(testing_support::config_error([&] { resolve_settings(find_benchmark(spec.benchmark), spec); })
                .find("allows lr 2e-05 or 3e-05 only"),
            std::string::npos);
  spec.division = Division::open;
  EXPECT_EQ(resolve_settings(find_benchmark(spec.benchmark), spec).at("lr"), 1e-4);
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
