// recipe/system.cpp: loads references/systems/*.toml into SystemRef, validating every key.
#include "recipe/system.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "recipe/toml_util.h"

namespace tb::recipe {
namespace {

double number(const std::string& path, const toml::table& t, std::string_view key, bool required) {
  const toml::node* n = t.get(key);
  if (!n) {
    TB_REQUIRE(!required, fmt::format("{}: missing key '{}'", path, key));
    return 0;
  }
  auto v = n->value<double>();
  TB_REQUIRE(v.has_value(), fmt::format("{}: '{}' must be a number", where(path, *n), key));
  return *v;
}

std::string string(const std::string& path, const toml::table& t, std::string_view key, bool required) {
  const toml::node* n = t.get(key);
  if (!n) {
    TB_REQUIRE(!required, fmt::format("{}: missing key '{}'", path, key));
    return {};
  }
  auto v = n->value<std::string>();
  TB_REQUIRE(v.has_value(), fmt::format("{}: '{}' must be a string", where(path, *n), key));
  return *v;
}

const toml::table& subtable(const std::string& path, const toml::table& t, std::string_view key) {
  const toml::node* n = t.get(key);
  TB_REQUIRE(n && n->is_table(), fmt::format("{}: missing table [{}]", path, key));
  return *n->as_table();
}

}  // namespace

double SystemRef::peak_tflops(std::string_view dtype) const {
  if (dtype == "bf16") return peak_bf16;
  if (dtype == "f16") return peak_f16;
  if (dtype == "tf32") return peak_tf32;
  if (dtype == "f32") return peak_f32;
  if (dtype == "e4m3" || dtype == "e5m2" || dtype == "fp8" || dtype.starts_with("e4m3")) return peak_fp8;
  return 0;
}

SystemRef load_system(const std::filesystem::path& file) {
  const std::string path = file.string();
  const toml::table root = parse_toml_file(path);
  reject_unknown_keys(path, root, "the file",
                      {"schema", "gpu", "peak_tflops", "check", "expect", "network", "compute", "projection"});
  TB_REQUIRE(root["schema"].value<int64_t>() == 1, fmt::format("{}: 'schema = 1' is required", path));

  SystemRef s;
  s.file = path;
  const auto& gpu = subtable(path, root, "gpu");
  reject_unknown_keys(path, gpu, "[gpu]", {"name", "match", "sms", "memory_gib", "hbm_tbps", "nvlink_gbps", "source"});
  s.name = string(path, gpu, "name", true);
  if (const auto* m = gpu.get_as<toml::array>("match")) {
    for (const auto& e : *m) {
      auto v = e.value<std::string>();
      TB_REQUIRE(v.has_value(), fmt::format("{}: [gpu] match must be a list of strings", where(path, e)));
      s.match.push_back(*v);
    }
  }
  TB_REQUIRE(!s.match.empty(), fmt::format("{}: [gpu] needs match = [\"substring of the device name\", ...]", path));
  s.sms = int(number(path, gpu, "sms", true));
  s.memory_gib = number(path, gpu, "memory_gib", true);
  s.hbm_tbps = number(path, gpu, "hbm_tbps", true);
  s.nvlink_gbps = number(path, gpu, "nvlink_gbps", false);

  const auto& peak = subtable(path, root, "peak_tflops");
  reject_unknown_keys(path, peak, "[peak_tflops]", {"bf16", "f16", "tf32", "fp8", "f32", "source"});
  s.peak_bf16 = number(path, peak, "bf16", true);
  s.peak_f16 = number(path, peak, "f16", true);
  s.peak_tf32 = number(path, peak, "tf32", true);
  s.peak_fp8 = number(path, peak, "fp8", true);
  s.peak_f32 = number(path, peak, "f32", true);

  if (const auto* check = root.get_as<toml::table>("check")) {
    reject_unknown_keys(path, *check, "[check]", {"outlier_fraction"});
    s.outlier_fraction = number(path, *check, "outlier_fraction", false);
    TB_REQUIRE(s.outlier_fraction > 0 && s.outlier_fraction < 1,
               fmt::format("{}: [check] outlier_fraction must be between 0 and 1", path));
  }

  if (const auto* net = root.get_as<toml::table>("network")) {
    reject_unknown_keys(path, *net, "[network]",
                        {"description", "nvlink_domain_gpus", "nvlink_busbw_gbps", "nvlink_latency_us", "scaleout_gbps",
                         "scaleout_efficiency", "scaleout_latency_us", "source"});
    NetworkRef& n = s.network;
    n.present = true;
    n.description = string(path, *net, "description", false);
    n.nvlink_domain_gpus = int(number(path, *net, "nvlink_domain_gpus", true));
    TB_REQUIRE(n.nvlink_domain_gpus >= 1, fmt::format("{}: [network] nvlink_domain_gpus must be at least 1", path));
    const auto* bw = net->get_as<toml::table>("nvlink_busbw_gbps");
    TB_REQUIRE(bw, fmt::format("{}: [network] needs nvlink_busbw_gbps = {{ all_reduce = .., all_gather = .., "
                               "reduce_scatter = .., sendrecv = .. }}",
                               path));
    reject_unknown_keys(path, *bw, "[network] nvlink_busbw_gbps",
                        {"all_reduce", "all_gather", "reduce_scatter", "sendrecv", "all_to_all"});
    n.nvlink_all_reduce_gbps = number(path, *bw, "all_reduce", true);
    n.nvlink_all_gather_gbps = number(path, *bw, "all_gather", true);
    n.nvlink_reduce_scatter_gbps = number(path, *bw, "reduce_scatter", true);
    n.nvlink_sendrecv_gbps = number(path, *bw, "sendrecv", true);
    n.nvlink_all_to_all_gbps = bw->get("all_to_all") ? number(path, *bw, "all_to_all", true) : n.nvlink_all_gather_gbps;
    n.nvlink_latency_us = number(path, *net, "nvlink_latency_us", false);
    n.scaleout_gbps = number(path, *net, "scaleout_gbps", true);
    if (net->get("scaleout_efficiency")) n.scaleout_efficiency = number(path, *net, "scaleout_efficiency", true);
    n.scaleout_latency_us = number(path, *net, "scaleout_latency_us", false);
    n.source = string(path, *net, "source", false);
    for (double v : {n.nvlink_all_reduce_gbps, n.nvlink_all_gather_gbps, n.nvlink_reduce_scatter_gbps,
                     n.nvlink_sendrecv_gbps, n.nvlink_all_to_all_gbps, n.scaleout_gbps})
      TB_REQUIRE(v > 0, fmt::format("{}: [network] bandwidths must be positive (GB/s)", path));
    TB_REQUIRE(n.scaleout_efficiency > 0 && n.scaleout_efficiency <= 1,
               fmt::format("{}: [network] scaleout_efficiency must be in (0, 1]", path));
    TB_REQUIRE(n.nvlink_latency_us >= 0 && n.scaleout_latency_us >= 0,
               fmt::format("{}: [network] latencies must not be negative", path));
  }

  if (const auto* comp = root.get_as<toml::table>("compute")) {
    reject_unknown_keys(path, *comp, "[compute]", {"gemm_bf16_tflops", "membw_tbps", "source"});
    s.compute.present = true;
    s.compute.gemm_bf16_tflops = number(path, *comp, "gemm_bf16_tflops", true);
    s.compute.membw_tbps = number(path, *comp, "membw_tbps", true);
    s.compute.source = string(path, *comp, "source", false);
    TB_REQUIRE(s.compute.gemm_bf16_tflops > 0 && s.compute.membw_tbps > 0,
               fmt::format("{}: [compute] rates must be positive", path));
  }

  if (const auto* proj = root.get_as<toml::table>("projection")) {
    reject_unknown_keys(path, *proj, "[projection]",
                        {"reference_efficiency", "overlap_cost", "straggler_sigma_ms", "source"});
    s.projection.present = true;
    s.projection.reference_efficiency = number(path, *proj, "reference_efficiency", true);
    s.projection.overlap_cost = number(path, *proj, "overlap_cost", true);
    s.projection.straggler_sigma_ms = number(path, *proj, "straggler_sigma_ms", false);
    s.projection.source = string(path, *proj, "source", false);
    TB_REQUIRE(s.projection.reference_efficiency > 0 && s.projection.reference_efficiency <= 2,
               fmt::format("{}: [projection] reference_efficiency must be in (0, 2]", path));
    TB_REQUIRE(s.projection.overlap_cost >= 0 && s.projection.overlap_cost <= 1,
               fmt::format("{}: [projection] overlap_cost must be in [0, 1]", path));
    TB_REQUIRE(s.projection.straggler_sigma_ms >= 0,
               fmt::format("{}: [projection] straggler_sigma_ms must not be negative", path));
  }

  if (const auto* expect = root.get("expect")) {
    const auto* arr = expect->as_array();
    TB_REQUIRE(arr, fmt::format("{}: 'expect' must be an array of tables ([[expect]])", where(path, *expect)));
    for (const auto& e : *arr) {
      const auto* t = e.as_table();
      TB_REQUIRE(t, fmt::format("{}: each [[expect]] entry must be a table", where(path, e)));
      reject_unknown_keys(path, *t, "[[expect]]", {"bench", "case", "metric", "min", "gpus", "source"});
      Expectation x;
      x.bench = string(path, *t, "bench", true);
      x.name = string(path, *t, "case", true);
      x.metric = string(path, *t, "metric", true);
      x.min = number(path, *t, "min", true);
      x.gpus = int(number(path, *t, "gpus", false));
      x.source = string(path, *t, "source", false);
      s.expect.push_back(std::move(x));
    }
  }
  return s;
}

std::vector<SystemRef> load_systems(const std::filesystem::path& dir) {
  std::vector<SystemRef> out;
  for (const auto& f : toml_files(dir)) out.push_back(load_system(f));
  return out;
}

const SystemRef* match_system(const std::vector<SystemRef>& systems, std::string_view device_name) {
  for (const auto& s : systems)
    for (const auto& m : s.match)
      if (device_name.find(m) != std::string_view::npos) return &s;
  return nullptr;
}

std::filesystem::path find_data_dir(std::string_view name, std::string_view env_var, std::string_view flag,
                                    const std::optional<std::filesystem::path>& explicit_dir, std::string_view marker) {
  namespace fs = std::filesystem;
  if (explicit_dir) {
    TB_REQUIRE(fs::is_directory(*explicit_dir), fmt::format("{} folder {} does not exist", name, explicit_dir->string()));
    return *explicit_dir;
  }
  if (const char* env = std::getenv(std::string(env_var).c_str())) {
    TB_REQUIRE(fs::is_directory(env), fmt::format("{}={} is not a folder", env_var, env));
    return env;
  }
  const auto candidates = data_dir_candidates(name);
  for (const auto& c : candidates)
    if (fs::is_directory(c / marker)) return fs::weakly_canonical(c);
  std::string looked;
  for (const auto& c : candidates) looked += fmt::format("\n  {}", c.lexically_normal().string());
  raise_config(fmt::format("cannot find the {} folder: pass {} DIR or set {}; looked in:{}", name, flag, env_var,
                           looked));
}

std::vector<std::filesystem::path> data_dir_candidates(std::string_view name) {
  namespace fs = std::filesystem;
  std::vector<fs::path> out;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path bin = exe.parent_path();
    out = {bin / name,                                // a copied binary with its data beside it
           bin / ".." / "share" / "trainbench" / name,  // an installed tree: <prefix>/bin, <prefix>/share/trainbench
           bin / ".." / name,                         // the build folder inside the source tree
           bin / "../.." / name};
  }
  out.push_back(fs::path(TB_SOURCE_DIR) / name);  // the source tree this binary was built from
  return out;
}

std::filesystem::path find_references_dir(const std::optional<std::filesystem::path>& explicit_dir) {
  return find_data_dir("references", "TRAINBENCH_REFERENCES", "--references", explicit_dir, "systems");
}

}  // namespace tb::recipe
