// run_distributed_test: `mpirun -np 8 trainbench run tiny --device cpu` trains the tiny recipe at its 8-rank layout
// (tp 2 x pp 2 x dp 2, two micro-batches per rank per step) as ONE job: one "run" record, mode distributed, figures
// measured (not extrapolated), eight rank_steps records of one run id, and its losses equal to those of one rank
// training the same model, batch and steps (`trainbench train`, float round-off). Bad input ends every rank with one
// clear error before any training, and no hang: a rank count the layout cannot split, ranks started with different
// arguments. Runs the built binary (next to the tests folder, or $TRAINBENCH_BIN).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "../support/shell.h"

namespace {
namespace fs = std::filesystem;

std::vector<nlohmann::json> records(const fs::path& dir, const std::string& bench) {
  std::vector<nlohmann::json> out;
  std::ifstream in(dir / "results.jsonl");
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) {
      auto j = nlohmann::json::parse(l);
      if (j["bench"] == bench) out.push_back(std::move(j));
    }
  return out;
}

class RunDistributed : public testing::Test {
 protected:
  fs::path dir = fs::temp_directory_path() / ("tb-rundist-" + std::to_string(::getpid()));
  std::string tb = tb::testing_support::trainbench_binary().string();
  // Oversubscribed (CI has 2 cores) and allowed as root (CI containers), as the mpirun tests run.
  std::string mpirun =
      "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
      "OMPI_MCA_rmaps_base_oversubscribe=1 timeout 120 mpirun --bind-to none";
  void SetUp() override {
    ASSERT_TRUE(fs::exists(tb)) << tb << " is not built";
    fs::remove_all(dir);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir);
  }
};

TEST_F(RunDistributed, EightRanksAtTheRecipeLayoutTrainLikeOneRank) {
  const auto job = tb::testing_support::run_shell(mpirun + " -np 8 " + tb + " run tiny --device cpu --steps 4 " +
                                                  "--warmup-steps 2 --out " + (dir / "job").string() + " 2>&1");
  ASSERT_EQ(job.rc, 0) << job.out;
  EXPECT_NE(job.out.find("on 8 CPU ranks, 4 steps after 2 warm-up\n  this run:  tp 2 pp 2 cp 1 vp 1 dp 2"),
            std::string::npos)
      << job.out;
  EXPECT_NE(job.out.find("reference: tp 2 pp 2 cp 1 vp 1 dp 2"), std::string::npos) << job.out;
  const auto runs = records(dir / "job", "run");
  ASSERT_EQ(runs.size(), 1u) << job.out;  // one record for the job, from rank 0
  const auto& r = runs[0];
  EXPECT_EQ(r["status"], "ok");
  EXPECT_EQ(r["mode"], "distributed");
  EXPECT_EQ(r["proxy"], false);
  EXPECT_FALSE(r.contains("extrapolated"));
  EXPECT_EQ(r["layout"]["gpus"], 8);
  EXPECT_EQ(r["layout"]["tp"], 2);
  EXPECT_EQ(r["layout"]["pp"], 2);
  EXPECT_EQ(r["layout"]["dp"], 2);
  const auto& m = r["measured"];
  EXPECT_EQ(m["grad_accum"], 2);
  EXPECT_GT(m["tokens_per_s_per_gpu"].get<double>(), 0);
  // tokens/s per GPU = global batch x seq / (step x GPUs)
  EXPECT_NEAR(m["tokens_per_s_per_gpu"].get<double>(), 4.0 * 64 / (m["step_ms"].get<double>() / 1e3 * 8),
              1e-6 * m["tokens_per_s_per_gpu"].get<double>());
  const auto ranks = records(dir / "job", "rank_steps");
  ASSERT_EQ(ranks.size(), 8u);
  std::set<int> seen;
  for (const auto& k : ranks) {
    EXPECT_EQ(k["run"], r["run"]);
    seen.insert(k["rank"].get<int>());
  }
  EXPECT_EQ(seen.size(), 8u);

  // One rank, the same model (tiny at seq 64), batch (micro 1, global 4) and steps.
  const auto one = tb::testing_support::run_shell(tb + " train --device cpu --model tiny --seq 64 --micro-batch 1 " +
                                                  "--global-batch 4 --steps 6 --warmup-steps 2 --out " +
                                                  (dir / "one").string() + " 2>&1");
  ASSERT_EQ(one.rc, 0) << one.out;
  const auto train = records(dir / "one", "train");
  ASSERT_EQ(train.size(), 1u);
  const auto a = m["loss"].get<std::vector<double>>(), b = train[0]["loss"].get<std::vector<double>>();
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  for (std::size_t s = 0; s < a.size(); ++s) EXPECT_NEAR(a[s], b[s], 2e-5 * b[s]) << "step " << s + 1;

  // compare reads it as a measured run: no [proxy] mark.
  const auto cmp = tb::testing_support::run_shell(tb + " compare " + (dir / "job").string() + " 2>&1");
  EXPECT_EQ(cmp.out.find("[proxy]"), std::string::npos) << cmp.out;
  EXPECT_NE(cmp.out.find("tiny"), std::string::npos) << cmp.out;
}

TEST_F(RunDistributed, ARankCountTheLayoutCannotSplitFailsOnEveryRankBeforeWork) {
  // tp 2 on 3 ranks: no layout; every rank says so and exits 2 (usage), no hang.
  const auto r = tb::testing_support::run_shell(mpirun + " -np 3 " + tb + " run tiny --device cpu --set tp=2 --out " +
                                                (dir / "bad").string() + " 2>&1");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.rc, 124) << "hung: " << r.out;
  EXPECT_NE(r.out.find("not a multiple of tp"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir / "bad" / "results.jsonl"));
}

TEST_F(RunDistributed, RanksStartedWithDifferentArgumentsFailBeforeTraining) {
  const std::string run = tb + " run tiny --device cpu --warmup-steps 1 --out " + (dir / "mixed").string();
  const auto r =
      tb::testing_support::run_shell(mpirun + " -np 1 " + run + " --steps 3 : -np 1 " + run + " --steps 4 2>&1");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.rc, 124) << "hung: " << r.out;
  EXPECT_NE(r.out.find("differs from rank 0's: steps 5 (rank 0: 4)"), std::string::npos) << r.out;
  EXPECT_TRUE(records(dir / "mixed", "run").empty());
}

}  // namespace
