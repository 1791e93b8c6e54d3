// Tests launch/sbatch + launch/submission planning: golden sbatch scripts for a matrix of options (GPU with GRES
// and without, partition/account/time, pyxis container and mounts, environment, site setup, CPU tasks, job array,
// scale chain, per-node check, MPI none), every script passes `bash -n`, and bad requests fail before rendering.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "core/error.h"
#include "golden.h"
#include "launch/submission.h"
#include "recipe/recipe.h"

namespace {
using namespace tb::launch;

const std::vector<tb::recipe::Recipe>& recipes() {
  static const auto r = tb::recipe::load_recipes(tb::recipe::find_recipes_dir(std::nullopt));
  return r;
}

SlurmRequest request(std::string command, std::string recipe, int nodes) {
  SlurmRequest q;
  q.command = std::move(command);
  q.recipe = std::move(recipe);
  q.nodes = {nodes};
  q.dir = "/shared/results/slurm/golden";
  q.trainbench = "/opt/trainbench/bin/trainbench";
  return q;
}

void bash_syntax_ok(const std::string& script) {
  const auto file = std::filesystem::temp_directory_path() / ("tb_sbatch_" + std::to_string(::getpid()) + ".sh");
  std::ofstream(file) << script;
  EXPECT_EQ(std::system(("bash -n " + file.string()).c_str()), 0) << script;
  std::filesystem::remove(file);
}

// Renders every job of the plan; one golden file per job.
void check(const std::string& golden, const SlurmRequest& q, const Site& site = {}) {
  const Submission sub = plan_slurm(q, site, recipes());
  ASSERT_FALSE(sub.jobs.empty());
  for (size_t i = 0; i < sub.jobs.size(); ++i) {
    const std::string text = render_sbatch(sub.jobs[i].job);
    bash_syntax_ok(text);
    golden::expect_golden(sub.jobs.size() == 1 ? golden + ".sbatch" : golden + "-" + std::to_string(i) + ".sbatch",
                          text);
  }
}

TEST(Sbatch, RunOnTwoNodesWithGres) { check("run-gres", request("run", "llama3.1-8b", 2)); }

TEST(Sbatch, RunWithSiteDefaultsContainerAndEnvironment) {
  Site site;
  site.slurm.partition = "batch";
  site.slurm.account = "perf";
  site.slurm.time = "00:30:00";
  site.slurm.container_image = "nvcr.io#nvidia/pytorch:25.01-py3";
  site.slurm.container_mounts = {"/lustre/datasets:/datasets:ro"};
  site.slurm.sbatch = {"--qos=benchmark"};
  site.slurm.srun = {"--container-remap-root"};
  site.slurm.setup = {"module load nccl", "ulimit -l unlimited"};
  auto q = request("run", "llama3.1-8b", 4);
  q.trainbench = "trainbench";  // inside the container
  q.mounts = {"/home/me/ckpt:/ckpt"};
  q.env = {{"NCCL_DEBUG", "WARN"}, {"NCCL_IB_HCA", "mlx5_0,mlx5_1"}, {"UCX_TLS", "rc,sm cuda_copy"}};
  q.passthrough = {"--steps", "20"};
  check("run-site-container", q, site);
}

TEST(Sbatch, RunWithoutGresOnAPartitionOfFourGpuNodes) {
  auto q = request("run", "llama3.1-8b", 2);
  q.gres = false;
  q.gpus_per_node = 4;
  q.mpi = "pmi2";
  check("run-nogres-4gpu", q);
}

TEST(Sbatch, CpuTasksWithoutGpusOrMpi) {
  auto q = request("run", "tiny", 1);
  q.device = "cpu";
  q.tasks_per_node = 2;
  q.mpi = "none";
  q.exclusive = false;
  check("run-cpu-2tasks", q);
}

TEST(Sbatch, RunProxiesIsIndependentTasks) {
  auto q = request("run", "llama3.1-8b", 2);
  q.proxies = true;
  check("run-proxies", q);
}

TEST(Sbatch, SweepIsOneJobArrayOfDistributedJobs) {
  auto q = request("sweep", "llama3.1-8b", 2);
  q.sets = {"micro_batch=1,2", "layers=8,16"};
  const Submission sub = plan_slurm(q, {}, recipes());
  ASSERT_EQ(sub.jobs.size(), 1u);
  EXPECT_TRUE(sub.jobs[0].job.distributed);
  EXPECT_EQ(sub.jobs[0].job.array.size(), 4u);
  EXPECT_EQ(sub.jobs[0].array_labels[1], "micro_batch=1 layers=16");
  check("sweep-distributed", q);
}

TEST(Sbatch, SweepIsOneJobArrayOverTheProduct) {
  auto q = request("sweep", "llama3.1-8b", 1);
  q.sets = {"micro_batch=1,2"};
  q.ref_gpus = {8, 16};
  q.proxies = true;
  const Submission sub = plan_slurm(q, {}, recipes());
  ASSERT_EQ(sub.jobs.size(), 1u);
  EXPECT_EQ(sub.jobs[0].job.array.size(), 4u);
  EXPECT_EQ(sub.jobs[0].array_labels[1], "micro_batch=1 ref_gpus=16");
  check("sweep", q);
}

TEST(Sbatch, ScaleIsOneJobPerNodeCountChained) {
  auto q = request("scale", "llama3.1-8b", 1);
  q.nodes = {1, 2};
  const Submission sub = plan_slurm(q, {}, recipes());
  ASSERT_EQ(sub.jobs.size(), 2u);
  EXPECT_FALSE(sub.jobs[0].after_previous);
  EXPECT_TRUE(sub.jobs[1].after_previous);
  EXPECT_EQ(sub.jobs[1].script, "job-2n.sbatch");
  check("scale", q);
}

TEST(Sbatch, CheckRunsOneTaskPerNode) {
  auto q = request("check", "", 3);
  check("check", q);
}

TEST(Sbatch, BadRequestsFailBeforeAnythingIsRendered) {
  auto expect_config = [](const SlurmRequest& q, const std::string& words) {
    try {
      plan_slurm(q, {}, recipes());
      ADD_FAILURE() << "no error; expected one with '" << words << "'";
    } catch (const tb::Error& e) {
      EXPECT_EQ(e.kind(), tb::Error::Kind::config);
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  expect_config(request("run", "llama3.1-8c", 1), "did you mean 'llama3.1-8b'");
  // A node count whose GPUs the layout cannot split (70B: tp 4 x pp 4 x cp 2 = 32 GPUs a replica), before submitting.
  expect_config(request("run", "llama3.1-70b", 1), "1 node x 8 GPUs = 8 ranks of one distributed job");
  auto d = request("run", "llama3.1-8b", 1);
  d.tasks_per_node = 4;
  expect_config(d, "one rank per GPU");
  d = request("sweep", "llama3.1-8b", 1);
  d.ref_gpus = {8, 16};
  expect_config(d, "--proxies");
  auto q = request("run", "tiny", 1);
  q.passthrough = {"--out", "/x"};
  expect_config(q, "--out");
  q = request("sweep", "llama3.1-8b", 1);
  expect_config(q, "what to vary");
  q.sets = {"layerz=2,4"};
  expect_config(q, "layerz");
  q = request("run", "tiny", 1);
  q.nodes = {1, 2};
  expect_config(q, "trainbench slurm scale");
  q = request("run", "tiny", 1);
  q.dir = "relative/folder";
  expect_config(q, "absolute");
  q = request("run", "tiny", 1);
  q.trainbench.reset();
  expect_config(q, "--trainbench");
  q = request("run", "tiny", 1);
  q.partition = "two words";
  try {
    render_sbatch(plan_slurm(q, {}, recipes()).jobs[0].job);
    ADD_FAILURE() << "a partition with a space rendered";
  } catch (const tb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("#SBATCH"), std::string::npos) << e.what();
  }
}

}  // namespace
