// bench/telemetry.cpp: the NVML sampler thread and the summaries between two marks (formulas in telemetry.h).
//   Each tick (every `period`, and on every mark()) reads all devices and appends one Sample per device,
//   all with the same tick number, so Mark = tick and summary(d, from, to) = samples of d with tick in
//   [from, to]. A metric NVML refuses is NaN in the sample and left out of the summary.
//   Power: NVML_FI_DEV_POWER_INSTANT where the driver has it, because nvmlDeviceGetPowerUsage is a 1 s
//   moving average on Ampere and newer and would smear a short case; nvmlDeviceGetPowerUsage otherwise.
//   Memory: 56 bytes per device per tick, ~20 MiB per device-hour at the default 10 ms.
#include "bench/telemetry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <thread>

#include "bench/nvml.h"
#include "core/log.h"

namespace tb::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr double kCounterMinSeconds = 1.0;  // shorter windows: energy = mean power x seconds

// Clocks-event reasons that are slowdowns; gpu_idle, applications_clocks_setting and display_clocks are
// settings or idleness, not slowdowns, and are never reported.
struct Reason {
  unsigned long long bit;
  const char* name;
};
constexpr Reason kSlowdowns[] = {
    {nvmlClocksEventReasonSwPowerCap, "sw_power_cap"},
    {nvmlClocksThrottleReasonHwSlowdown, "hw_slowdown"},
    {nvmlClocksEventReasonSyncBoost, "sync_boost"},
    {nvmlClocksEventReasonSwThermalSlowdown, "sw_thermal"},
    {nvmlClocksThrottleReasonHwThermalSlowdown, "hw_thermal"},
    {nvmlClocksThrottleReasonHwPowerBrakeSlowdown, "hw_power_brake"},
};

struct Sample {
  std::uint64_t tick = 0;
  std::int64_t t_ns = 0;             // steady clock, since the Telemetry was made
  std::uint64_t reasons = 0;         // clocks-event reasons (all bits; filtered in summary())
  double energy_j = std::nan("");    // the device's energy counter
  float power_w = kNaN, sm_mhz = kNaN, mem_mhz = kNaN, temp_c = kNaN;
  std::int32_t slot = 0;             // index into Impl::devs
};

struct Device {
  int cuda = -1;
  nvmlDevice_t handle = nullptr;
  bool instant_power = false;  // NVML_FI_DEV_POWER_INSTANT works on this device
};

// Instantaneous power in W, NaN where the field is missing.
float instant_power_w(const Nvml& nvml, nvmlDevice_t dev) {
  if (!nvml.DeviceGetFieldValues) return kNaN;
  nvmlFieldValue_t f{};
  f.fieldId = NVML_FI_DEV_POWER_INSTANT;
  if (nvml.DeviceGetFieldValues(dev, 1, &f) != NVML_SUCCESS || f.nvmlReturn != NVML_SUCCESS) return kNaN;
  switch (f.valueType) {  // milliwatts
    case NVML_VALUE_TYPE_UNSIGNED_INT: return float(f.value.uiVal) / 1000.f;
    case NVML_VALUE_TYPE_UNSIGNED_LONG: return float(f.value.ulVal) / 1000.f;
    case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: return float(f.value.ullVal) / 1000.f;
    case NVML_VALUE_TYPE_DOUBLE: return float(f.value.dVal) / 1000.f;
    default: return kNaN;
  }
}

Sample read(const Nvml& nvml, const Device& d, std::int32_t slot, Clock::time_point t0) {
  Sample s;
  s.slot = slot;
  s.t_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
  unsigned v = 0;
  unsigned long long u = 0;
  if (d.instant_power)
    s.power_w = instant_power_w(nvml, d.handle);
  else if (nvml.DeviceGetPowerUsage && nvml.DeviceGetPowerUsage(d.handle, &v) == NVML_SUCCESS)
    s.power_w = float(v) / 1000.f;
  if (nvml.DeviceGetTotalEnergyConsumption && nvml.DeviceGetTotalEnergyConsumption(d.handle, &u) == NVML_SUCCESS)
    s.energy_j = double(u) / 1000.0;
  if (nvml.DeviceGetClockInfo && nvml.DeviceGetClockInfo(d.handle, NVML_CLOCK_SM, &v) == NVML_SUCCESS)
    s.sm_mhz = float(v);
  if (nvml.DeviceGetClockInfo && nvml.DeviceGetClockInfo(d.handle, NVML_CLOCK_MEM, &v) == NVML_SUCCESS)
    s.mem_mhz = float(v);
  if (nvml.DeviceGetTemperature && nvml.DeviceGetTemperature(d.handle, NVML_TEMPERATURE_GPU, &v) == NVML_SUCCESS)
    s.temp_c = float(v);
  if (nvml.clocks_event_reasons(d.handle, &u) == NVML_SUCCESS) s.reasons = u;
  return s;
}

}  // namespace

