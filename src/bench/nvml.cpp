// bench/nvml.cpp: dlopen/dlsym of libnvidia-ml.so.1, CUDA index -> NVML handle, TB_CHECK for nvmlReturn_t.
#include "bench/nvml.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"

namespace tb {
namespace {
std::string status_name(nvmlReturn_t status) {
  switch (status) {
#define TB_CASE(s) case s: return #s;
    TB_CASE(NVML_ERROR_UNINITIALIZED) TB_CASE(NVML_ERROR_INVALID_ARGUMENT) TB_CASE(NVML_ERROR_NOT_SUPPORTED)
    TB_CASE(NVML_ERROR_NO_PERMISSION) TB_CASE(NVML_ERROR_NOT_FOUND) TB_CASE(NVML_ERROR_INSUFFICIENT_SIZE)
    TB_CASE(NVML_ERROR_DRIVER_NOT_LOADED) TB_CASE(NVML_ERROR_TIMEOUT) TB_CASE(NVML_ERROR_LIBRARY_NOT_FOUND)
    TB_CASE(NVML_ERROR_FUNCTION_NOT_FOUND) TB_CASE(NVML_ERROR_GPU_IS_LOST) TB_CASE(NVML_ERROR_RESET_REQUIRED)
    TB_CASE(NVML_ERROR_LIB_RM_VERSION_MISMATCH) TB_CASE(NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    TB_CASE(NVML_ERROR_UNKNOWN)
#undef TB_CASE
    default: return fmt::format("NVML_ERROR_{}", int(status));
  }
}
}  // namespace

void raise(nvmlReturn_t status, const char* expr, std::source_location where) {
  const auto& nvml = bench::Nvml::get();
  const char* text = nvml.ErrorString ? nvml.ErrorString(status) : "NVML is not loaded";
  raise_status(Error::Kind::nvml, status == NVML_ERROR_GPU_IS_LOST, status_name(status), text, expr, where);
}

}  // namespace tb

namespace tb::bench {

const Nvml& Nvml::get() {
  static const Nvml nvml;  // C++ guarantees one thread-safe construction
  return nvml;
}

Nvml::Nvml() {
  constexpr const char* kNotRecorded = "power, clocks and energy are not recorded";
  // Never dlclose'd: NVML stays initialised for the life of the process (no nvmlShutdown at exit, when
  // a sampler thread might still be reading).
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    reason_ = fmt::format("libnvidia-ml.so.1 not found: install the NVIDIA driver; {}", kNotRecorded);
    return;
  }
#define TB_NVML_RESOLVE(name)                                                   \
  name = reinterpret_cast<decltype(name)>(dlsym(lib, "nvml" #name));            \
  if (!name) log::debug("nvml: libnvidia-ml.so.1 has no nvml" #name);
  TB_NVML_FUNCTIONS(TB_NVML_RESOLVE)
#undef TB_NVML_RESOLVE
  nvmlReturn_t status = NVML_SUCCESS;
  if (!Init_v2 || !ErrorString || !DeviceGetHandleByPciBusId_v2)
    reason_ = fmt::format("libnvidia-ml.so.1 lacks nvmlInit_v2 (driver too old); {}", kNotRecorded);
  else if (status = Init_v2(); status != NVML_SUCCESS)
    reason_ = fmt::format("nvmlInit failed: {} ({}); {}", ErrorString(status), int(status), kNotRecorded);
  if (!reason_.empty()) {  // keep the promise: every pointer is nullptr when !available()
#define TB_NVML_CLEAR(name) name = nullptr;
    TB_NVML_FUNCTIONS(TB_NVML_CLEAR)
#undef TB_NVML_CLEAR
  }
}

nvmlDevice_t Nvml::device(int cuda_index) const {
  if (!available()) return nullptr;
  char bus_id[32] = {};  // "0000:19:00.0"; NVML accepts CUDA's form
  if (cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), cuda_index) != cudaSuccess) {
    cudaGetLastError();  // asking must not leave an error behind
    return nullptr;
  }
  nvmlDevice_t dev = nullptr;
  return DeviceGetHandleByPciBusId_v2(bus_id, &dev) == NVML_SUCCESS ? dev : nullptr;
}

nvmlReturn_t Nvml::clocks_event_reasons(nvmlDevice_t dev, unsigned long long* reasons) const {
  if (DeviceGetCurrentClocksEventReasons) return DeviceGetCurrentClocksEventReasons(dev, reasons);
  if (DeviceGetCurrentClocksThrottleReasons) return DeviceGetCurrentClocksThrottleReasons(dev, reasons);
  return NVML_ERROR_FUNCTION_NOT_FOUND;
}

}  // namespace tb::bench
