// Tests launch/site: trainbench.toml [slurm]/[k8s] keys, unknown keys with file:line and the nearest key, bad
// types, TRAINBENCH_SLURM_* / TRAINBENCH_K8S_* over the file, the search order, and the environment passed through.
#include "launch/site.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "core/error.h"

namespace {
namespace fs = std::filesystem;
using namespace tb::launch;

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("tb_site_" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
  fs::path write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
    return path / name;
  }
};

GetEnv fake_env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* k) -> const char* {
    const auto it = vars.find(k);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

std::string config_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const tb::Error& e) {
    EXPECT_EQ(e.kind(), tb::Error::Kind::config);
    return e.what();
  }
  return "(no error)";
}

TEST(Site, DefaultsWithoutAFile) {
  const Site s = load_site(std::nullopt, fake_env({}));
  EXPECT_EQ(s.slurm.gpus_per_node, 8);
  EXPECT_TRUE(s.slurm.gres);
  EXPECT_TRUE(s.slurm.exclusive);
  EXPECT_EQ(s.slurm.mpi, "pmix");
  EXPECT_EQ(s.k8s.gpu_resource, "nvidia.com/gpu");
}

TEST(Site, ReadsEveryKey) {
  TempDir t;
  const auto f = t.write("site.toml", R"(
[slurm]
partition = "batch"
account = "perf"
time = "01:00:00"
gpus_per_node = 4
gres = false
exclusive = false
mpi = "pmi2"
container_image = "nvcr.io#nvidia/pytorch:25.01-py3"
container_mounts = ["/lustre:/lustre"]
env = ["NCCL_*"]
env_set = { NCCL_IB_HCA = "mlx5" }
trainbench = "/opt/tb/trainbench"
sbatch = ["--qos=high"]
srun = ["--container-remap-root"]
setup = ["module load cuda"]

[k8s]
namespace = "bench"
image = "registry.example/trainbench:1"
gpus_per_node = 4
results_pvc = "results"
)");
  const Site s = load_site(f, fake_env({}));
  EXPECT_EQ(s.file, f);
  EXPECT_EQ(s.slurm.partition, "batch");
  EXPECT_EQ(s.slurm.account, "perf");
  EXPECT_EQ(s.slurm.time, "01:00:00");
  EXPECT_EQ(s.slurm.gpus_per_node, 4);
  EXPECT_FALSE(s.slurm.gres);
  EXPECT_FALSE(s.slurm.exclusive);
  EXPECT_EQ(s.slurm.mpi, "pmi2");
  EXPECT_EQ(s.slurm.container_mounts, std::vector<std::string>{"/lustre:/lustre"});
  EXPECT_EQ(s.slurm.env, std::vector<std::string>{"NCCL_*"});
  EXPECT_EQ(s.slurm.env_set.at("NCCL_IB_HCA"), "mlx5");
  EXPECT_EQ(s.slurm.trainbench, "/opt/tb/trainbench");
  EXPECT_EQ(s.slurm.setup, std::vector<std::string>{"module load cuda"});
  EXPECT_EQ(s.k8s.namespace_, "bench");
  EXPECT_EQ(s.k8s.gpus_per_node, 4);
  EXPECT_EQ(s.k8s.results_pvc, "results");
}

TEST(Site, ErrorsNameTheLineAndTheNearestKey) {
  TempDir t;
  const auto f = t.write("site.toml", "[slurm]\npartition = \"a\"\nacount = \"b\"\n");
  const std::string e = config_error([&] { load_site(f, fake_env({})); });
  EXPECT_NE(e.find("site.toml:3"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'account'"), std::string::npos) << e;
  const auto g = t.write("bad.toml", "[slurm]\ngpus_per_node = \"eight\"\n");
  EXPECT_NE(config_error([&] { load_site(g, fake_env({})); }).find("'gpus_per_node' must be an integer"),
            std::string::npos);
  const auto h = t.write("top.toml", "[slurmm]\n");
  EXPECT_NE(config_error([&] { load_site(h, fake_env({})); }).find("did you mean 'slurm'"), std::string::npos);
  EXPECT_NE(config_error([&] { load_site(t.path / "missing.toml", fake_env({})); }).find("does not exist"),
            std::string::npos);
}

TEST(Site, EnvironmentOverridesTheFile) {
  TempDir t;
  const auto f = t.write("site.toml", "[slurm]\npartition = \"batch\"\ngres = true\n");
  const Site s = load_site(f, fake_env({{"TRAINBENCH_SLURM_PARTITION", "debug"},
                                        {"TRAINBENCH_SLURM_GRES", "no"},
                                        {"TRAINBENCH_SLURM_GPUS_PER_NODE", "4"},
                                        {"TRAINBENCH_SLURM_CONTAINER_MOUNTS", "/a:/a, /b:/b"},
                                        {"TRAINBENCH_K8S_IMAGE", "img:1"}}));
  EXPECT_EQ(s.slurm.partition, "debug");
  EXPECT_FALSE(s.slurm.gres);
  EXPECT_EQ(s.slurm.gpus_per_node, 4);
  EXPECT_EQ(s.slurm.container_mounts, (std::vector<std::string>{"/a:/a", "/b:/b"}));
  EXPECT_EQ(s.k8s.image, "img:1");
  const std::string e = config_error([&] { load_site(f, fake_env({{"TRAINBENCH_SLURM_GPUS_PER_NODE", "x"}})); });
  EXPECT_NE(e.find("TRAINBENCH_SLURM_GPUS_PER_NODE=x"), std::string::npos) << e;
}

TEST(Site, SearchOrder) {
  TempDir t;
  const auto in_xdg = t.write("trainbench.toml", "[slurm]\npartition = \"xdg\"\n");
  fs::create_directories(t.path / "xdg/trainbench");
  fs::copy_file(in_xdg, t.path / "xdg/trainbench/trainbench.toml");
  EXPECT_EQ(find_site_file(std::nullopt, fake_env({{"XDG_CONFIG_HOME", (t.path / "xdg").string()}})),
            t.path / "xdg/trainbench/trainbench.toml");
  EXPECT_EQ(find_site_file(std::nullopt, fake_env({{"TRAINBENCH_SITE", in_xdg.string()}})), in_xdg);
  EXPECT_NE(config_error([&] {
              find_site_file(std::nullopt, fake_env({{"TRAINBENCH_SITE", "/nonexistent.toml"}}));
            }).find("TRAINBENCH_SITE"),
            std::string::npos);
}

TEST(Site, PassesThroughNamesAndPrefixesAndFixedValues) {
  std::vector<std::string> vars{"NCCL_DEBUG=INFO",
                                "NCCL_IB_HCA=mlx5_0",
                                "UCX_TLS=rc",
                                "HOME=/root",
                                "PATH=/bin",
                                "CUDA_DEVICE_MAX_CONNECTIONS=1",
                                "CUDA_VISIBLE_DEVICES=0"};
  std::vector<char*> env;
  for (auto& v : vars) env.push_back(v.data());
  env.push_back(nullptr);
  const auto got = env_passthrough(default_env_passthrough(), {{"NCCL_DEBUG", "WARN"}}, env.data());
  const std::vector<std::pair<std::string, std::string>> want{
      {"CUDA_DEVICE_MAX_CONNECTIONS", "1"}, {"NCCL_DEBUG", "WARN"}, {"NCCL_IB_HCA", "mlx5_0"}, {"UCX_TLS", "rc"}};
  EXPECT_EQ(got, want);
}

}  // namespace