struct Telemetry::Impl {
  const Nvml& nvml = Nvml::get();
  std::vector<Device> devs;  // the requested devices NVML knows
  std::string reason;
  std::chrono::milliseconds period{10};
  Clock::time_point t0 = Clock::now();

  std::mutex batch_mu;  // one tick at a time, so ticks and timestamps grow together
  mutable std::mutex mu;  // guards samples and next_tick
  std::vector<Sample> samples;
  Mark next_tick = 0;

  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stop = false;
  std::thread thread;

  Mark tick() {
    std::lock_guard batch(batch_mu);
    std::vector<Sample> fresh;
    fresh.reserve(devs.size());
    for (std::size_t i = 0; i < devs.size(); ++i) fresh.push_back(read(nvml, devs[i], std::int32_t(i), t0));
    std::lock_guard lock(mu);
    const Mark t = next_tick++;
    for (auto& s : fresh) {
      s.tick = t;
      samples.push_back(s);
    }
    return t;
  }

  void run() {
    auto next = Clock::now();
    std::unique_lock lock(stop_mu);
    while (!stop) {
      lock.unlock();
      try {
        tick();
      } catch (...) {  // out of memory: stop sampling, keep what we have
        return;
      }
      lock.lock();
      next = std::max(next + period, Clock::now());  // fixed rate; after a stall, restart from now
      stop_cv.wait_until(lock, next, [this] { return stop; });
    }
  }
};

Telemetry::Telemetry(std::vector<int> devices, std::chrono::milliseconds period) : impl_(std::make_unique<Impl>()) {
  Impl& im = *impl_;
  im.period = std::max(period, std::chrono::milliseconds(1));
  if (!im.nvml.available()) {
    im.reason = im.nvml.reason();
    static std::once_flag warned;
    if (!devices.empty()) std::call_once(warned, [&] { log::warn("telemetry: {}", im.reason); });
    return;
  }
  for (int d : devices) {
    nvmlDevice_t h = im.nvml.device(d);
    if (!h) {
      log::warn("telemetry: NVML has no GPU with the PCI bus id of CUDA device {}; it is not sampled", d);
      continue;
    }
    im.devs.push_back({d, h, !std::isnan(instant_power_w(im.nvml, h))});
    log::debug("telemetry: CUDA device {} power from {}", d,
               im.devs.back().instant_power ? "NVML_FI_DEV_POWER_INSTANT" : "nvmlDeviceGetPowerUsage (1 s average)");
  }
  if (im.devs.empty()) {
    im.reason = devices.empty() ? "telemetry: no devices to sample" : "telemetry: NVML knows none of the devices";
    return;
  }
  im.thread = std::thread([&im] { im.run(); });
}

Telemetry::~Telemetry() {
  {
    std::lock_guard lock(impl_->stop_mu);
    impl_->stop = true;
  }
  impl_->stop_cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}

bool Telemetry::available() const { return impl_->reason.empty(); }
const std::string& Telemetry::reason() const { return impl_->reason; }

Telemetry::Mark Telemetry::mark() {
  try {
    return impl_->tick();
  } catch (...) {  // out of memory: a mark without samples
    std::lock_guard lock(impl_->mu);
    return impl_->next_tick++;
  }
}

