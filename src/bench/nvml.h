// bench/nvml.h: NVML loaded at run time. libnvidia-ml.so.1 ships with the driver, not the toolkit, so
// trainbench never links it: Nvml::get() dlopen()s it once, resolves each function with dlsym (pointer
// types from the nvml.h prototypes) and calls nvmlInit_v2 once. Without it, available() is false and
// reason() says why; callers then leave power, clocks and energy out of their records.
// CUDA device index -> NVML handle goes through the PCI bus id (CUDA_VISIBLE_DEVICES reorders CUDA
// devices, NVML always sees all of them). trainbench only reads: no nvml*Set* function is resolved.
#pragma once

#include <nvml.h>

#include <source_location>
#include <string>

namespace tb {
inline bool ok(nvmlReturn_t status) { return status == NVML_SUCCESS; }
[[noreturn]] void raise(nvmlReturn_t status, const char* expr, std::source_location where);
}  // namespace tb

namespace tb::bench {

// X(name): every function resolved, members named without the "nvml" prefix (nvml.DeviceGetName(...)).
// Versioned names are spelled out: nvml.h #defines the plain ones to them.
#define TB_NVML_FUNCTIONS(X)                                                                        \
  X(Init_v2) X(ErrorString) X(SystemGetDriverVersion) X(DeviceGetHandleByPciBusId_v2)              \
  X(DeviceGetName) X(DeviceGetUUID) X(DeviceGetPowerUsage) X(DeviceGetTotalEnergyConsumption)      \
  X(DeviceGetFieldValues) X(DeviceGetClockInfo) X(DeviceGetMaxClockInfo)                            \
  X(DeviceGetApplicationsClock) X(DeviceGetTemperature) X(DeviceGetCurrentClocksEventReasons)      \
  X(DeviceGetCurrentClocksThrottleReasons) X(DeviceGetEnforcedPowerLimit)                           \
  X(DeviceGetPowerManagementDefaultLimit) X(DeviceGetNvLinkState) X(DeviceGetNvLinkRemotePciInfo_v2) \
  X(DeviceGetNvLinkRemoteDeviceType) X(DeviceGetCurrPcieLinkGeneration) X(DeviceGetCurrPcieLinkWidth) \
  X(DeviceGetMaxPcieLinkGeneration) X(DeviceGetMaxPcieLinkWidth) X(DeviceGetEccMode)               \
  X(DeviceGetPersistenceMode) X(DeviceGetComputeMode)

class Nvml {
 public:
  static const Nvml& get();  // loads and initialises on first call (thread-safe); never throws

  bool available() const { return reason_.empty(); }
  const std::string& reason() const { return reason_; }  // "" when available
  // NVML handle of a CUDA device (by PCI bus id), nullptr when unavailable or not found.
  nvmlDevice_t device(int cuda_index) const;
  // Event reasons now (nvmlDeviceGetCurrentClocksEventReasons, or the older ...ThrottleReasons).
  nvmlReturn_t clocks_event_reasons(nvmlDevice_t dev, unsigned long long* reasons) const;

  // Function pointers; nullptr where this driver's library lacks the symbol (or !available()).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // newer nvml.h marks Temperature etc.
#define TB_NVML_MEMBER(name) decltype(&::nvml##name) name = nullptr;
  TB_NVML_FUNCTIONS(TB_NVML_MEMBER)
#undef TB_NVML_MEMBER
#pragma GCC diagnostic pop

 private:
  Nvml();
  std::string reason_;
};

}  // namespace tb::bench
