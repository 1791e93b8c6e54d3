// Telemetry and GPU info on a real GPU (label gpu): device 0 burns FMAs on every SM for ~400 ms between two
// marks; the summary must show real power, an energy counter that agrees with power x time, busy clocks
// and a sane temperature, and gpu_info() must describe the GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>
#include <nlohmann/json.hpp>

#include <bit>
#include <cstdio>

#include "bench/nvml.h"
#include "bench/sysinfo.h"
#include "bench/telemetry.h"
#include "core/error.h"

namespace tb::bench {
namespace {

__device__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Every thread runs dependent FMAs until `ns` have passed; the result is written only if impossible.
__global__ void burn(float* sink, unsigned long long ns) {
  const unsigned long long start = global_ns();
  float a = float(threadIdx.x), b = 0.999f;
  while (global_ns() - start < ns) {
    for (int i = 0; i < 512; ++i) a = fmaf(a, b, 0.001f);
  }
  if (a == -1.f) *sink = a;
}

void burn_for(double seconds) {
  int sms = 0;
  TB_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  float* sink = nullptr;
  TB_CHECK(cudaMalloc(&sink, sizeof(float)));
  burn<<<sms * 8, 256>>>(sink, static_cast<unsigned long long>(seconds * 1e9));
  TB_CHECK_LAUNCH();
  TB_CHECK(cudaDeviceSynchronize());
  TB_CHECK(cudaFree(sink));
}

TEST(TelemetryGpu, BusyKernelDrawsPowerAndEnergy) {
  ASSERT_GT(visible_gpu_count(), 0) << no_gpu_reason();
  TB_CHECK(cudaSetDevice(0));
  Telemetry tel({0});
  ASSERT_TRUE(tel.available()) << tel.reason();
  burn_for(1.0);  // leave idle clocks and power behind before measuring
  const auto from = tel.mark();
  burn_for(1.5);  // over 1 s: energy comes from the counter, checked against power x time below
  const auto to = tel.mark();
  const TelemetrySummary s = tel.summary(0, from, to);
  std::printf("%s\n", to_json(s).dump().c_str());

  EXPECT_GE(s.samples, 5);
  EXPECT_GT(s.seconds, 1.4);
  EXPECT_GT(s.power_w_mean, 50);
  EXPECT_LT(s.power_w_mean, 1500);
  EXPECT_GE(s.power_w_max, s.power_w_mean);
  EXPECT_GT(s.energy_j, 0);
  const double expected_j = s.power_w_mean * s.seconds;
  EXPECT_NEAR(s.energy_j, expected_j, 0.2 * expected_j) << "energy counter vs mean power x time";
  EXPECT_GT(s.sm_clock_mhz_mean, 200);
  EXPECT_LT(s.sm_clock_mhz_mean, 3000);
  EXPECT_LE(s.sm_clock_mhz_min, s.sm_clock_mhz_mean);
  EXPECT_GT(s.mem_clock_mhz_mean, 0);
  EXPECT_GT(s.temp_c_max, 10);
  EXPECT_LT(s.temp_c_max, 110);
  EXPECT_EQ(s.throttle.size(), std::size_t(std::popcount(s.throttle_mask)));
}

TEST(TelemetryGpu, SamplerRunsBetweenMarks) {
  ASSERT_GT(visible_gpu_count(), 0) << no_gpu_reason();
  Telemetry tel({0}, std::chrono::milliseconds(5));
  ASSERT_TRUE(tel.available()) << tel.reason();
  const auto from = tel.mark();
  burn_for(0.2);
  const auto to = tel.mark();
  EXPECT_GT(to - from, 10u);  // ~40 sampler ticks at 5 ms, besides the two marks
  EXPECT_EQ(tel.summary(0, from, to).samples, int(to - from + 1));
}

TEST(SysInfoGpu, GpuInfoDescribesDevice0) {
  ASSERT_GT(visible_gpu_count(), 0) << no_gpu_reason();
  const auto info = gpu_info();
  std::printf("%s\n", info.dump(2).c_str());
  EXPECT_EQ(info["nvml"], "ok");
  EXPECT_TRUE(info.contains("driver"));
  EXPECT_TRUE(info.contains("cuda_driver"));
  ASSERT_GE(info["gpus"].size(), 1u);
  const auto& g = info["gpus"][0];
  EXPECT_FALSE(g.value("name", "").empty());
  EXPECT_EQ(g.value("uuid", "").rfind("GPU-", 0), 0u);
  EXPECT_GT(g.value("sms", 0), 0);
  EXPECT_GT(g.value("memory_gib", 0.0), 1.0);
  ASSERT_TRUE(g.contains("power"));
  EXPECT_GT(g["power"].value("limit_w", 0.0), 50.0);
  ASSERT_TRUE(g.contains("clocks"));
  EXPECT_GT(g["clocks"].value("sm_max_mhz", 0), 200);
  EXPECT_TRUE(info["peer_access"][0][0].get<bool>());
}

}  // namespace
}  // namespace tb::bench
