// Tests launch/k8s and launch/yaml: golden manifests (indexed Job + headless Service for GPUs and for CPU pods, an
// MPIJob with a results PVC), each read back with PyYAML (tests/launch/k8s_check.py) and checked for its structure,
// and the built-in kinds validated against the Kubernetes schema with kubernetes-validate (installed by
// scripts/setup.sh into .deps/kubeval; the test says it skipped that part where it is missing).
#include "launch/k8s.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "golden.h"
#include "../support/shell.h"
#include "launch/yaml.h"
#include "recipe/recipe.h"

namespace {
namespace fs = std::filesystem;
using namespace tb::launch;

const std::vector<tb::recipe::Recipe>& recipes() {
  static const auto r = tb::recipe::load_recipes(tb::recipe::find_recipes_dir(std::nullopt));
  return r;
}

using Out = tb::testing_support::ShellResult;
Out sh(const std::string& cmd) { return tb::testing_support::run_shell(cmd); }

fs::path write_temp(const std::string& name, const std::string& text) {
  const auto f = fs::temp_directory_path() / ("tb_k8s_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(f) << text;
  return f;
}

const std::string kChecker = "python3 tests/launch/k8s_check.py";

// Renders, compares with the golden file, reads the YAML back: the documents as JSON.
nlohmann::json render_and_read(const std::string& golden, const K8sJob& job) {
  const std::string yaml = render_k8s(job);
  golden::expect_golden(golden, yaml);
  const auto file = write_temp(golden, yaml);
  const Out o = sh(kChecker + " " + file.string());
  fs::remove(file);
  EXPECT_EQ(o.rc, 0) << o.out;
  return nlohmann::json::parse(o.out);
}

void validate(const std::string& name, const std::string& yaml) {
  const auto file = write_temp(name, yaml);
  const Out o = sh("PYTHONPATH=.deps/kubeval " + kChecker + " --validate " + file.string() + " 2>&1");
  fs::remove(file);
  if (o.rc == 77) GTEST_SKIP() << o.out;
  EXPECT_EQ(o.rc, 0) << o.out;
}

K8sRequest request(int nodes) {
  K8sRequest q;
  q.recipe = "llama3.1-8b";
  q.nodes = nodes;
  q.image = "registry.example/trainbench:0.1";
  q.env = {{"NCCL_DEBUG", "WARN"}, {"NCCL_IB_HCA", "mlx5_0,mlx5_1"}};
  return q;
}

const nlohmann::json* find_env(const nlohmann::json& container, const std::string& name) {
  for (const auto& e : container["env"])
    if (e["name"] == name) return &e;
  return nullptr;
}

TEST(K8s, IndexedJobWithHeadlessServiceForGpus) {
  auto q = request(2);
  q.proxies = true;
  const K8sJob job = plan_k8s(q, {}, recipes());
  const auto docs = render_and_read("indexed-gpu.yaml", job);
  ASSERT_EQ(docs.size(), 2u);
  const auto& svc = docs[0];
  const auto& j = docs[1];
  EXPECT_EQ(svc["kind"], "Service");
  EXPECT_EQ(svc["spec"]["clusterIP"], "None");
  EXPECT_EQ(j["kind"], "Job");
  EXPECT_EQ(j["apiVersion"], "batch/v1");
  EXPECT_EQ(j["metadata"]["name"], "tb-llama3-1-8b");
  EXPECT_EQ(j["spec"]["completionMode"], "Indexed");
  EXPECT_EQ(j["spec"]["completions"], 2);
  EXPECT_EQ(j["spec"]["parallelism"], 2);
  const auto& pod = j["spec"]["template"];
  EXPECT_EQ(pod["spec"]["subdomain"], svc["metadata"]["name"]);
  EXPECT_EQ(svc["spec"]["selector"], pod["metadata"]["labels"]);  // the Service finds the pods
  const auto& c = pod["spec"]["containers"][0];
  EXPECT_EQ(c["resources"]["limits"]["nvidia.com/gpu"], 8);
  EXPECT_EQ(c["command"][0], "bash");
  EXPECT_NE(
      c["command"][2].get<std::string>().find("--proxy --ref-gpus 16 --out \"/results/tb-llama3-1-8b/rank$rank\""),
      std::string::npos);
  ASSERT_TRUE(find_env(c, "NCCL_IB_HCA"));
  EXPECT_EQ((*find_env(c, "NCCL_IB_HCA"))["value"], "mlx5_0,mlx5_1");
  EXPECT_EQ((*find_env(c, "TB_MASTER_ADDR"))["value"], "tb-llama3-1-8b-0.tb-llama3-1-8b");
  EXPECT_EQ((*find_env(c, "TB_NNODES"))["value"], "2");  // a string, as Kubernetes wants
  bool shm = false;
  for (const auto& v : pod["spec"]["volumes"])
    if (v["name"] == "dshm") shm = v["emptyDir"]["medium"] == "Memory";
  EXPECT_TRUE(shm);
  validate("indexed-gpu", render_k8s(job));
}

TEST(K8s, IndexedJobOnCpuPods) {
  auto q = request(1);
  q.recipe = "tiny";
  q.device = "cpu";
  q.tasks_per_node = 2;
  q.proxies = true;
  q.namespace_ = "ci";
  q.passthrough = {"--steps", "3"};
  const K8sJob job = plan_k8s(q, {}, recipes());
  const auto docs = render_and_read("indexed-cpu.yaml", job);
  ASSERT_EQ(docs.size(), 2u);
  const auto& c = docs[1]["spec"]["template"]["spec"]["containers"][0];
  EXPECT_FALSE(c["resources"].contains("limits"));
  EXPECT_EQ(c["resources"]["requests"]["cpu"], "2");
  EXPECT_EQ(docs[1]["metadata"]["namespace"], "ci");
  const std::string script = c["command"][2];
  EXPECT_NE(script.find("--device cpu --proxy --steps 3"), std::string::npos) << script;
  EXPECT_EQ(script.find("CUDA_VISIBLE_DEVICES"), std::string::npos) << script;
  validate("indexed-cpu", render_k8s(job));
}

// The default: one distributed job, its ranks started by the MPI operator's mpirun (no --ref-gpus: the job's own
// count).
TEST(K8s, MpiJobForTheMpiOperator) {
  auto q = request(4);
  q.results_pvc = "bench-results";
  Site site;
  site.k8s.service_account = "trainbench";
  const K8sJob job = plan_k8s(q, site, recipes());
  const auto docs = render_and_read("mpijob.yaml", job);
  ASSERT_EQ(docs.size(), 1u);
  const auto& d = docs[0];
  EXPECT_EQ(d["apiVersion"], "kubeflow.org/v2beta1");
  EXPECT_EQ(d["kind"], "MPIJob");
  EXPECT_EQ(d["spec"]["slotsPerWorker"], 8);
  const auto& specs = d["spec"]["mpiReplicaSpecs"];
  EXPECT_EQ(specs["Launcher"]["replicas"], 1);
  EXPECT_EQ(specs["Worker"]["replicas"], 4);
  const auto& launcher = specs["Launcher"]["template"]["spec"]["containers"][0];
  std::vector<std::string> cmd = launcher["command"];
  EXPECT_EQ(cmd[0], "mpirun");
  EXPECT_EQ(cmd[3], "32");                                                // -np nodes x GPUs
  EXPECT_NE(std::find(cmd.begin(), cmd.end(), "NCCL_DEBUG"), cmd.end());  // -x NCCL_DEBUG
  EXPECT_EQ(std::find(cmd.begin(), cmd.end(), "--ref-gpus"), cmd.end());
  EXPECT_EQ(std::find(cmd.begin(), cmd.end(), "--proxy"), cmd.end());
  EXPECT_EQ(cmd.back(), "llama3.1-8b");
  const auto& worker = specs["Worker"]["template"]["spec"];
  EXPECT_EQ(worker["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], 8);
  EXPECT_EQ(worker["serviceAccountName"], "trainbench");
  bool pvc = false;
  for (const auto& v : worker["volumes"])
    if (v["name"] == "results") pvc = v["persistentVolumeClaim"]["claimName"] == "bench-results";
  EXPECT_TRUE(pvc);
}

TEST(K8s, BadRequests) {
  auto q = request(1);
  q.recipe = "llama3.1-8c";
  EXPECT_THROW(plan_k8s(q, {}, recipes()), tb::Error);
  q = request(1);
  q.image.reset();
  EXPECT_THROW(render_k8s(plan_k8s(q, {}, recipes())), tb::Error);  // no image anywhere
  q = request(1);
  q.name = "Not_A_Name";
  EXPECT_THROW(render_k8s(plan_k8s(q, {}, recipes())), tb::Error);
  EXPECT_EQ(k8s_name("Llama3.1-8B"), "tb-llama3-1-8b");
  q = request(1);
  q.recipe = "llama3.1-70b";  // tp 4 x pp 4 x cp 2: 32 GPUs a replica, not 8
  try {
    plan_k8s(q, {}, recipes());
    ADD_FAILURE() << "a pod count without a layout was accepted";
  } catch (const tb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("8 ranks of one distributed job"), std::string::npos) << e.what();
  }
}

TEST(Yaml, ScalarsReadBackAsTheSameValues) {
  nlohmann::ordered_json doc = {{"plain", "abc/def.g-h"},
                                {"yes", "yes"},
                                {"num", "8"},
                                {"int", 8},
                                {"colon", "a: b"},
                                {"empty", ""},
                                {"hash", "#x"},
                                {"null", nullptr},
                                {"bool", true},
                                {"list", {"x", 1, "-y"}},
                                {"map", {{"k", "v"}}},
                                {"emptymap", nlohmann::ordered_json::object()},
                                {"block", "line 1\n  indented\nlast\n"},
                                {"quote", "it's \"q\""}};
  const auto file = write_temp("scalars.yaml", to_yaml(doc));
  const Out o = sh(kChecker + " " + file.string());
  fs::remove(file);
  ASSERT_EQ(o.rc, 0) << o.out;
  const auto back = nlohmann::json::parse(o.out);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0], nlohmann::json::parse(doc.dump()));
}

}  // namespace
