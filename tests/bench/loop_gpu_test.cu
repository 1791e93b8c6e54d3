// Tests bench/loop on a GPU: a kernel that spins for a known time is timed at that time (per
// iteration, held or not), iterations are counted right, and several devices take the max.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include "bench/loop.h"
#include "bench/sysinfo.h"
#include "core/error.h"

namespace {
__global__ void spin_ns(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}
}  // namespace

TEST(LoopGpu, TimesAKnownDuration) {
  if (tb::bench::visible_gpu_count() == 0) GTEST_SKIP() << tb::bench::no_gpu_reason();
  cudaStream_t s;
  TB_CHECK(cudaStreamCreate(&s));
  for (bool hold : {true, false}) {
    tb::bench::LoopSpec spec;
    spec.warmup = 2;
    spec.iters = 70;  // more than one held batch
    spec.hold = hold;
    int calls = 0;
    const auto t = tb::bench::time_stream(spec, 0, s, [&](int) {
      ++calls;
      spin_ns<<<1, 1, 0, s>>>(500'000);  // 0.5 ms
    });
    EXPECT_EQ(calls, 72);
    ASSERT_EQ(t.ms.size(), 70u);
    const auto sum = t.summary();
    EXPECT_NEAR(sum.median, 0.5, 0.05) << "hold=" << hold;
    EXPECT_GE(sum.min, 0.49);
  }
  TB_CHECK(cudaStreamDestroy(s));
}

TEST(LoopGpu, L2FlushStaysOutOfTheTiming) {
  if (tb::bench::visible_gpu_count() == 0) GTEST_SKIP() << tb::bench::no_gpu_reason();
  cudaStream_t s;
  TB_CHECK(cudaStreamCreate(&s));
  tb::bench::LoopSpec spec;
  spec.iters = 10;
  spec.flush_l2 = true;
  const auto t = tb::bench::time_stream(spec, 0, s, [&](int) { spin_ns<<<1, 1, 0, s>>>(200'000); });
  EXPECT_NEAR(t.summary().median, 0.2, 0.03);
  TB_CHECK(cudaStreamDestroy(s));
}

TEST(LoopMultiGpu, IterationTimeIsTheMaxOverDevices) {
  if (tb::bench::visible_gpu_count() < 2) GTEST_SKIP() << "needs 2 GPUs";
  const int devs[] = {0, 1};
  cudaStream_t streams[2];
  for (int d : devs) {
    TB_CHECK(cudaSetDevice(d));
    TB_CHECK(cudaStreamCreate(&streams[d]));
  }
  tb::bench::LoopSpec spec;
  spec.iters = 10;
  const auto t = tb::bench::time_streams(spec, devs, streams, [&](int) {
    for (int d : devs) {
      TB_CHECK(cudaSetDevice(d));
      spin_ns<<<1, 1, 0, streams[d]>>>(d == 0 ? 200'000 : 600'000);
    }
  });
  EXPECT_NEAR(t.summary().median, 0.6, 0.05);
  for (int d : devs) {
    TB_CHECK(cudaSetDevice(d));
    TB_CHECK(cudaStreamDestroy(streams[d]));
  }
}

TEST(LoopGpu, TelemetryMarksBracketTheTimedIterations) {
  if (tb::bench::visible_gpu_count() == 0) GTEST_SKIP() << tb::bench::no_gpu_reason();
  tb::bench::Telemetry tel({0});
  if (!tel.available()) GTEST_SKIP() << tel.reason();
  cudaStream_t s;
  TB_CHECK(cudaStreamCreate(&s));
  tb::bench::LoopSpec spec;
  spec.warmup = 100;  // 100 ms of warmup, outside the window
  spec.iters = 200;   // 200 ms timed
  spec.telemetry = &tel;
  const auto t = tb::bench::time_stream(spec, 0, s, [&](int) { spin_ns<<<1, 1, 0, s>>>(1'000'000); });
  ASSERT_TRUE(t.marked);
  const auto sum = tel.summary(0, t.telemetry_from, t.telemetry_to);
  EXPECT_NEAR(sum.seconds, 0.2, 0.05);  // the window is the timed part, not the warmup
  EXPECT_GE(sum.samples, 10);
  TB_CHECK(cudaStreamDestroy(s));
}
