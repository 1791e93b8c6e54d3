// Tests fine-tuning through the command line on the CPU: `run tiny-sft` (a fine-tuning recipe: packed SQuAD-like
// documents, the loss on the answers) writes a run record that says what it trained on and which tokens its figures
// count, and `compare` reads it; `train --save` / `--resume` continue a run with the same losses, and a checkpoint of
// another model is refused with one message (exit 2) that leaves the file as it was.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "../support/cli_run.h"

namespace {

namespace fs = std::filesystem;

tb::testing_support::CliResult run(std::vector<std::string> args) { return tb::testing_support::run_cli(std::move(args)); }

std::vector<nlohmann::json> records(const fs::path& dir, const std::string& bench) {
  std::ifstream in(dir / "results.jsonl");
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);)
    if (auto j = nlohmann::json::parse(line); j["bench"] == bench) out.push_back(std::move(j));
  return out;
}

TEST(FineTuning, RunTinySftOnTheCpuThenCompare) {
  const fs::path dir = fs::temp_directory_path() / "tb_cli_run_sft";
  fs::remove_all(dir);
  const auto r = run({"run", "tiny-sft", "--device", "cpu", "--steps", "3", "--warmup-steps", "1", "--out", dir.string()});
  ASSERT_TRUE(r.rc == 0 || r.rc == 1) << r.err;  // 1: below the CPU baseline (a busy machine)
  const auto recs = records(dir, "run");
  ASSERT_EQ(recs.size(), 1u);
  const auto& j = recs[0];
  EXPECT_EQ(j["status"], "ok");
  EXPECT_EQ(j["data"], "packed-squad");
  EXPECT_EQ(j["flop_tokens"], "rows");
  EXPECT_EQ(j["tokens_per_step"].get<double>(), 4.0 * 512);  // global batch x seq, padding included
  const double counted = j["loss_tokens_per_step"].get<double>();
  EXPECT_GT(counted, 0);
  EXPECT_LT(counted, 0.2 * j["tokens_per_step"].get<double>());  // the answers only
  for (const auto& p : j["points"]) EXPECT_GT(p["loss_tokens_per_step"].get<double>(), 0);
  EXPECT_GT(j["extrapolated"]["tokens_per_s_per_gpu"].get<double>(), 0);
  const auto c = run({"compare", dir.string()});
  EXPECT_TRUE(c.rc == 0 || c.rc == 1) << c.err;
  EXPECT_NE(c.out.find("tiny-sft"), std::string::npos) << c.out;
  fs::remove_all(dir);
}

TEST(FineTuning, TrainResumesFromItsCheckpoint) {
  const fs::path dir = fs::temp_directory_path() / "tb_cli_resume", file = dir / "state.safetensors";
  fs::remove_all(dir);
  const std::vector<std::string> common = {"train", "--model", "tiny", "--device", "cpu", "--data", "packed-squad",
                                           "--seq", "128", "--micro-batch", "2", "--global-batch", "4", "--steps",
                                           "5", "--warmup-steps", "1", "--out", dir.string()};
  auto args = common;
  args.insert(args.end(), {"--save", file.string(), "--save-step", "2"});
  auto r = run(args);
  ASSERT_EQ(r.rc, 0) << r.err;
  args = common;
  args.insert(args.end(), {"--resume", file.string()});
  r = run(args);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("step 3/5 | loss "), std::string::npos) << r.out;
  const auto runs = records(dir, "train");
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0]["saved"], file.string());
  EXPECT_EQ(runs[1]["resumed_from"]["step"], 2);
  EXPECT_EQ(runs[0]["flop_tokens"], "documents");
  ASSERT_EQ(runs[1]["loss"].size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(runs[1]["loss"][i], runs[0]["loss"][i + 2]) << "step " << i + 3;
  const auto steps = records(dir, "train.step");
  ASSERT_EQ(steps.size(), 8u);
  EXPECT_EQ(steps[5]["step"], 3);
  EXPECT_FALSE(steps[5]["measured"]);  // the resumed run's warm-up step
  EXPECT_TRUE(steps[6]["measured"]);

  std::ifstream in(file, std::ios::binary);
  const std::string before{std::istreambuf_iterator<char>(in), {}};
  args = common;
  args.insert(args.end(), {"--resume", file.string(), "--save", file.string(), "--layers", "1"});
  r = run(args);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.err.find("does not match the tensors it is loaded into"), std::string::npos) << r.err;
  std::ifstream again(file, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(again), {}), before);
  fs::remove_all(dir);
}

}  // namespace