TelemetrySummary Telemetry::summary(int device, Mark from, Mark to) const {
  TelemetrySummary out;
  out.device = device;
  const auto& devs = impl_->devs;
  const auto it = std::find_if(devs.begin(), devs.end(), [&](const Device& d) { return d.cuda == device; });
  if (it == devs.end() || from > to) return out;
  const auto slot = std::int32_t(it - devs.begin());

  std::int64_t t_first = 0, t_last = 0;
  double power_sum = 0, sm_sum = 0, mem_sum = 0, energy_first = NAN, energy_last = NAN;
  int power_n = 0, sm_n = 0, mem_n = 0;
  std::uint64_t reasons = 0;
  {
    std::lock_guard lock(impl_->mu);
    const auto& all = impl_->samples;
    auto s = std::lower_bound(all.begin(), all.end(), from, [](const Sample& x, Mark m) { return x.tick < m; });
    for (; s != all.end() && s->tick <= to; ++s) {
      if (s->slot != slot) continue;
      if (out.samples++ == 0) t_first = s->t_ns;
      t_last = s->t_ns;
      if (!std::isnan(s->power_w)) {
        power_sum += s->power_w, ++power_n;
        out.power_w_max = std::max(out.power_w_max, double(s->power_w));
      }
      if (!std::isnan(s->energy_j)) {
        if (std::isnan(energy_first)) energy_first = s->energy_j;
        energy_last = s->energy_j;
      }
      if (!std::isnan(s->sm_mhz)) {
        out.sm_clock_mhz_min = sm_n == 0 ? s->sm_mhz : std::min(out.sm_clock_mhz_min, double(s->sm_mhz));
        sm_sum += s->sm_mhz, ++sm_n;
      }
      if (!std::isnan(s->mem_mhz)) mem_sum += s->mem_mhz, ++mem_n;
      if (!std::isnan(s->temp_c)) out.temp_c_max = std::max(out.temp_c_max, double(s->temp_c));
      reasons |= s->reasons;
    }
  }
  out.seconds = double(t_last - t_first) * 1e-9;
  if (power_n) out.power_w_mean = power_sum / power_n;
  if (sm_n) out.sm_clock_mhz_mean = sm_sum / sm_n;
  if (mem_n) out.mem_clock_mhz_mean = mem_sum / mem_n;
  // The counter where it moved forward; else mean power x time (counter missing or reset in between).
  // The energy counter advances in coarse steps (seen on H200: 71 J over an 80 ms window at ~600 W), so
  // it is trusted only over windows of a second or more; shorter ones integrate the power samples.
  out.energy_j = energy_last > energy_first && out.seconds >= kCounterMinSeconds ? energy_last - energy_first
                                                                                 : out.power_w_mean * out.seconds;
  for (const auto& r : kSlowdowns) {
    if (reasons & r.bit) {
      out.throttle_mask |= r.bit;
      out.throttle.emplace_back(r.name);
    }
  }
  return out;
}

nlohmann::json to_json(const TelemetrySummary& s) {
  nlohmann::json j{{"device", s.device}, {"samples", s.samples}, {"seconds", s.seconds}};
  const auto put = [&](const char* key, double v) {
    if (v > 0) j[key] = v;  // 0: not measured (NVML missing, or the metric unsupported); omitted, not faked
  };
  put("power_w_mean", s.power_w_mean);
  put("power_w_max", s.power_w_max);
  put("energy_j", s.energy_j);
  put("sm_clock_mhz_min", s.sm_clock_mhz_min);
  put("sm_clock_mhz_mean", s.sm_clock_mhz_mean);
  put("mem_clock_mhz_mean", s.mem_clock_mhz_mean);
  put("temp_c_max", s.temp_c_max);
  j["throttle"] = s.throttle;
  return j;
}

std::string describe(const TelemetrySummary& s) {
  if (s.samples == 0) return "";
  std::vector<std::string> parts;
  if (s.power_w_mean > 0)
    parts.push_back(fmt::format("power {:.0f} W mean (max {:.0f})", s.power_w_mean, s.power_w_max));
  if (s.sm_clock_mhz_mean > 0)
    parts.push_back(fmt::format("SM clock {:.0f} MHz mean (min {:.0f})", s.sm_clock_mhz_mean, s.sm_clock_mhz_min));
  if (s.temp_c_max > 0) parts.push_back(fmt::format("{:.0f} C max", s.temp_c_max));
  if (!s.throttle.empty()) parts.push_back("clocks limited by: " + fmt::format("{}", fmt::join(s.throttle, ", ")));
  return fmt::format("{}", fmt::join(parts, " | "));
}

}  // namespace tb::bench
