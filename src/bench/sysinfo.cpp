// bench/sysinfo.cpp: GPU facts for `trainbench info` and run.json, from the CUDA runtime and NVML.
// Only reads: no NVML set function is ever called. A field NVML refuses is left out, never guessed.
//   memory_gib = totalGlobalMem / 2^30;  l2_mib = l2CacheSize / 2^20;  power in W = NVML mW / 1000;
//   nvlink.link_gbps = NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON / 1000 (GB/s per link, per direction).
#include "bench/sysinfo.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "bench/nvml.h"

namespace tb::bench {
namespace {
using nlohmann::json;

std::string cuda_version(int v) { return fmt::format("{}.{}", v / 1000, v % 1000 / 10); }  // 13000 -> "13.0"

// "0000:19:00.0" whatever the source: CUDA prints a 4-digit domain, NVML an 8-digit one.
std::string normal_bus_id(const char* id) {
  unsigned domain = 0, bus = 0, dev = 0, fn = 0;
  if (std::sscanf(id, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4) return id;
  return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", domain, bus, dev, fn);
}

std::string cuda_bus_id(int index) {
  char id[32] = {};
  if (cudaDeviceGetPCIBusId(id, sizeof(id), index) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  return normal_bus_id(id);
}

std::string uuid_string(const cudaUUID_t& u) {  // nvidia-smi's form: GPU-8-4-4-4-12 hex digits
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  std::string s = "GPU-";
  for (int i = 0; i < 16; ++i) s += fmt::format("{}{:02x}", (i == 4 || i == 6 || i == 8 || i == 10) ? "-" : "", b[i]);
  return s;
}

const char* enabled(nvmlEnableState_t s) { return s == NVML_FEATURE_ENABLED ? "enabled" : "disabled"; }

const char* compute_mode_name(nvmlComputeMode_t m) {
  switch (m) {
    case NVML_COMPUTEMODE_DEFAULT: return "default";
    case NVML_COMPUTEMODE_EXCLUSIVE_THREAD: return "exclusive_thread";
    case NVML_COMPUTEMODE_PROHIBITED: return "prohibited";
    case NVML_COMPUTEMODE_EXCLUSIVE_PROCESS: return "exclusive_process";
    default: return "unknown";
  }
}

// fn(handle, args..., &value) where it exists and succeeds.
template <class F, class... A>
std::optional<unsigned> read_uint(F fn, nvmlDevice_t h, A... args) {
  unsigned v = 0;
  if (fn && fn(h, args..., &v) == NVML_SUCCESS) return v;
  return std::nullopt;
}

void put(json& j, const char* key, std::optional<unsigned> v, double scale = 1.0) {
  if (v) j[key] = scale == 1.0 ? json(*v) : json(*v * scale);
}

json nvlink_json(const Nvml& nvml, nvmlDevice_t h, const std::vector<std::string>& bus_ids) {
  if (!nvml.DeviceGetNvLinkState) return nullptr;
  int active = 0, switch_links = 0;
  bool supported = false;
  json peers = json::array();
  for (unsigned link = 0; link < NVML_NVLINK_MAX_LINKS; ++link) {
    nvmlEnableState_t state{};
    if (nvml.DeviceGetNvLinkState(h, link, &state) != NVML_SUCCESS) continue;
    supported = true;
    if (state != NVML_FEATURE_ENABLED) continue;
    ++active;
    nvmlIntNvLinkDeviceType_t type{};
    if (nvml.DeviceGetNvLinkRemoteDeviceType && nvml.DeviceGetNvLinkRemoteDeviceType(h, link, &type) == NVML_SUCCESS &&
        type == NVML_NVLINK_DEVICE_TYPE_SWITCH)
      ++switch_links;
    nvmlPciInfo_t pci{};
    if (!nvml.DeviceGetNvLinkRemotePciInfo_v2 || nvml.DeviceGetNvLinkRemotePciInfo_v2(h, link, &pci) != NVML_SUCCESS)
      continue;
    const std::string remote = normal_bus_id(pci.busId);
    if (remote.starts_with("ffffffff")) continue;  // hidden from this VM: no usable address
    const auto gpu = std::find(bus_ids.begin(), bus_ids.end(), remote);  // a visible GPU: its CUDA index
    json peer = gpu != bus_ids.end() ? json(int(gpu - bus_ids.begin())) : json(remote);
    if (std::find(peers.begin(), peers.end(), peer) == peers.end()) peers.push_back(peer);
  }
  if (!supported) return nullptr;
  json j{{"active_links", active}, {"peers", peers}};
  if (nvml.DeviceGetNvLinkRemoteDeviceType) j["switch_links"] = switch_links;  // links to an NVSwitch
  if (active > 0 && nvml.DeviceGetFieldValues) {
    nvmlFieldValue_t f{};
    f.fieldId = NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON;
    if (nvml.DeviceGetFieldValues(h, 1, &f) == NVML_SUCCESS && f.nvmlReturn == NVML_SUCCESS &&
        f.valueType == NVML_VALUE_TYPE_UNSIGNED_INT && f.value.uiVal > 0)
      j["link_gbps"] = f.value.uiVal / 1000.0;
  }
  return j;
}

json gpu_json(int index, const Nvml& nvml, const std::vector<std::string>& bus_ids) {
  json g{{"index", index}};
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, index) == cudaSuccess) {
    g["name"] = p.name;
    g["uuid"] = uuid_string(p.uuid);
  } else {
    cudaGetLastError();
  }
  if (!bus_ids[index].empty()) g["pci_bus_id"] = bus_ids[index];
  if (g.contains("name")) {
    g["sms"] = p.multiProcessorCount;
    g["memory_gib"] = double(p.totalGlobalMem) / double(1ull << 30);
    g["compute_capability"] = fmt::format("{}.{}", p.major, p.minor);
    g["l2_mib"] = double(p.l2CacheSize) / double(1 << 20);
  }

  nvmlDevice_t h = nvml.device(index);
  if (!h) return g;
  json clocks = json::object(), power = json::object(), pcie = json::object();
  put(clocks, "sm_mhz", read_uint(nvml.DeviceGetClockInfo, h, NVML_CLOCK_SM));
  put(clocks, "mem_mhz", read_uint(nvml.DeviceGetClockInfo, h, NVML_CLOCK_MEM));
  put(clocks, "sm_max_mhz", read_uint(nvml.DeviceGetMaxClockInfo, h, NVML_CLOCK_SM));
  put(clocks, "mem_max_mhz", read_uint(nvml.DeviceGetMaxClockInfo, h, NVML_CLOCK_MEM));
  put(clocks, "sm_app_mhz", read_uint(nvml.DeviceGetApplicationsClock, h, NVML_CLOCK_SM));
  put(power, "limit_w", read_uint(nvml.DeviceGetEnforcedPowerLimit, h), 1e-3);
  put(power, "default_limit_w", read_uint(nvml.DeviceGetPowerManagementDefaultLimit, h), 1e-3);
  put(power, "draw_w", read_uint(nvml.DeviceGetPowerUsage, h), 1e-3);
  put(pcie, "gen", read_uint(nvml.DeviceGetCurrPcieLinkGeneration, h));
  put(pcie, "width", read_uint(nvml.DeviceGetCurrPcieLinkWidth, h));
  put(pcie, "max_gen", read_uint(nvml.DeviceGetMaxPcieLinkGeneration, h));
  put(pcie, "max_width", read_uint(nvml.DeviceGetMaxPcieLinkWidth, h));
  if (!clocks.empty()) g["clocks"] = clocks;
  if (!power.empty()) g["power"] = power;
  put(g, "temp_c", read_uint(nvml.DeviceGetTemperature, h, NVML_TEMPERATURE_GPU));
  if (json nvlink = nvlink_json(nvml, h, bus_ids); !nvlink.is_null()) g["nvlink"] = nvlink;
  if (!pcie.empty()) g["pcie"] = pcie;

  nvmlEnableState_t current{}, pending{};
  if (nvml.DeviceGetEccMode && nvml.DeviceGetEccMode(h, &current, &pending) == NVML_SUCCESS)
    g["ecc_mode"] = enabled(current);
  if (nvml.DeviceGetPersistenceMode && nvml.DeviceGetPersistenceMode(h, &current) == NVML_SUCCESS)
    g["persistence_mode"] = enabled(current);
  nvmlComputeMode_t mode{};
  if (nvml.DeviceGetComputeMode && nvml.DeviceGetComputeMode(h, &mode) == NVML_SUCCESS)
    g["compute_mode"] = compute_mode_name(mode);
  return g;
}

}  // namespace

int visible_gpu_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::string no_gpu_reason() {
  int n = 0, driver = 0, runtime = 0;
  const cudaError_t status = cudaGetDeviceCount(&n);
  cudaGetLastError();
  if (status == cudaSuccess && n > 0) return {};
  cudaDriverGetVersion(&driver);  // 0 when libcuda.so.1 cannot be loaded
  cudaRuntimeGetVersion(&runtime);
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (driver == 0) return "no CUDA driver found (libcuda.so.1): install the NVIDIA driver on a GPU node";
  if (status == cudaErrorInsufficientDriver)
    return fmt::format("the NVIDIA driver supports CUDA {}, this build needs CUDA {}: update the driver",
                       cuda_version(driver), cuda_version(runtime));
  if ((status == cudaErrorNoDevice || status == cudaSuccess) && visible)
    return *visible ? fmt::format("no GPU visible (CUDA_VISIBLE_DEVICES={}): no GPU of this machine has these ids", visible)
                    : "no GPU visible: CUDA_VISIBLE_DEVICES is set to an empty string";
  switch (status) {
    case cudaSuccess:
    case cudaErrorNoDevice: return "no CUDA GPU found: the driver is installed but sees no GPU (check nvidia-smi)";
    case cudaErrorSystemDriverMismatch:
      return "the NVIDIA kernel module and user-space driver versions differ: reboot or reinstall the driver";
    case cudaErrorDevicesUnavailable: return "every GPU is busy or in a prohibited compute mode (nvidia-smi -q -d COMPUTE)";
    case cudaErrorInitializationError:
    case cudaErrorUnknown:
      return fmt::format("the CUDA driver failed to initialise ({}): is the nvidia kernel module loaded? (nvidia-smi)",
                         cudaGetErrorName(status));
    default: return fmt::format("CUDA found no usable GPU: {} ({})", cudaGetErrorName(status), cudaGetErrorString(status));
  }
}

json gpu_info() {
  const Nvml& nvml = Nvml::get();
  json info = json::object();
  char driver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
  if (nvml.SystemGetDriverVersion && nvml.SystemGetDriverVersion(driver, sizeof(driver)) == NVML_SUCCESS)
    info["driver"] = driver;
  int v = 0;
  if (cudaDriverGetVersion(&v) == cudaSuccess && v > 0) info["cuda_driver"] = cuda_version(v);
  if (cudaRuntimeGetVersion(&v) == cudaSuccess) info["cuda_runtime"] = cuda_version(v);
  cudaGetLastError();
  info["nvml"] = nvml.available() ? std::string("ok") : nvml.reason();

  const int n = visible_gpu_count();
  std::vector<std::string> bus_ids(n);
  for (int i = 0; i < n; ++i) bus_ids[i] = cuda_bus_id(i);
  json gpus = json::array(), peer_access = json::array();
  for (int i = 0; i < n; ++i) gpus.push_back(gpu_json(i, nvml, bus_ids));
  for (int i = 0; i < n; ++i) {
    json row = json::array();
    for (int j = 0; j < n; ++j) {
      int can = 0;
      if (i != j && cudaDeviceCanAccessPeer(&can, i, j) != cudaSuccess) cudaGetLastError();
      row.push_back(i == j || can != 0);  // a device always reaches its own memory
    }
    peer_access.push_back(row);
  }
  info["gpus"] = gpus;
  info["peer_access"] = peer_access;
  if (n == 0) info["no_gpu"] = no_gpu_reason();
  return info;
}

}  // namespace tb::bench
