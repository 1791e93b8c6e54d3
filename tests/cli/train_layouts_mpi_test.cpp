// train_layouts_mpi_test: `trainbench train --device cpu` under mpirun (2 and 4 ranks) with every layout the rank
// count allows trains on the same tokens to the same losses (float round-off) as the data-parallel run: the CLI's
// wiring of --tp/--pp/--vp/--cp onto the CPU reference (parallel/trainer_cpu.h, whose equivalence with one rank
// tests/parallel/trainer_cpu_mpi_test checks to fp64 round-off).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "comm/mpi_comm.h"
#include "../support/cli_run.h"

namespace tb {
namespace {

nlohmann::json train_record(const std::filesystem::path& dir) {
  std::ifstream in(dir / "results.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["bench"] == "train") return j;
  }
  return {};
}

// Trains `model` (base: its flags) with each of `layouts` in turn: every run exits 0, uses the layout asked for and has
// the first run's losses (float round-off).
void expect_layouts_train_alike(const std::string& tag, const std::vector<std::string>& base,
                                const std::vector<std::vector<std::string>>& layouts) {
  const comm::World& w = comm::world();
  ASSERT_TRUE(w.mpi) << "run under mpirun";
  auto world = comm::world_communicator();
  const std::filesystem::path root = std::filesystem::temp_directory_path() / (tag + std::to_string(getppid()));
  std::vector<double> reference;
  for (std::size_t i = 0; i < layouts.size(); ++i) {
    const std::filesystem::path out = root / std::to_string(i);
    std::vector<std::string> args = {"train",     "--device",       "cpu", "--steps",       "5", "--warmup-steps",
                                     "1",         "--global-batch", "4",   "--micro-batch", "1", "--out",
                                     out.string()};
    args.insert(args.end(), base.begin(), base.end());
    args.insert(args.end(), layouts[i].begin(), layouts[i].end());
    const auto r = testing_support::run_cli(args);
    ASSERT_EQ(r.rc, 0) << r.err;
    world->barrier();
    if (w.rank != 0) continue;
    const nlohmann::json rec = train_record(out);
    ASSERT_TRUE(rec.contains("loss")) << layouts[i][0];
    const std::vector<double> losses = rec["loss"].get<std::vector<double>>();
    ASSERT_EQ(losses.size(), 5u) << layouts[i][0];
    for (std::size_t k = 0; k + 1 < layouts[i].size(); k += 2)  // the run used the layout asked for
      EXPECT_EQ(rec["layout"].value(layouts[i][k].substr(2), 0), std::stoi(layouts[i][k + 1])) << rec["layout"];
    if (reference.empty()) reference = losses;
    for (std::size_t s = 0; s < losses.size(); ++s)
      EXPECT_NEAR(losses[s], reference[s], 2e-5 * reference[s]) << rec["layout"] << " step " << s;
  }
  world->barrier();
  if (w.rank == 0) std::filesystem::remove_all(root);
}

TEST(TrainLayouts, EveryLayoutTrainsLikeDataParallel) {
  std::vector<std::vector<std::string>> layouts = {{"--tp", "1"}, {"--tp", "2"}, {"--pp", "2"}, {"--cp", "2"}};
  if (comm::world().size == 4)
    layouts.insert(layouts.end(), {{"--tp", "2", "--pp", "2"},
                                   {"--pp", "2", "--vp", "2"},
                                   {"--tp", "2", "--cp", "2"},
                                   {"--pp", "4"}});  // tiny: kv_heads 2
  expect_layouts_train_alike("tb-layouts-", {"--model", "tiny", "--layers", "4"}, layouts);
}

// LoRA (canonical adapters, dropout on, the base frozen) through the CLI: every layout trains to the data-parallel
// run's losses.
TEST(TrainLayouts, LoraTrainsLikeDataParallel) {
  std::vector<std::vector<std::string>> layouts = {{"--tp", "1"}, {"--tp", "2"}, {"--pp", "2"}, {"--cp", "2"}};
  if (comm::world().size == 4) layouts.insert(layouts.end(), {{"--tp", "2", "--pp", "2"}, {"--tp", "2", "--cp", "2"}});
  expect_layouts_train_alike("tb-lora-",
                             {"--model", "tiny", "--layers", "4", "--lora-rank", "4", "--lora-targets", "canonical",
                              "--lora-dropout", "0.1", "--lr", "1e-2"},
                             layouts);
}

// --ep on a MoE model: every expert-parallel layout trains to the losses of the run without expert parallel (float
// round-off; the fp64 equivalence is tests/parallel/trainer_cpu_mpi_test's).
TEST(TrainLayouts, ExpertParallelTrainsLikeDataParallel) {
  std::vector<std::vector<std::string>> layouts = {{"--ep", "1"}, {"--ep", "2"}, {"--tp", "2", "--ep", "2"}};
  if (comm::world().size == 4)
    layouts.insert(layouts.end(), {{"--ep", "4"}, {"--tp", "2", "--ep", "4"}, {"--cp", "2", "--ep", "4"}});
  expect_layouts_train_alike("tb-ep-", {"--model", "tiny-moe"}, layouts);
}

}  // namespace
}  // namespace tb
