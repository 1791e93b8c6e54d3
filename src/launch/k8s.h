// launch/k8s.h: Kubernetes manifests for a recipe on N nodes (pods), in one of two shapes:
//  - mpi-operator (default): a kubeflow.org/v2beta1 MPIJob (launcher + N workers, slotsPerWorker = tasks per node);
//    mpirun starts the ranks and forwards the passed-through environment (-x NAME). The ranks are one distributed
//    `trainbench run <recipe>` at the recipe's layout for N x GPUs per pod (with --proxies: independent proxies).
//  - indexed (--proxies): a headless Service plus an Indexed Job (completionMode Indexed, one pod per node, pods
//    reachable as <name>-<index>.<name>; TB_MASTER_ADDR names pod 0). Each pod starts one process per GPU
//    (CUDA_VISIBLE_DEVICES=<i>), rank = index x tasks per node + i, each `trainbench run <recipe> --proxy`.
// Every pod asks for its GPUs (nvidia.com/gpu by default), mounts a memory-backed /dev/shm and /results (a
// PersistentVolumeClaim when given, else an emptyDir), and gets the same environment as Slurm jobs do. Each
// rank writes its records to /results/<name>/rank<N>. Rendering is pure.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "launch/site.h"

namespace tb::recipe {
struct Recipe;
}

namespace tb::launch {

struct K8sJob {
  std::string name;  // DNS-1123 label: lowercase letters, digits, '-'
  std::string namespace_ = "default";
  std::string image;
  std::string summary;  // one line for the header comment
  int nodes = 1;
  int gpus_per_node = 8;  // 0: no GPU resource (CPU pods)
  int tasks_per_node = 8;
  std::string gpu_resource = "nvidia.com/gpu";
  std::string shm_size = "64Gi";
  std::string results_pvc, service_account;
  std::vector<std::pair<std::string, std::string>> env;
  std::string trainbench = "trainbench";  // the binary inside the image
  std::vector<std::string> args;          // e.g. {"run", "llama3.1-8b", "--ref-gpus", "16"}
  bool mpi_operator = false;
};

std::string render_k8s(const K8sJob& job);

struct K8sRequest {
  std::string recipe;
  int nodes = 1;
  std::optional<int> gpus_per_node, tasks_per_node;
  std::string device = "cuda";
  std::optional<std::string> name, namespace_, image, results_pvc, trainbench;
  bool mpi_operator = false;             // an MPIJob (always, unless --proxies)
  bool proxies = false;                  // independent one-GPU proxies instead of one distributed job
  std::vector<std::string> passthrough;  // appended to the trainbench command
  std::vector<std::pair<std::string, std::string>> env;
};
// Validates the recipe and its layout for nodes x GPUs per node (recipe/plan.h: a node count whose GPU count the
// recipe has no layout for fails here) and fills a K8sJob.
K8sJob plan_k8s(const K8sRequest& req, const Site& site, const std::vector<recipe::Recipe>& recipes);

// "llama3.1-8b" -> "tb-llama3-1-8b": a valid name for the Job, its Service and its pods' host names.
std::string k8s_name(std::string_view recipe);

}  // namespace tb::launch
