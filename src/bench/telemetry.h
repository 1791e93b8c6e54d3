// bench/telemetry.h: NVML sampler. A thread samples power, SM/memory clocks, temperature, throttle
// reasons and the energy counter of the given CUDA devices every `period`; a case brackets itself
// with two marks and asks for the summary between them:
//   power_w_mean = mean of samples, energy_j = energy counter(to) - energy counter(from) over windows of
//   1 s or more (the counter moves in coarse steps), else and where the counter is missing power_w_mean x
//   seconds; throttle = union of the
//   reasons seen, minus idle and application-clock settings (not slowdowns).
// NVML is loaded at run time (dlopen libnvidia-ml.so.1); without it available() is false and
// reason() says why; nothing throws for a missing NVML.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tb::bench {

struct TelemetrySummary {
  int device = -1;  // CUDA device index
  int samples = 0;
  double seconds = 0;
  double power_w_mean = 0, power_w_max = 0;
  double energy_j = 0;
  double sm_clock_mhz_min = 0, sm_clock_mhz_mean = 0;
  double mem_clock_mhz_mean = 0;
  double temp_c_max = 0;
  std::uint64_t throttle_mask = 0;  // NVML clocks-event reasons seen (slowdowns only)
  std::vector<std::string> throttle;  // their names: "sw_power_cap", "hw_slowdown", "sw_thermal", ...
};
nlohmann::json to_json(const TelemetrySummary& s);
// One line for people, the unmeasured parts left out: "power 688 W mean (max 701) | SM clock 1712 MHz mean (min 1485)
// | 61 C max | clocks limited by: sw_power_cap" ("" without samples).
std::string describe(const TelemetrySummary& s);

class Telemetry {
 public:
  using Mark = std::uint64_t;
  explicit Telemetry(std::vector<int> devices, std::chrono::milliseconds period = std::chrono::milliseconds(10));
  ~Telemetry();
  Telemetry(const Telemetry&) = delete;
  Telemetry& operator=(const Telemetry&) = delete;

  bool available() const;
  const std::string& reason() const;  // why not available ("" when available)
  Mark mark();                        // takes a sample of every device now; returns its position
  TelemetrySummary summary(int device, Mark from, Mark to) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tb::bench
