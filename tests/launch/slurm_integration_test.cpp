// Integration test with a real Slurm on this host (tests/launch/slurm_local.sh: munged, slurmctld and two slurmd
// from Debian's slurm-wlm, nodes tb-n1 and tb-n2, CPUs as the resource): `trainbench slurm run tiny --device cpu
// --nodes 2 --tasks-per-node 4` is ONE distributed job of 8 ranks at the recipe's tp 2 x pp 2 x dp 2 layout, spread
// over both nodes, whose losses equal one rank's; `--proxies` with 2 tasks: `collect --wait` returns both
// independent tasks' records; a job whose tasks fail (a bad flag) is reported FAILED with its exit code and log, not
// lost; `srun --mpi=pmix` starts one 2-rank tensor-parallel training job. Skips (with the reason) only where slurmd
// cannot run here. About 30-60 s.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "../support/shell.h"

namespace tb::cli {
int cmd_slurm(int argc, char** argv);  // cli/commands.h
}

namespace {
namespace fs = std::filesystem;

using Shell = tb::testing_support::ShellResult;
Shell sh(const std::string& cmd) { return tb::testing_support::run_shell(cmd + " 2>&1"); }

int slurm(std::vector<std::string> args) {
  args.insert(args.begin(), "trainbench slurm");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  std::fflush(stdout);
  const int rc = tb::cli::cmd_slurm(int(argv.size()), argv.data());
  std::fflush(stdout);
  return rc;
}

std::vector<nlohmann::json> read_jsonl(const fs::path& f) {
  std::vector<nlohmann::json> out;
  std::ifstream in(f);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.push_back(nlohmann::json::parse(l));
  return out;
}

class SlurmCluster : public testing::Test {
 protected:
  // Short: the munge socket path must fit a sockaddr_un.
  fs::path dir = fs::path("/tmp") / ("tbslurm-" + std::to_string(::getpid()));
  std::string script = fs::absolute("tests/launch/slurm_local.sh").string();
  bool started = false;

