// launch/site.h: a site's cluster defaults, configured once: trainbench.toml ([slurm] and [k8s] tables), then
// TRAINBENCH_SLURM_<KEY> / TRAINBENCH_K8S_<KEY> environment variables over it, then command-line flags over both
// (the commands apply those). The file is the first of: --site FILE, $TRAINBENCH_SITE, ./trainbench.toml,
// $XDG_CONFIG_HOME/trainbench/trainbench.toml (~/.config/...), /etc/trainbench/trainbench.toml. docs/CLUSTER.md
// lists every key. Unknown keys and bad values are Error{config} with file:line (or the variable's name).
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tb::launch {

// Passed through from the submitting shell unless a site says otherwise: names, or prefixes ending in '*'.
std::vector<std::string> default_env_passthrough();

struct SlurmSite {
  std::string partition, account, time;  // "": the cluster's defaults
  int gpus_per_node = 8;
  bool gres = true;  // request GPUs as --gres=gpu:N; false: exclusive nodes only
  bool exclusive = true;
  std::string mpi = "pmix";                   // srun --mpi=<mpi>
  std::string container_image;                // pyxis/enroot: srun --container-image
  std::vector<std::string> container_mounts;  // SRC:DST[:FLAGS]
  std::vector<std::string> env = default_env_passthrough();
  std::map<std::string, std::string> env_set;  // fixed values, e.g. NCCL_IB_HCA = "mlx5"
  std::string trainbench;                      // the binary on the compute nodes; "": this one
  std::vector<std::string> sbatch, srun;       // extra options, e.g. "--qos=high", "--container-remap-root"
  std::vector<std::string> setup;              // shell lines before srun, e.g. "module load cuda"
};

struct K8sSite {
  std::string namespace_ = "default";
  std::string image;  // an image with trainbench on its PATH
  int gpus_per_node = 8;
  std::string gpu_resource = "nvidia.com/gpu";
  std::string shm_size = "64Gi";  // the /dev/shm memory volume
  std::string results_pvc;        // a PersistentVolumeClaim mounted at /results; "": emptyDir
  std::string service_account;
  std::vector<std::string> env = default_env_passthrough();
  std::map<std::string, std::string> env_set;
};

struct Site {
  std::filesystem::path file;  // empty: built-in defaults (and the environment)
  SlurmSite slurm;
  K8sSite k8s;
};

using GetEnv = std::function<const char*(const char*)>;  // std::getenv, or a fake in tests

// The site file to use (see above), or empty when there is none; an explicit file that is missing is an error.
std::filesystem::path find_site_file(const std::optional<std::filesystem::path>& explicit_file, const GetEnv& env);
Site load_site_file(const std::filesystem::path& file);
void apply_env(Site& site, const GetEnv& env);
Site load_site(const std::optional<std::filesystem::path>& explicit_file, const GetEnv& env);

// The variables to pass through: each of `names` (NAME or PREFIX*) set in the environment, then `fixed`
// (which wins), sorted by name.
std::vector<std::pair<std::string, std::string>> env_passthrough(const std::vector<std::string>& names,
                                                                 const std::map<std::string, std::string>& fixed,
                                                                 char** environ_list);

}  // namespace tb::launch
