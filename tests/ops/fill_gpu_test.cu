// Tests ops/cuda/fill: fill_normal against the host formula normal_value (every element, fp32 tolerance for the
// device's logf/cosf/sqrtf) and its moments (mean, std within 1% at 1M draws), drawn in two pieces bit-identical;
// cast_f32_to_bf16 bit-exact against the host conversion float_to_bf16 on random values including specials (ties,
// denormals, inf, NaN).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "bench/sysinfo.h"
#include "core/dtype.h"
#include "ops/cuda/context.h"
#include "ops/cuda/fill.h"

namespace {

#define SKIP_WITHOUT_GPU() \
  if (tb::bench::visible_gpu_count() == 0) GTEST_SKIP() << tb::bench::no_gpu_reason()

TEST(FillNormal, MatchesTheHostFormulaAndHasTheRightMoments) {
  SKIP_WITHOUT_GPU();
  tb::ops::DeviceContext dc(0);
  const std::size_t n = (1 << 20) + 7;
  const float mean = 0.5f, std = 0.02f;
  tb::ops::DeviceBuffer buf(0, n * sizeof(float));
  tb::ops::fill_normal(buf.as<float>(), n, 42, mean, std, dc.stream());
  std::vector<float> got(n);
  cudaMemcpyAsync(got.data(), buf.get(), n * sizeof(float), cudaMemcpyDeviceToHost, dc.stream());
  dc.synchronize();
  double s = 0, s2 = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float want = mean + std * tb::ops::normal_value(42, i);
    ASSERT_NEAR(got[i], want, 1e-5 * std * (1 + std::abs(tb::ops::normal_value(42, i)))) << "element " << i;
    s += got[i];
    s2 += double(got[i] - mean) * double(got[i] - mean);
  }
  EXPECT_NEAR(s / double(n), mean, 0.01 * std);
  EXPECT_NEAR(std::sqrt(s2 / double(n)), std, 0.01 * std);
  // Drawn in pieces (`first`), the stream is the same, bit for bit.
  const std::size_t split = 300001;
  tb::ops::fill_normal(buf.as<float>(), split, 42, mean, std, dc.stream());
  tb::ops::fill_normal(buf.as<float>() + split, n - split, 42, mean, std, dc.stream(), split);
  std::vector<float> pieces(n);
  cudaMemcpyAsync(pieces.data(), buf.get(), n * sizeof(float), cudaMemcpyDeviceToHost, dc.stream());
  dc.synchronize();
  EXPECT_EQ(std::memcmp(pieces.data(), got.data(), n * sizeof(float)), 0);
}

TEST(CastF32ToBf16, BitExactAgainstTheHostConversion) {
  SKIP_WITHOUT_GPU();
  tb::ops::DeviceContext dc(0);
  std::mt19937 rng(7);
  std::vector<float> host(100003);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (float& v : host) {
    const std::uint32_t b = bits(rng);
    std::memcpy(&v, &b, sizeof v);  // every exponent: denormals, inf, NaN, ties
  }
  host[0] = 1.0f + 0x1p-8f;  // a tie: rounds to even
  host[1] = std::numeric_limits<float>::denorm_min();
  host[2] = -std::numeric_limits<float>::infinity();
  tb::ops::DeviceBuffer src(0, host.size() * sizeof(float)), dst(0, host.size() * 2);
  cudaMemcpyAsync(src.get(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice, dc.stream());
  tb::ops::cast_f32_to_bf16(dst.get(), src.as<float>(), host.size(), dc.stream());
  std::vector<std::uint16_t> got(host.size());
  cudaMemcpyAsync(got.data(), dst.get(), got.size() * 2, cudaMemcpyDeviceToHost, dc.stream());
  dc.synchronize();
  for (std::size_t i = 0; i < host.size(); ++i) {
    if (std::isnan(host[i])) {
      EXPECT_TRUE(std::isnan(tb::bf16_to_float(got[i]))) << i;
    } else {
      ASSERT_EQ(got[i], tb::float_to_bf16(host[i])) << "element " << i << " value " << host[i];
    }
  }
}

}  // namespace
