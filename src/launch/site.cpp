// launch/site.cpp: reads trainbench.toml ([slurm], [k8s]) and the TRAINBENCH_SLURM_* / TRAINBENCH_K8S_* variables.
#include "launch/site.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>

#include "core/error.h"
#include "recipe/toml_util.h"

namespace tb::launch {
namespace fs = std::filesystem;
using recipe::get_bool;
using recipe::get_int;
using recipe::get_string;
using recipe::get_strings;

std::vector<std::string> default_env_passthrough() {
  return {"NCCL_*",
          "UCX_*",
          "OMPI_MCA_*",
          "PMIX_MCA_*",
          "NVSHMEM_*",
          "CUDA_DEVICE_MAX_CONNECTIONS",
          "TRAINBENCH_RECIPES",
          "TRAINBENCH_LOG"};
}

namespace {

constexpr std::array<std::string_view, 15> kSlurmKeys = {
    "partition",        "account", "time",    "gpus_per_node", "gres",   "exclusive", "mpi",  "container_image",
    "container_mounts", "env",     "env_set", "trainbench",    "sbatch", "srun",      "setup"};
constexpr std::array<std::string_view, 9> kK8sKeys = {"namespace",       "image",    "gpus_per_node",
                                                      "gpu_resource",    "shm_size", "results_pvc",
                                                      "service_account", "env",      "env_set"};

std::map<std::string, std::string> get_env_set(const std::string& path, const toml::table& t) {
  std::map<std::string, std::string> out;
  const toml::node* n = t.get("env_set");
  if (!n) return out;
  const toml::table* tab = n->as_table();
  TB_REQUIRE(tab, fmt::format("{}: 'env_set' must be a table of NAME = \"value\"", recipe::where(path, *n)));
  for (const auto& [k, v] : *tab) {
    const auto s = v.value<std::string>();
    TB_REQUIRE(s.has_value(), fmt::format("{}: env_set.{} must be a string", recipe::where(path, v), k.str()));
    out[std::string(k.str())] = *s;
  }
  return out;
}

int positive(const std::string& path, const toml::table& t, std::string_view key, int fallback) {
  const auto v = get_int(path, t, key);
  if (!v) return fallback;
  TB_REQUIRE(*v > 0 && *v <= 1024,
             fmt::format("{}: '{}' must be a positive GPU count", recipe::where_key(path, t, key), key));
  return int(*v);
}

// Environment values: a list is comma-separated; a bool is 1/0, true/false, yes/no.
std::vector<std::string> split_list(std::string_view s) {
  std::vector<std::string> out;
  while (!s.empty()) {
    const auto comma = s.find(',');
    std::string item(s.substr(0, comma));
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (!item.empty()) out.push_back(item);
    s = comma == std::string_view::npos ? std::string_view{} : s.substr(comma + 1);
  }
  return out;
}

bool parse_bool(const std::string& var, std::string_view v) {
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  raise_config(fmt::format("{}={}: expected 1/0, true/false or yes/no", var, v));
}

int parse_count(const std::string& var, std::string_view v) {
  int n = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  TB_REQUIRE(ec == std::errc() && p == v.data() + v.size() && n > 0 && n <= 1024,
             fmt::format("{}={}: expected a positive GPU count", var, v));
  return n;
}

}  // namespace

fs::path find_site_file(const std::optional<fs::path>& explicit_file, const GetEnv& env) {
  if (explicit_file) {
    TB_REQUIRE(fs::is_regular_file(*explicit_file),
               fmt::format("site file {} does not exist", explicit_file->string()));
    return *explicit_file;
  }
  if (const char* f = env("TRAINBENCH_SITE"); f && *f) {
    TB_REQUIRE(fs::is_regular_file(f), fmt::format("TRAINBENCH_SITE={}: no such file", f));
    return f;
  }
  std::vector<fs::path> candidates{"trainbench.toml"};
  if (const char* x = env("XDG_CONFIG_HOME"); x && *x)
    candidates.push_back(fs::path(x) / "trainbench/trainbench.toml");
  else if (const char* h = env("HOME"); h && *h)
    candidates.push_back(fs::path(h) / ".config/trainbench/trainbench.toml");
  candidates.push_back("/etc/trainbench/trainbench.toml");
  for (const auto& c : candidates)
    if (fs::is_regular_file(c)) return c;
  return {};
}

Site load_site_file(const fs::path& file) {
  Site site;
  site.file = file;
  const std::string path = file.string();
  const toml::table root = recipe::parse_toml_file(path);
  recipe::reject_unknown_keys(path, root, "the top level", {"slurm", "k8s"});
  if (const toml::table* t = root["slurm"].as_table()) {
    recipe::reject_unknown_keys(path, *t, "[slurm]", kSlurmKeys);
    SlurmSite& s = site.slurm;
    s.partition = get_string(path, *t, "partition").value_or("");
    s.account = get_string(path, *t, "account").value_or("");
    s.time = get_string(path, *t, "time").value_or("");
    s.gpus_per_node = positive(path, *t, "gpus_per_node", s.gpus_per_node);
    s.gres = get_bool(path, *t, "gres").value_or(s.gres);
    s.exclusive = get_bool(path, *t, "exclusive").value_or(s.exclusive);
    s.mpi = get_string(path, *t, "mpi").value_or(s.mpi);
    s.container_image = get_string(path, *t, "container_image").value_or("");
    s.container_mounts = get_strings(path, *t, "container_mounts").value_or(s.container_mounts);
    s.env = get_strings(path, *t, "env").value_or(s.env);
    s.env_set = get_env_set(path, *t);
    s.trainbench = get_string(path, *t, "trainbench").value_or("");
    s.sbatch = get_strings(path, *t, "sbatch").value_or(s.sbatch);
    s.srun = get_strings(path, *t, "srun").value_or(s.srun);
    s.setup = get_strings(path, *t, "setup").value_or(s.setup);
  } else {
    TB_REQUIRE(!root.contains("slurm"), fmt::format("{}: 'slurm' must be a table ([slurm])", path));
  }
  if (const toml::table* t = root["k8s"].as_table()) {
    recipe::reject_unknown_keys(path, *t, "[k8s]", kK8sKeys);
    K8sSite& k = site.k8s;
    k.namespace_ = get_string(path, *t, "namespace").value_or(k.namespace_);
    k.image = get_string(path, *t, "image").value_or("");
    k.gpus_per_node = positive(path, *t, "gpus_per_node", k.gpus_per_node);
    k.gpu_resource = get_string(path, *t, "gpu_resource").value_or(k.gpu_resource);
    k.shm_size = get_string(path, *t, "shm_size").value_or(k.shm_size);
    k.results_pvc = get_string(path, *t, "results_pvc").value_or("");
    k.service_account = get_string(path, *t, "service_account").value_or("");
    k.env = get_strings(path, *t, "env").value_or(k.env);
    k.env_set = get_env_set(path, *t);
  } else {
    TB_REQUIRE(!root.contains("k8s"), fmt::format("{}: 'k8s' must be a table ([k8s])", path));
  }
  return site;
}

void apply_env(Site& site, const GetEnv& env) {
  auto str = [&](const char* var, std::string& field) {
    if (const char* v = env(var)) field = v;
  };
  auto list = [&](const char* var, std::vector<std::string>& field) {
    if (const char* v = env(var)) field = split_list(v);
  };
  auto flag = [&](const char* var, bool& field) {
    if (const char* v = env(var); v && *v) field = parse_bool(var, v);
  };
  auto count = [&](const char* var, int& field) {
    if (const char* v = env(var); v && *v) field = parse_count(var, v);
  };
  SlurmSite& s = site.slurm;
  str("TRAINBENCH_SLURM_PARTITION", s.partition);
  str("TRAINBENCH_SLURM_ACCOUNT", s.account);
  str("TRAINBENCH_SLURM_TIME", s.time);
  count("TRAINBENCH_SLURM_GPUS_PER_NODE", s.gpus_per_node);
  flag("TRAINBENCH_SLURM_GRES", s.gres);
  flag("TRAINBENCH_SLURM_EXCLUSIVE", s.exclusive);
  str("TRAINBENCH_SLURM_MPI", s.mpi);
  str("TRAINBENCH_SLURM_CONTAINER_IMAGE", s.container_image);
  list("TRAINBENCH_SLURM_CONTAINER_MOUNTS", s.container_mounts);
  list("TRAINBENCH_SLURM_ENV", s.env);
  str("TRAINBENCH_SLURM_TRAINBENCH", s.trainbench);
  list("TRAINBENCH_SLURM_SBATCH", s.sbatch);
  list("TRAINBENCH_SLURM_SRUN", s.srun);
  K8sSite& k = site.k8s;
  str("TRAINBENCH_K8S_NAMESPACE", k.namespace_);
  str("TRAINBENCH_K8S_IMAGE", k.image);
  count("TRAINBENCH_K8S_GPUS_PER_NODE", k.gpus_per_node);
  str("TRAINBENCH_K8S_GPU_RESOURCE", k.gpu_resource);
  str("TRAINBENCH_K8S_SHM_SIZE", k.shm_size);
  str("TRAINBENCH_K8S_RESULTS_PVC", k.results_pvc);
  str("TRAINBENCH_K8S_SERVICE_ACCOUNT", k.service_account);
  list("TRAINBENCH_K8S_ENV", k.env);
  TB_REQUIRE(!s.mpi.empty(), "TRAINBENCH_SLURM_MPI is empty: use none, pmix, pmi2, ...");
}

Site load_site(const std::optional<fs::path>& explicit_file, const GetEnv& env) {
  const fs::path file = find_site_file(explicit_file, env);
  Site site = file.empty() ? Site{} : load_site_file(file);
  apply_env(site, env);
  return site;
}

std::vector<std::pair<std::string, std::string>> env_passthrough(const std::vector<std::string>& names,
                                                                 const std::map<std::string, std::string>& fixed,
                                                                 char** environ_list) {
  std::map<std::string, std::string> out;
  for (char** e = environ_list; e && *e; ++e) {
    const std::string_view kv(*e);
    const auto eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view key = kv.substr(0, eq);
    const bool wanted = std::any_of(names.begin(), names.end(), [&](const std::string& n) {
      return n.ends_with('*') ? key.starts_with(std::string_view(n).substr(0, n.size() - 1)) : key == n;
    });
    if (wanted) out[std::string(key)] = std::string(kv.substr(eq + 1));
  }
  for (const auto& [k, v] : fixed) out[k] = v;
  return {out.begin(), out.end()};
}

}  // namespace tb::launch
