// Telemetry and GPU info where there may be no GPU, driver or NVML (label cpu): nothing throws, a missing
// NVML says why, and what gpu_info() reports agrees with visible_gpu_count(). Passes with or without GPUs.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>

#include "bench/nvml.h"
#include "bench/sysinfo.h"
#include "bench/telemetry.h"
#include "core/error.h"

namespace tb::bench {
namespace {
using namespace std::chrono_literals;

TEST(Nvml, AvailableExactlyWhenNoReason) {
  const Nvml& nvml = Nvml::get();
  EXPECT_EQ(nvml.available(), nvml.reason().empty());
  if (!nvml.available()) {
    EXPECT_EQ(nvml.DeviceGetPowerUsage, nullptr);
    EXPECT_EQ(nvml.device(0), nullptr);
  }
}

TEST(Nvml, CheckThrowsNvmlError) {
  try {
    TB_CHECK(NVML_ERROR_NOT_SUPPORTED);
    FAIL() << "TB_CHECK did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::nvml);
    EXPECT_FALSE(e.fatal());
    EXPECT_NE(std::string(e.what()).find("NVML_ERROR_NOT_SUPPORTED"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(TB_CHECK(NVML_SUCCESS));
}

TEST(Telemetry, MarksAndSummariesNeverThrow) {
  Telemetry tel({0}, 2ms);
  EXPECT_EQ(tel.available(), tel.reason().empty());
  if (!Nvml::get().available()) {
    EXPECT_FALSE(tel.available());
    EXPECT_NE(tel.reason().find("libnvidia-ml"), std::string::npos) << tel.reason();
  }
  const auto from = tel.mark();
  const auto to = tel.mark();
  EXPECT_LT(from, to);
  const TelemetrySummary s = tel.summary(0, from, to);
  EXPECT_EQ(s.device, 0);
  if (!tel.available()) {
    EXPECT_EQ(s.samples, 0);
    EXPECT_EQ(s.power_w_mean, 0);
    EXPECT_EQ(s.energy_j, 0);
    EXPECT_TRUE(s.throttle.empty());
  }
  if (s.samples == 0) {
    EXPECT_EQ(describe(s), "");
  }
  EXPECT_EQ(tel.summary(7, from, to).samples, 0);   // a device not asked for
  EXPECT_EQ(tel.summary(0, to, from).samples, 0);   // reversed marks
}

TEST(Telemetry, NoDevicesIsUnavailableWithReason) {
  Telemetry tel({});
  EXPECT_FALSE(tel.available());
  EXPECT_FALSE(tel.reason().empty());
  EXPECT_EQ(tel.summary(0, tel.mark(), tel.mark()).samples, 0);
}

TEST(Telemetry, JsonHasFieldNamesAndOmitsWhatWasNotMeasured) {
  TelemetrySummary s;
  s.device = 1;
  s.samples = 12;
  s.seconds = 0.5;
  s.power_w_mean = 600;
  s.energy_j = 300;
  s.throttle_mask = nvmlClocksEventReasonSwPowerCap;
  s.throttle = {"sw_power_cap"};
  const auto j = to_json(s);
  EXPECT_EQ(j["device"], 1);
  EXPECT_EQ(j["samples"], 12);
  EXPECT_EQ(j["seconds"], 0.5);
  EXPECT_EQ(j["power_w_mean"], 600);
  EXPECT_EQ(j["energy_j"], 300);
  EXPECT_EQ(j["throttle"], nlohmann::json::array({"sw_power_cap"}));
  EXPECT_FALSE(j.contains("throttle_mask"));
  EXPECT_FALSE(j.contains("temp_c_max"));  // never read: omitted, not 0
  EXPECT_TRUE(to_json(TelemetrySummary{})["throttle"].is_array());
}

TEST(SysInfo, GpuInfoAgreesWithVisibleCount) {
  const int n = visible_gpu_count();
  ASSERT_GE(n, 0);
  const auto info = gpu_info();
  ASSERT_TRUE(info["gpus"].is_array());
  EXPECT_EQ(info["gpus"].size(), std::size_t(n));
  ASSERT_EQ(info["peer_access"].size(), std::size_t(n));
  for (const auto& row : info["peer_access"]) EXPECT_EQ(row.size(), std::size_t(n));
  EXPECT_TRUE(info.contains("cuda_runtime"));
  ASSERT_TRUE(info["nvml"].is_string());
  EXPECT_EQ(info["nvml"] == "ok", Nvml::get().available());
  EXPECT_EQ(no_gpu_reason().empty(), n > 0) << no_gpu_reason();
  for (int i = 0; i < n; ++i) EXPECT_EQ(info["gpus"][i]["index"], i);
}

// CUDA reads CUDA_VISIBLE_DEVICES once, at initialisation: a fresh process sets it to "".
TEST(SysInfoDeathTest, EmptyCudaVisibleDevicesIsExplained) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // re-executes the binary: CUDA starts afresh
  // With a driver here, the child must blame the variable; without one, the missing driver comes first.
  // (Asked of NVML: this code also runs in the child, before the setenv, and must not start CUDA there.)
  const char* expected = Nvml::get().available() ? "reason: no GPU visible: CUDA_VISIBLE_DEVICES is set to an empty string"
                                                 : "reason: .+";
  EXPECT_EXIT(
      {
        setenv("CUDA_VISIBLE_DEVICES", "", 1);
        const std::string reason = no_gpu_reason();
        std::fprintf(stderr, "reason: %s\n", reason.c_str());
        std::exit(visible_gpu_count() == 0 && gpu_info()["gpus"].empty() ? 0 : 1);
      },
      testing::ExitedWithCode(0), expected);
}

TEST(Telemetry, DescribeSaysWhatWasMeasuredAndWhatLimitedTheClocks) {
  TelemetrySummary s;
  EXPECT_EQ(describe(s), "");  // no samples: nothing to say
  s.samples = 40, s.power_w_mean = 687.6, s.power_w_max = 701.2;
  s.sm_clock_mhz_mean = 1712.4, s.sm_clock_mhz_min = 1485, s.temp_c_max = 61;
  s.throttle = {"sw_power_cap", "hw_slowdown"};
  EXPECT_EQ(describe(s),
            "power 688 W mean (max 701) | SM clock 1712 MHz mean (min 1485) | 61 C max | clocks limited by: "
            "sw_power_cap, hw_slowdown");
  s.power_w_mean = 0, s.temp_c_max = 0, s.throttle.clear();  // unmeasured parts are left out, not printed as 0
  EXPECT_EQ(describe(s), "SM clock 1712 MHz mean (min 1485)");
}

}  // namespace
}  // namespace tb::bench