  void SetUp() override {
    fs::remove_all(dir);
    const Shell s = sh("bash " + script + " start " + dir.string());
    if (s.rc == 77) GTEST_SKIP() << "this machine cannot run slurmd: " << s.out;
    started = true;
    ASSERT_EQ(s.rc, 0) << "starting Slurm failed:\n" << s.out;
    ::setenv("SLURM_CONF", (dir / "slurm.conf").c_str(), 1);
  }
  void TearDown() override {
    if (started) sh("bash " + script + " stop " + dir.string());
    ::unsetenv("SLURM_CONF");
    if (!HasFailure())
      fs::remove_all(dir);
    else
      std::printf("kept %s (logs in log/, submissions in ok/ and bad/)\n", dir.c_str());
  }
};

TEST_F(SlurmCluster, RunTwoCpuTasksCollectRecordsAndReportAFailedJob) {
  const fs::path tb = tb::testing_support::trainbench_binary();
  ASSERT_TRUE(fs::exists(tb)) << tb << " is not built (cmake --build build --target trainbench)";
  const std::vector<std::string> common{
      "tiny",      "--device", "cpu",      "--nodes",      "1",        "--tasks-per-node", "2",
      "--proxies", "--time",   "00:05:00", "--trainbench", tb.string()};
  auto args = [&](std::string sub, fs::path out, std::vector<std::string> extra = {}) {
    std::vector<std::string> a{std::move(sub)};
    a.insert(a.end(), common.begin(), common.end());
    a.insert(a.end(), {"--out", out.string()});
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  ASSERT_EQ(slurm(args("run", dir / "ok")), 0);
  ASSERT_EQ(slurm(args("run", dir / "bad", {"--", "--steps", "0"})), 0);  // submits; the tasks will reject --steps 0

  // Both tasks' records, tagged with the job and the task.
  EXPECT_EQ(slurm({"collect", (dir / "ok").string(), "--wait", "120"}), 0)
      << sh("tail -30 " + (dir / "log/slurmd.log").string()).out;
  const auto records = read_jsonl(dir / "ok/results.jsonl");
  ASSERT_EQ(records.size(), 2u) << sh("cat " + (dir / "ok/logs/*.out").string()).out;
  std::set<int> tasks;
  for (const auto& r : records) {
    EXPECT_EQ(r["bench"], "run");
    EXPECT_EQ(r["status"], "ok");
    EXPECT_TRUE(r.contains("slurm_job"));
    tasks.insert(r["slurm_task"].get<int>());
  }
  EXPECT_EQ(tasks, (std::set<int>{0, 1}));
  std::ifstream sf(dir / "ok/summary.json");
  const auto ok = nlohmann::json::parse(sf);
  ASSERT_EQ(ok["jobs"].size(), 1u);
  EXPECT_EQ(ok["jobs"][0]["state"], "COMPLETED");
  EXPECT_EQ(ok["jobs"][0]["records"], 2);

  // The failing job: FAILED with trainbench's usage exit code (2) and its log's last lines; an error record.
  EXPECT_EQ(slurm({"collect", (dir / "bad").string(), "--wait", "120"}), 1);
  std::ifstream bf(dir / "bad/summary.json");
  const auto bad = nlohmann::json::parse(bf);
  ASSERT_EQ(bad["jobs"].size(), 1u);
  const auto& job = bad["jobs"][0];
  EXPECT_EQ(job["state"], "FAILED") << job.dump(2);
  EXPECT_EQ(job["exit_code"], 2) << job.dump(2);
  EXPECT_EQ(job["records"], 0);
  std::string tail;
  for (const auto& l : job["log_tail"]) tail += l.get<std::string>() + "\n";
  EXPECT_NE(tail.find("--steps"), std::string::npos) << tail;
  const auto bad_records = read_jsonl(dir / "bad/results.jsonl");
  ASSERT_EQ(bad_records.size(), 1u);
  EXPECT_EQ(bad_records[0]["status"], "error");
  EXPECT_EQ(bad_records[0]["slurm_state"], "FAILED");

  // status agrees, and says so in its exit code.
  EXPECT_EQ(slurm({"status", (dir / "ok").string()}), 0);
  EXPECT_EQ(slurm({"status", (dir / "bad").string()}), 1);
}

// The acceptance run: 8 CPU ranks on two node entries as one job; its loss equals one rank's.
TEST_F(SlurmCluster, RunOnTwoNodesIsOneDistributedJobThatTrainsLikeOneRank) {
  const fs::path tb = tb::testing_support::trainbench_binary();
  ASSERT_TRUE(fs::exists(tb)) << tb << " is not built (cmake --build build --target trainbench)";
  // Two node entries on one host: Open MPI's shared-memory transport would join ranks it thinks are on two hosts;
  // TCP between them, as between real nodes. The job takes this environment (sbatch exports it).
  ::setenv("OMPI_MCA_btl", "self,tcp", 1);
  const int rc = slurm({"run", "tiny", "--device", "cpu", "--nodes", "2", "--tasks-per-node", "4", "--time", "00:05:00",
                        "--trainbench", tb.string(), "--out", (dir / "dist").string(), "--", "--steps", "4",
                        "--warmup-steps", "2"});
  ::unsetenv("OMPI_MCA_btl");
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(slurm({"collect", (dir / "dist").string(), "--wait", "180"}), 0)
      << sh("cat " + (dir / "dist/logs/*.out").string()).out;
  std::vector<nlohmann::json> runs, ranks;
  for (const auto& r : read_jsonl(dir / "dist/results.jsonl")) (r["bench"] == "run" ? runs : ranks).push_back(r);
  ASSERT_EQ(runs.size(), 1u) << sh("cat " + (dir / "dist/logs/*.out").string()).out;
  const auto& run = runs[0];
  EXPECT_EQ(run["status"], "ok");
  EXPECT_EQ(run["mode"], "distributed");
  EXPECT_EQ(run["layout"]["gpus"], 8);
  EXPECT_EQ(run["layout"]["tp"], 2);
  EXPECT_EQ(run["layout"]["pp"], 2);
  EXPECT_EQ(run["layout"]["dp"], 2);
  ASSERT_EQ(ranks.size(), 8u);
  std::set<int> seen;
  for (const auto& r : ranks) {
    EXPECT_EQ(r["bench"], "rank_steps");
    EXPECT_EQ(r["run"], run["run"]);  // one run id across both nodes
    seen.insert(r["rank"].get<int>());
  }
  EXPECT_EQ(seen.size(), 8u);
  const std::string log = sh("cat " + (dir / "dist/logs/*.out").string()).out;
  EXPECT_NE(log.find("on 8 CPU ranks, 4 steps after 2 warm-up\n  this run:  tp 2 pp 2 cp 1 vp 1 dp 2"),
            std::string::npos)
      << log;

  const Shell one = sh(tb.string() +
                       " train --device cpu --model tiny --seq 64 --micro-batch 1 --global-batch 4 "
                       "--steps 6 --warmup-steps 2 --out " +
                       (dir / "one").string());
  ASSERT_EQ(one.rc, 0) << one.out;
  std::vector<double> expected;
  for (const auto& r : read_jsonl(dir / "one/results.jsonl"))
    if (r["bench"] == "train") expected = r["loss"].get<std::vector<double>>();
  const auto got = run["measured"]["loss"].get<std::vector<double>>();
  ASSERT_EQ(got.size(), 6u);
  ASSERT_EQ(expected.size(), 6u);
  for (size_t s = 0; s < got.size(); ++s) EXPECT_NEAR(got[s], expected[s], 2e-5 * expected[s]) << "step " << s + 1;
}

// `srun --mpi=pmix -n 2 trainbench train --device cpu --tp 2`: the two tasks form one tensor-parallel job (one train
// record of 2 ranks, layout tp 2), and rank 0's run id reaches the other rank (its rank_steps record names the run).
TEST_F(SlurmCluster, SrunPmixStartsOneTensorParallelJob) {
  const fs::path tb = tb::testing_support::trainbench_binary();
  ASSERT_TRUE(fs::exists(tb)) << tb << " is not built (cmake --build build --target trainbench)";
  const fs::path out = dir / "srun";
  const Shell s = sh("env -u TRAINBENCH_RUN_ID timeout 120 srun --mpi=pmix -n 2 " + tb.string() +
                     " train --device cpu --model tiny --tp 2 --steps 4 --warmup-steps 1 --out " + out.string());
  ASSERT_EQ(s.rc, 0) << s.out;
  std::vector<nlohmann::json> train, ranks, steps;
  for (const auto& r : read_jsonl(out / "results.jsonl"))
    (r["bench"] == "train" ? train : r["bench"] == "train.step" ? steps : ranks).push_back(r);
  EXPECT_EQ(steps.size(), 4u);  // rank 0's record of each step as it finished
  ASSERT_EQ(train.size(), 1u) << s.out;
  EXPECT_EQ(train[0]["status"], "ok");
  EXPECT_EQ(train[0]["gpus"], 2);
  EXPECT_EQ(
      train[0]["layout"],
      (nlohmann::json{{"dp", 1}, {"cp", 1}, {"pp", 1}, {"tp", 2}, {"vp", 1}, {"ep", 1}, {"sequence_parallel", true}}));
  ASSERT_EQ(ranks.size(), 2u) << s.out;
  for (const auto& r : ranks) {
    EXPECT_EQ(r["bench"], "rank_steps");
    EXPECT_EQ(r["run"], train[0]["run"]) << r.dump();
  }
}

}  // namespace
