// Tests `trainbench run`, `compare` and `project` on a LoRA recipe, on the CPU backend: a small recipe (the `tiny` model,
// task lora, [lora] rank 4 alpha 8 dropout 0.1 on the canonical targets) at a tp 2 layout
//   - as the one-device proxy of a tp rank: the run record carries the adapters (`lora`) and the FLOPs per token of the
//     DGXC fine-tuning convention (2/3 of the same recipe as full training); `compare` sets it against a reference row
//     (a reference far above ours is `below`, exit 1) and `project` scales it to more ranks;
//   - as a distributed job (`mpirun -np 2`, tp 2) on a fine-tune's default data (packed-squad): the losses of every
//     step equal those of one rank training the same model, data, batch and steps with train's --lora-* flags (the
//     recipe's [lora] becomes the run's LoRA, seed included);
//   - a rank that fits the model but not the tp shard's k block (min(in, out) halves) is refused before any work.
// The distributed case runs the built binary (next to the tests folder, or $TRAINBENCH_BIN) under mpirun.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../support/cli_run.h"
#include "../support/shell.h"
#include "recipe/convention.h"
#include "recipe/recipe.h"

namespace fs = std::filesystem;

namespace {

tb::testing_support::CliResult run(std::vector<std::string> args) { return tb::testing_support::run_cli(std::move(args)); }

// The recipe lora-cpu in dir, its [lora] rank `rank`.
fs::path write_recipe(const fs::path& dir, int rank = 4) {
  fs::create_directories(dir);
  std::ofstream(dir / "lora-cpu.toml") << R"(schema = 1
name = "lora-cpu"
summary = "tiny fine-tuned with LoRA at tp 2 on CPU ranks"
task = "lora"
precisions = ["fp32"]
sources = ["test"]

[model]
preset = "tiny"
seq = 32

[lora]
rank = )" << rank << R"(
alpha = 8
dropout = 0.1
targets = "canonical"

[[layout]]
tp = 2
micro_batch = 1
runs = [{ gpus = 2, global_batch = 2 }, { gpus = 4, global_batch = 4 }]
)";
  return dir;
}

std::vector<nlohmann::json> records(const fs::path& dir, const std::string& bench) {
  std::vector<nlohmann::json> out;
  std::ifstream in(dir / "results.jsonl");
  for (std::string l; std::getline(in, l);)
    if (!l.empty())
      if (auto j = nlohmann::json::parse(l); j["bench"] == bench) out.push_back(std::move(j));
  return out;
}

class RunLora : public testing::Test {
 protected:
  fs::path base = fs::temp_directory_path() / ("tb_run_lora_" + std::to_string(::getpid()));
  fs::path recipes = write_recipe(base / "recipes");
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(base);
  }
};

