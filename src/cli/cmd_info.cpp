// cli/cmd_info.cpp: `trainbench info [--json]`: host, driver and library versions, and per GPU its model,
// SMs, memory, clocks, power limit, NVLink and PCIe (bench/sysinfo.h). Works without a GPU.
#include <fmt/format.h>

#include <cstdio>

#include "bench/sysinfo.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "core/provenance.h"

namespace tb::cli {
namespace {

std::string get(const nlohmann::json& j, const char* key, const char* unit = "") {
  if (!j.contains(key)) return "?";
  const auto& v = j[key];
  if (v.is_number_float()) return fmt::format("{:.1f}{}", v.get<double>(), unit);
  if (v.is_string()) return v.get<std::string>() + unit;
  return v.dump() + unit;
}

void print_human(const nlohmann::json& host, const nlohmann::json& sys, const nlohmann::json& versions) {
  std::printf("host      %s  (%s)\n", host["host"].get<std::string>().c_str(), host["os"].get<std::string>().c_str());
  std::printf("cpu       %s, %d cores; memory %.1f GiB\n", host["cpu"]["model"].get<std::string>().c_str(),
              host["cpu"]["cores"].get<int>(), host["memory_gib"].get<double>());
  std::printf("build     trainbench %s\n", host["build"]["git"].get<std::string>().c_str());
  std::string libs;
  for (const auto& [k, v] : versions.items()) libs += fmt::format("{} {}  ", k, v.get<std::string>());
  std::printf("libraries %s\n", libs.c_str());
  std::printf("driver    %s   NVML: %s\n", sys.contains("driver") ? get(sys, "driver").c_str() : "none", get(sys, "nvml").c_str());
  const auto& gpus = sys["gpus"];
  if (gpus.empty()) {
    std::printf("GPUs      none: %s\n", bench::no_gpu_reason().c_str());
    return;
  }
  for (const auto& g : gpus) {
    std::printf("\ngpu %s    %s  (%s, bus %s)\n", get(g, "index").c_str(), get(g, "name").c_str(), get(g, "uuid").c_str(),
                get(g, "pci_bus_id").c_str());
    std::printf("  compute   sm_%s, %s SMs, L2 %s MiB, memory %s GiB\n", get(g, "compute_capability").c_str(),
                get(g, "sms").c_str(), get(g, "l2_mib").c_str(), get(g, "memory_gib").c_str());
    if (g.contains("clocks")) {
      const auto& c = g["clocks"];
      std::printf("  clocks    SM %s MHz (max %s), memory %s MHz (max %s)\n", get(c, "sm_mhz").c_str(),
                  get(c, "sm_max_mhz").c_str(), get(c, "mem_mhz").c_str(), get(c, "mem_max_mhz").c_str());
    }
    if (g.contains("power"))
      std::printf("  power     limit %s W (default %s W), drawing %s W; temperature %s C\n",
                  get(g["power"], "limit_w").c_str(), get(g["power"], "default_limit_w").c_str(),
                  get(g["power"], "draw_w").c_str(), get(g, "temp_c").c_str());
    if (g.contains("nvlink"))
      std::printf("  nvlink    %s active links, peers %s\n", get(g["nvlink"], "active_links").c_str(),
                  g["nvlink"].value("peers", nlohmann::json::array()).dump().c_str());
    if (g.contains("pcie"))
      std::printf("  pcie      gen %s x%s (max gen %s x%s)\n", get(g["pcie"], "gen").c_str(), get(g["pcie"], "width").c_str(),
                  get(g["pcie"], "max_gen").c_str(), get(g["pcie"], "max_width").c_str());
  }
  if (sys.contains("peer_access") && gpus.size() > 1) {
    std::printf("\npeer access (row can read column):\n");
    for (size_t i = 0; i < sys["peer_access"].size(); ++i) {
      std::string row;
      for (const auto& v : sys["peer_access"][i]) row += v.get<bool>() ? " yes" : "  - ";
      std::printf("  gpu%zu %s\n", i, row.c_str());
    }
  }
}

}  // namespace

int cmd_info(int argc, char** argv) {
  CLI::App app{"GPUs, links, clocks, power limits, driver and library versions", "trainbench info"};
  bool json = false;
  app.add_flag("--json", json, "print one JSON object instead of the table");
  if (auto rc = parse(app, argc, argv)) return *rc;
  const auto host = host_provenance(argc, argv, "");
  const auto sys = bench::gpu_info();
  const auto versions = library_versions();
  if (json) {
    nlohmann::json j = host;
    j.erase("run");
    j["system"] = sys;
    j["versions"] = versions;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    print_human(host, sys, versions);
  }
  return kOk;
}

}  // namespace tb::cli
