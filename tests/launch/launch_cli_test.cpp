// Tests cli/cmd_slurm.cpp and cli/cmd_k8s.cpp in-process, without a cluster and without a terminal: --dry-run prints
// the script (site file and environment applied, `--` arguments passed on), unknown subcommands and flags suggest
// the nearest, usage errors exit 2, status on a folder that is no submission says so, k8s render writes a file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../support/cli_run.h"

namespace {
namespace fs = std::filesystem;

using Result = tb::testing_support::CliResult;
Result with(const char* command, std::vector<std::string> args) {
  args.insert(args.begin(), command);
  return tb::testing_support::run_cli(std::move(args));
}
Result slurm(std::vector<std::string> args) { return with("slurm", std::move(args)); }
Result k8s(std::vector<std::string> args) { return with("k8s", std::move(args)); }

struct Temp {
  fs::path path = fs::temp_directory_path() / ("tb_launch_cli_" + std::to_string(::getpid()));
  Temp() { fs::create_directories(path); }
  ~Temp() { fs::remove_all(path); }
};

TEST(SlurmCli, DryRunPrintsTheScriptWithSiteDefaultsAndPassedArguments) {
  Temp t;
  std::ofstream(t.path / "site.toml") << "[slurm]\npartition = \"batch\"\naccount = \"perf\"\n";
  ::setenv("TRAINBENCH_SITE", (t.path / "site.toml").c_str(), 1);
  ::setenv("TRAINBENCH_SLURM_TIME", "00:20:00", 1);
  ::setenv("NCCL_DEBUG", "INFO", 1);
  const auto r = slurm({"run", "llama3.1-8b", "--nodes", "2", "--no-gres", "--trainbench", "/opt/tb/trainbench",
                        "--out", (t.path / "sub").string(), "--dry-run", "--", "--steps", "5"});
  ::unsetenv("TRAINBENCH_SITE");
  ::unsetenv("TRAINBENCH_SLURM_TIME");
  ::unsetenv("NCCL_DEBUG");
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char* want : {"#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=8", "#SBATCH --partition=batch",
                           "#SBATCH --account=perf", "#SBATCH --time=00:20:00", "export NCCL_DEBUG=INFO",
                           "srun --mpi=pmix", "/opt/tb/trainbench run llama3.1-8b --steps 5",
                           "# one distributed job: its 16 tasks (one per GPU) are the ranks of one training run"})
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  EXPECT_EQ(r.out.find("--gres"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(t.path / "sub")) << "a dry run writes nothing";
}

TEST(SlurmCli, ScaleDryRunShowsEveryScript) {
  const auto r = slurm({"scale", "llama3.1-8b", "--nodes", "1,2,4", "--trainbench", "/x/trainbench", "--dry-run"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("# ---- job-4n.sbatch (sbatch --dependency=afterany:<previous>) ----"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("its 32 tasks (one per GPU) are the ranks of one training run"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("--ref-gpus"), std::string::npos) << r.out;
}

TEST(SlurmCli, UsageErrors) {
  auto r = slurm({"sumbit"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("unknown command 'sumbit'"), std::string::npos) << r.err;
  r = slurm({"colect", "x"});
  EXPECT_NE(r.err.find("did you mean 'collect'"), std::string::npos) << r.err;
  r = slurm({"run", "tiny", "--nodes", "1", "--partiton", "debug", "--dry-run"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("did you mean '--partition'"), std::string::npos) << r.err;
  r = slurm({"run", "tiny", "--dry-run"});  // --nodes is required
  EXPECT_EQ(r.rc, 2);
  r = slurm({"run", "tinyy", "--nodes", "1", "--device", "cpu", "--trainbench", "/x", "--dry-run"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("did you mean 'tiny'"), std::string::npos) << r.err;
  r = slurm({"run", "tiny", "--nodes", "1", "--gres", "--no-gres", "--dry-run"});
  EXPECT_EQ(r.rc, 2);
  Temp t;
  r = slurm({"status", t.path.string()});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("not a trainbench slurm submission folder"), std::string::npos) << r.err;
  EXPECT_EQ(slurm({"--help"}).rc, 0);
  EXPECT_EQ(slurm({}).rc, 2);
}

TEST(K8sCli, RenderWritesTheManifest) {
  Temp t;
  const auto file = t.path / "job.yaml";
  auto r = k8s({"render", "tiny", "--device", "cpu", "--nodes", "2", "--tasks-per-node", "2", "--proxies", "--image",
                "img:1", "-o", file.string()});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::ifstream in(file);
  const std::string yaml((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(yaml.find("completionMode: Indexed"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("completions: 2"), std::string::npos) << yaml;
  r = k8s({"render", "tiny", "--device", "cpu", "--nodes", "1", "--image", "img:1"});  // one job: an MPIJob
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("kind: MPIJob"), std::string::npos) << r.out;
  r = k8s({"render", "tiny", "--device", "cpu", "--nodes", "1"});  // no image anywhere
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--image"), std::string::npos) << r.err;
  EXPECT_EQ(k8s({"apply"}).rc, 2);
}

}  // namespace