TEST_F(RunLora, CpuProxyOfATensorParallelRankThenCompareAndProject) {
  const fs::path out = base / "out";
  auto r = run({"run", "lora-cpu", "--device", "cpu", "--recipes", recipes.string(), "--steps", "2", "--warmup-steps",
                "1", "--out", out.string()});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("LoRA r 4 alpha 8 dropout 0.1 on canonical, the base frozen"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("proxy: one device runs the per-GPU shard of 2 GPUs (tp 2"), std::string::npos) << r.out;
  const auto runs = records(out, "run");
  ASSERT_EQ(runs.size(), 1u);
  const auto& j = runs[0];
  EXPECT_EQ(j["status"], "ok");
  EXPECT_EQ(j["lora"]["rank"], 4);
  EXPECT_EQ(j["lora"]["alpha"], 8.0);
  EXPECT_EQ(j["lora"]["dropout"], 0.1);
  EXPECT_EQ(j["lora"]["targets"], "canonical");
  EXPECT_GT(j["extrapolated"]["tokens_per_s_per_gpu"].get<double>(), 0);
  tb::recipe::Recipe full = tb::recipe::load_recipe(recipes / "lora-cpu.toml");
  const tb::recipe::Layout layout = full.layouts.front();
  full.task = "pretrain";
  EXPECT_DOUBLE_EQ(j["flops_per_token"]["full"].get<double>(),
                   tb::recipe::flops_per_token(full, layout, tb::recipe::Convention::full) * 2 / 3);

  const fs::path refs = base / "refs";
  fs::create_directories(refs);
  std::ofstream(refs / "fast.toml") << "schema = 1\nsummary = \"x\"\nsource = \"test\"\n[[group]]\n"
                                       "recipe = \"lora-cpu\"\ngpu = \"CPU\"\nrelease = \"t\"\nsource = \"test\"\n"
                                       "rows = [ { gpus = 2, precision = \"fp32\", tokens_per_s = 1e12 } ]\n";
  auto c = run({"compare", out.string(), "--references", refs.string()});
  EXPECT_EQ(c.rc, 1) << c.out << c.err;
  EXPECT_NE(c.out.find("lora-cpu"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("below"), std::string::npos) << c.out;

  const auto p = run({"project", "lora-cpu", "--gpus", "4", "--from", out.string(), "--recipes", recipes.string(),
                      "--json"});
  ASSERT_EQ(p.rc, 0) << p.out << p.err;
  EXPECT_GT(nlohmann::json::parse(p.out)["tokens_per_s_per_gpu"].get<double>(), 0) << p.out;
}

TEST_F(RunLora, TwoRanksAtTpTwoTrainLikeOneRankWithTrainsFlags) {
  const std::string tb = tb::testing_support::trainbench_binary().string();
  ASSERT_TRUE(fs::exists(tb)) << tb << " is not built";
  const std::string mpirun =
      "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 timeout 120 "
      "mpirun --bind-to none";
  const auto job = tb::testing_support::run_shell(mpirun + " -np 2 " + tb + " run lora-cpu --device cpu --recipes " +
                                                  recipes.string() + " --steps 4 --warmup-steps 1 --out " +
                                                  (base / "job").string() + " 2>&1");
  ASSERT_EQ(job.rc, 0) << job.out;
  const auto runs = records(base / "job", "run");
  ASSERT_EQ(runs.size(), 1u) << job.out;
  EXPECT_EQ(runs[0]["mode"], "distributed");
  EXPECT_EQ(runs[0]["layout"]["tp"], 2);
  EXPECT_EQ(runs[0]["lora"]["targets"], "canonical");
  EXPECT_EQ(runs[0]["data"], "packed-squad");

  const auto one = tb::testing_support::run_shell(
      tb + " train --device cpu --model tiny --seq 32 --micro-batch 1 --global-batch 2 --steps 5 --warmup-steps 1 " +
      "--data packed-squad --lora-rank 4 --lora-alpha 8 --lora-dropout 0.1 --lora-targets canonical --out " +
      (base / "one").string() + " 2>&1");
  ASSERT_EQ(one.rc, 0) << one.out;
  const auto train = records(base / "one", "train");
  ASSERT_EQ(train.size(), 1u);
  EXPECT_EQ(train[0]["lora"], runs[0]["lora"]);
  const auto a = runs[0]["measured"]["loss"].get<std::vector<double>>();
  const auto b = train[0]["loss"].get<std::vector<double>>();
  ASSERT_EQ(a.size(), 5u);
  ASSERT_EQ(b.size(), 5u);
  for (std::size_t s = 0; s < a.size(); ++s) EXPECT_NEAR(a[s], b[s], 2e-5 * b[s]) << "step " << s + 1;
  EXPECT_NE(a.front(), a.back()) << "the adapters trained";
}

TEST_F(RunLora, ARankAboveTheShardsBlockIsRefusedBeforeWork) {
  // rank 24 fits the model's k block (min(64, 32)) but not a tp 2 rank's (min(64, 16))
  write_recipe(recipes, 24);
  const fs::path out = base / "bad";
  const auto r = run({"run", "lora-cpu", "--device", "cpu", "--recipes", recipes.string(), "--out", out.string()});
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.err.find("LoRA rank 24 is above min(in, out) = 16 of target k"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out / "results.jsonl"));
}

}  // namespace
