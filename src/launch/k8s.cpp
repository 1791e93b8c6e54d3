// launch/k8s.cpp: the manifests as JSON trees (key order kept) written out as YAML.
#include "launch/k8s.h"

#include <fmt/format.h>

#include <optional>

#include "core/error.h"
#include "launch/process.h"
#include "launch/safe_text.h"
#include "launch/yaml.h"
#include "recipe/plan.h"
#include "recipe/recipe.h"

namespace tb::launch {
namespace {
using ojson = nlohmann::ordered_json;

ojson labels(const K8sJob& j) {
  return {{"app.kubernetes.io/name", "trainbench"}, {"app.kubernetes.io/instance", j.name}};
}

ojson env_list(const K8sJob& j, bool rendezvous) {
  ojson env = ojson::array();
  if (rendezvous) {
    env.push_back(
        {{"name", "TB_NODE_RANK"},
         {"valueFrom",
          {{"fieldRef", {{"fieldPath", "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}}}});
    env.push_back({{"name", "TB_NNODES"}, {"value", std::to_string(j.nodes)}});
    env.push_back({{"name", "TB_TASKS_PER_NODE"}, {"value", std::to_string(j.tasks_per_node)}});
    env.push_back({{"name", "TB_MASTER_ADDR"}, {"value", fmt::format("{}-0.{}", j.name, j.name)}});
    env.push_back({{"name", "TB_MASTER_PORT"}, {"value", "29500"}});
  }
  for (const auto& [k, v] : j.env) env.push_back({{"name", k}, {"value", v}});
  return env;
}

ojson resources(const K8sJob& j) {
  if (j.gpus_per_node == 0) return {{"requests", {{"cpu", std::to_string(j.tasks_per_node)}}}};
  return {{"limits", {{j.gpu_resource, j.gpus_per_node}}}};
}

ojson volumes(const K8sJob& j) {
  ojson v = ojson::array();
  v.push_back({{"name", "dshm"}, {"emptyDir", {{"medium", "Memory"}, {"sizeLimit", j.shm_size}}}});
  if (j.results_pvc.empty())
    v.push_back({{"name", "results"}, {"emptyDir", ojson::object()}});
  else
    v.push_back({{"name", "results"}, {"persistentVolumeClaim", {{"claimName", j.results_pvc}}}});
  return v;
}

ojson mounts() {
  return ojson::array(
      {{{"name", "dshm"}, {"mountPath", "/dev/shm"}}, {{"name", "results"}, {"mountPath", "/results"}}});
}

ojson pod_spec(const K8sJob& j, ojson containers, bool with_volumes) {
  ojson spec = ojson::object();
  spec["restartPolicy"] = "Never";
  if (!j.service_account.empty()) spec["serviceAccountName"] = j.service_account;
  spec["containers"] = std::move(containers);
  if (with_volumes) spec["volumes"] = volumes(j);
  return spec;
}

// The per-pod script of the indexed Job: one process per GPU, each with its rank's results folder.
std::string indexed_script(const K8sJob& j) {
  std::string s = "set -uo pipefail\n";
  s += "pids=()\n";
  s += "for i in $(seq 0 $((TB_TASKS_PER_NODE - 1))); do\n";
  s += "  rank=$((TB_NODE_RANK * TB_TASKS_PER_NODE + i))\n";
  s += fmt::format("  {}RANK=$rank LOCAL_RANK=$i WORLD_SIZE=$((TB_NNODES * TB_TASKS_PER_NODE)) \\\n",
                   j.gpus_per_node > 0 ? "CUDA_VISIBLE_DEVICES=$i " : "");
  s += fmt::format("    {} {} --out \"/results/{}/rank$rank\" &\n", shell_quote(j.trainbench), shell_join(j.args),
                   j.name);
  s += "  pids+=($!)\n";
  s += "done\n";
  s += "rc=0\n";
  s += "for p in \"${pids[@]}\"; do wait \"$p\" || rc=$?; done\n";
  s += "exit \"$rc\"\n";
  return s;
}

std::string header(const K8sJob& j) {
  std::string s = fmt::format("# trainbench k8s render: {}\n", j.summary);
  s += fmt::format("# {} pod{} x {} task{}{}; records in /results/{}/rank<N> ({})\n", j.nodes, j.nodes > 1 ? "s" : "",
                   j.tasks_per_node, j.tasks_per_node > 1 ? "s" : "",
                   j.gpus_per_node > 0 ? fmt::format(", {} {} each", j.gpus_per_node, j.gpu_resource) : ", CPU only",
                   j.name,
                   j.results_pvc.empty() ? "an emptyDir: give --results-pvc to keep them" : "PVC " + j.results_pvc);
  s +=
      fmt::format("# apply: kubectl apply -f <this file>   logs: kubectl logs -n {} -l app.kubernetes.io/instance={}\n",
                  j.namespace_, j.name);
  return s;
}

std::string render_indexed(const K8sJob& j) {
  ojson svc = {{"apiVersion", "v1"},
               {"kind", "Service"},
               {"metadata", {{"name", j.name}, {"namespace", j.namespace_}, {"labels", labels(j)}}},
               {"spec", {{"clusterIP", "None"}, {"publishNotReadyAddresses", true}, {"selector", labels(j)}}}};
  ojson container = {{"name", "trainbench"},
                     {"image", j.image},
                     {"command", ojson::array({"bash", "-c", indexed_script(j)})},
                     {"env", env_list(j, true)},
                     {"resources", resources(j)},
                     {"volumeMounts", mounts()}};
  ojson spec = pod_spec(j, ojson::array({container}), true);
  ojson tmpl_spec = ojson::object();
  tmpl_spec["subdomain"] = j.name;  // pods are <name>-<index>.<name>: the headless Service's records
  for (auto& [k, v] : spec.items()) tmpl_spec[k] = v;
  ojson job = {{"apiVersion", "batch/v1"},
               {"kind", "Job"},
               {"metadata", {{"name", j.name}, {"namespace", j.namespace_}, {"labels", labels(j)}}},
               {"spec",
                {{"completionMode", "Indexed"},
                 {"completions", j.nodes},
                 {"parallelism", j.nodes},
                 {"backoffLimit", 0},
                 {"template", {{"metadata", {{"labels", labels(j)}}}, {"spec", tmpl_spec}}}}}};
  return header(j) + to_yaml(svc) + "---\n" + to_yaml(job);
}

std::string render_mpijob(const K8sJob& j) {
  std::vector<std::string> mpirun{
      "mpirun", "--allow-run-as-root", "-np", std::to_string(j.nodes * j.tasks_per_node), "--bind-to", "none"};
  for (const auto& [k, v] : j.env) mpirun.insert(mpirun.end(), {"-x", k});
  mpirun.insert(
      mpirun.end(),
      {"bash", "-c", fmt::format("exec \"$0\" \"$@\" --out \"/results/{}/rank${{OMPI_COMM_WORLD_RANK}}\"", j.name),
       j.trainbench});
  mpirun.insert(mpirun.end(), j.args.begin(), j.args.end());
  ojson launcher = {{"name", "launcher"},
                    {"image", j.image},
                    {"command", mpirun},
                    {"env", env_list(j, false)},
                    {"resources", {{"requests", {{"cpu", "1"}}}}}};
  ojson worker = {{"name", "worker"},
                  {"image", j.image},
                  {"env", env_list(j, false)},
                  {"resources", resources(j)},
                  {"volumeMounts", mounts()}};
  ojson launcher_spec = pod_spec(j, ojson::array({launcher}), false);
  ojson worker_spec = pod_spec(j, ojson::array({worker}), true);
  worker_spec.erase("restartPolicy");
  ojson doc = {
      {"apiVersion", "kubeflow.org/v2beta1"},
      {"kind", "MPIJob"},
      {"metadata", {{"name", j.name}, {"namespace", j.namespace_}, {"labels", labels(j)}}},
      {"spec",
       {{"slotsPerWorker", j.tasks_per_node},
        {"runPolicy", {{"cleanPodPolicy", "Running"}, {"backoffLimit", 0}}},
        {"mpiImplementation", "OpenMPI"},
        {"mpiReplicaSpecs",
         {{"Launcher",
           {{"replicas", 1}, {"template", {{"metadata", {{"labels", labels(j)}}}, {"spec", launcher_spec}}}}},
          {"Worker",
           {{"replicas", j.nodes}, {"template", {{"metadata", {{"labels", labels(j)}}}, {"spec", worker_spec}}}}}}}}}};
  return header(j) + to_yaml(doc);
}

// Every value of the job before anything is rendered: Kubernetes names as DNS-1123 names, no control character
// anywhere (a newline in a value the header comment or the pod script holds would start a line, or a document, of
// its own).
void check_values(const K8sJob& j) {
  // 52: room for "-<index>" in the pods' host names
  TB_REQUIRE(dns1123_label(j.name, 52), fmt::format("k8s: '{}' is not a valid name (lowercase letters, digits and "
                                                    "'-', starting and ending with a letter or digit, at most 52 "
                                                    "characters)",
                                                    printable(j.name)));
  TB_REQUIRE(dns1123_label(j.namespace_),
             fmt::format("k8s: namespace '{}' is not a valid Kubernetes namespace (a DNS-1123 label: lowercase "
                         "letters, digits and '-', at most 63 characters)",
                         printable(j.namespace_)));
  TB_REQUIRE(j.results_pvc.empty() || dns1123_subdomain(j.results_pvc),
             fmt::format("k8s: results PVC '{}' is not a valid claim name (a DNS-1123 subdomain: lowercase letters, "
                         "digits, '-' and '.')",
                         printable(j.results_pvc)));
  TB_REQUIRE(j.service_account.empty() || dns1123_subdomain(j.service_account),
             fmt::format("k8s: service account '{}' is not a valid name (a DNS-1123 subdomain)",
                         printable(j.service_account)));
  for (const auto& [what, v] : {std::pair{"image", &j.image}, {"GPU resource", &j.gpu_resource},
                                {"shm size", &j.shm_size}, {"trainbench path", &j.trainbench}}) {
    require_printable(fmt::format("k8s: the {}", what), *v);
    TB_REQUIRE(v->find(' ') == std::string::npos,
               fmt::format("k8s: the {} '{}' may not hold spaces", what, *v));
  }
  require_printable("k8s: the summary", j.summary);
  for (const auto& [k, v] : j.env) {
    TB_REQUIRE(env_name(k), fmt::format("k8s: '{}' is not an environment variable name (letters, digits, '_')",
                                        printable(k)));
    require_printable(fmt::format("k8s: the environment variable {}", k), v);
  }
  for (const auto& a : j.args) require_printable("k8s: an argument", a);
}

}  // namespace

std::string k8s_name(std::string_view recipe) {
  std::string n = "tb-";
  for (char c : recipe)
    n += (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) ? c : '-';
  while (n.size() > 52) n.pop_back();
  while (n.back() == '-') n.pop_back();
  return n;
}

std::string render_k8s(const K8sJob& j) {
  check_values(j);
  TB_REQUIRE(!j.image.empty(),
             "k8s: which container image? (--image, or image = \"...\" in [k8s] of trainbench.toml); "
             "it needs trainbench on its PATH");
  TB_REQUIRE(j.nodes >= 1 && j.tasks_per_node >= 1, "k8s: nodes and tasks per node must be at least 1");
  return j.mpi_operator ? render_mpijob(j) : render_indexed(j);
}

K8sJob plan_k8s(const K8sRequest& req, const Site& site, const std::vector<recipe::Recipe>& recipes) {
  const K8sSite& s = site.k8s;
  const bool cpu = req.device == "cpu";
  TB_REQUIRE(req.device == "cuda" || cpu, fmt::format("--device {}: cuda or cpu", req.device));
  TB_REQUIRE(req.nodes >= 1, "--nodes: at least 1");
  for (const auto& a : req.passthrough)
    TB_REQUIRE(a != "--out" && a != "-o" && !a.starts_with("--out="),
               "k8s: each rank's --out is /results/<name>/rank<N>");
  const int gpn = req.gpus_per_node.value_or(s.gpus_per_node);
  TB_REQUIRE(gpn >= 1, "--gpus-per-node: at least 1");
  K8sJob j;
  const recipe::Recipe& r = recipe::find_recipe(recipes, req.recipe);
  const int tpn = req.tasks_per_node.value_or(cpu ? 1 : gpn);
  TB_REQUIRE(req.proxies || cpu || tpn == gpn,
             fmt::format("k8s: a distributed job runs one rank per GPU: --tasks-per-node {} with {} GPUs per pod "
                         "(leave --tasks-per-node out, or --proxies for independent processes)",
                         tpn, gpn));
  recipe::RunOptions opt;
  opt.ranks = req.proxies ? 0 : req.nodes * tpn;
  opt.ref_gpus = cpu || !req.proxies ? 0 : req.nodes * gpn;
  opt.precision = cpu ? "fp32" : "";
  try {
    (void)recipe::plan_run(r, opt);
  } catch (const Error& e) {
    if (req.proxies) throw;
    raise_config(
        fmt::format("k8s: {} pods x {} = {} ranks of one distributed job: {} (a pod count whose GPUs the "
                    "recipe has a layout for, or --proxies)",
                    req.nodes, tpn, opt.ranks, e.what()));
  }
  j.name = req.name.value_or(k8s_name(r.name));
  j.namespace_ = req.namespace_.value_or(s.namespace_);
  j.image = req.image.value_or(s.image);
  j.nodes = req.nodes;
  j.gpus_per_node = cpu ? 0 : gpn;
  j.tasks_per_node = tpn;
  j.gpu_resource = s.gpu_resource;
  j.shm_size = s.shm_size;
  j.results_pvc = req.results_pvc.value_or(s.results_pvc);
  j.service_account = s.service_account;
  j.env = req.env;
  j.trainbench = req.trainbench.value_or("trainbench");
  j.mpi_operator = req.mpi_operator || !req.proxies;  // the ranks of one job need mpirun
  j.args = {"run", r.name};
  if (cpu) j.args.insert(j.args.end(), {"--device", "cpu"});
  if (req.proxies) j.args.push_back("--proxy");
  if (req.proxies && !cpu) j.args.insert(j.args.end(), {"--ref-gpus", std::to_string(req.nodes * gpn)});
  j.args.insert(j.args.end(), req.passthrough.begin(), req.passthrough.end());
  j.summary = fmt::format(
      "{} on {} node{} x {} {}{}{}{}", r.name, j.nodes, j.nodes > 1 ? "s" : "", cpu ? j.tasks_per_node : gpn,
      cpu ? "CPU task" : "GPU", (cpu ? j.tasks_per_node : gpn) > 1 ? "s" : "",
      req.proxies ? ", independent proxies" : ", one distributed job", j.mpi_operator ? " (MPIJob)" : " (indexed Job)");
  return j;
}

}  // namespace tb::launch
