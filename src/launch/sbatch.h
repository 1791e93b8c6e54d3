// launch/sbatch.h: one Slurm batch script from a plain description. The script asks for whole nodes
// (--exclusive), one task per GPU (--ntasks-per-node), GPUs by GRES or not (sites differ), and starts every task
// with `srun --mpi=<mpi>` (pmix by default), optionally in a pyxis/enroot container. Each task runs
//   <trainbench> <args...> [<array task's args...>] --out <dir>/jobs/<job>/<task folder>
// where <job> is the job id (arrays: <array job>_<task>) and the task folder is rank<SLURM_PROCID> (or
// node-<host> for per-node checks). The script records its own state in <dir>/jobs/<job>/job.json (RUNNING,
// then COMPLETED or FAILED with srun's exit code) so `collect` knows a job's fate after Slurm forgot it, and
// Slurm writes its output to <dir>/logs/<job>.out. Rendering is pure: the same job gives the same text.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace tb::launch {

struct SlurmJob {
  std::string command;  // "run", "sweep", "scale", "check": for the header comment
  std::string name;     // --job-name
  std::string summary;  // one line for the header comment
  int nodes = 1;
  int tasks_per_node = 8;
  int gpus_per_node = 8;  // 0: ask for no GPU (CPU jobs)
  bool gres = true;       // --gres=gpu:N; false: no GPU request (the nodes' GPUs come with --exclusive)
  bool exclusive = true;
  std::string partition, account, time;  // "": the cluster's defaults
  std::string mpi = "pmix";              // srun --mpi=; "" or "none": leave it to the cluster's MpiDefault
  std::string container_image;           // pyxis: --container-image; the submission folder is mounted too
  std::vector<std::string> container_mounts;
  std::vector<std::pair<std::string, std::string>> env;  // exported in the script
  std::vector<std::string> sbatch_extra, srun_extra, setup;
  std::filesystem::path dir;                    // the submission folder (absolute, on a shared file system)
  std::string trainbench = "trainbench";        // the binary as the compute nodes (or the container) see it
  std::vector<std::string> args;                // its arguments, e.g. {"run", "tiny", "--device", "cpu"}
  std::vector<std::vector<std::string>> array;  // job array: one argument list per array task; empty: no array
  bool per_node = false;                        // task folders named node-<host> (one task per node) instead of rank<N>
  bool distributed = false;                     // the tasks are the ranks of one training job (else independent)
};

std::string render_sbatch(const SlurmJob& job);

}  // namespace tb::launch
