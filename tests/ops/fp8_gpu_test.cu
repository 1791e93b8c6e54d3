// Tests ops/cuda/fp8 against the host conversions of core/dtype (bit-exact): amax of random and crafted tensors
// (zeros, denormals, NaN propagates); current-scaling casts to e4m3 and e5m2, plain and with the transpose, on shapes
// that are and are not multiples of the 32 x 32 tile, with scale = fp8_max / amax written back; saturation when a
// delayed scale overflows the format; the amax recorded during a delayed cast; the delayed-scaling update (history
// roll, max / most_recent, margin); the dequantisation back to bf16 (every code of both formats, whole tensors and a
// column range of a wider buffer); stochastic rounding (every code one of the value's two FP8 neighbours, unbiased
// where nearest rounding is not, the same codes from the same inputs and from every kernel, others from another scale).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "bench/sysinfo.h"
#include "core/dtype.h"
#include "core/error.h"
#include "ops/cuda/context.h"
#include "ops/cuda/fp8.h"

namespace {

using tb::DType;
using namespace tb::ops;

#define SKIP_WITHOUT_GPU() \
  if (tb::bench::visible_gpu_count() == 0) GTEST_SKIP() << tb::bench::no_gpu_reason()

std::vector<std::uint16_t> random_bf16(std::size_t n, float amp, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, amp);
  std::vector<std::uint16_t> v(n);
  for (auto& x : v) x = tb::float_to_bf16(nd(rng));
  return v;
}

std::uint8_t host_fp8(float v, DType t) { return t == DType::e4m3 ? tb::float_to_e4m3(v, true) : tb::float_to_e5m2(v, true); }

struct Dev {
  DeviceContext dc{0};
  template <class T>
  DeviceBuffer up(const std::vector<T>& h) {
    DeviceBuffer b(0, std::max<std::size_t>(h.size() * sizeof(T), 16));
    cudaMemcpyAsync(b.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice, dc.stream());
    dc.synchronize();
    return b;
  }
  template <class T>
  std::vector<T> down(const DeviceBuffer& b, std::size_t n) {
    std::vector<T> h(n);
    cudaMemcpyAsync(h.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost, dc.stream());
    dc.synchronize();
    return h;
  }
};

float host_amax(const std::vector<std::uint16_t>& x) {
  float m = 0;
  for (auto b : x) {
    const float f = tb::bf16_to_float(b);
    if (std::isnan(f)) return f;
    m = std::max(m, std::fabs(f));
  }
  return m;
}

TEST(Fp8, AmaxOfRandomAndCraftedTensors) {
  SKIP_WITHOUT_GPU();
  Dev d;
  Fp8Scales sc(0, 1, 1, d.dc.stream());
  const Fp8Meta m = sc.meta(0);
  for (std::size_t n : {std::size_t(1), std::size_t(7), std::size_t(1000003)}) {
    auto x = random_bf16(n, 3.0f, unsigned(n));
    if (n > 100) x[n / 2] = tb::float_to_bf16(-1234.5f);  // the max is negative
    auto buf = d.up(x);
    cudaMemsetAsync(m.amax, 0, 4, d.dc.stream());
    fp8_amax(buf.as<__nv_bfloat16>(), n, m.amax, d.dc.stream());
    float got = 0;
    cudaMemcpy(&got, m.amax, 4, cudaMemcpyDeviceToHost);
    EXPECT_EQ(got, host_amax(x)) << n;
  }
  std::vector<std::uint16_t> zeros(4096, 0), denorm(4096, 0x0001), with_nan = random_bf16(4096, 1.0f, 9);
  with_nan[100] = 0x7fc0;
  for (const auto* v : {&zeros, &denorm, &with_nan}) {
    auto buf = d.up(*v);
    cudaMemsetAsync(m.amax, 0, 4, d.dc.stream());
    fp8_amax(buf.as<__nv_bfloat16>(), v->size(), m.amax, d.dc.stream());
    float got = 0;
    cudaMemcpy(&got, m.amax, 4, cudaMemcpyDeviceToHost);
    if (v == &with_nan)
      EXPECT_TRUE(std::isnan(got));
    else
      EXPECT_EQ(got, host_amax(*v));
  }
}

void check_cast(DType t, std::int64_t rows, std::int64_t cols, bool transpose) {
  Dev d;
  Fp8Scales sc(0, 1, 1, d.dc.stream());
  const Fp8Meta m = sc.meta(0);
  const std::size_t n = std::size_t(rows * cols);
  auto x = random_bf16(n, 5.0f, unsigned(rows * 31 + cols));
  x[0] = 0;            // zero
  x[1 % n] = 0x0001;   // a bf16 denormal: underflows in fp8 after scaling?
  auto xb = d.up(x);
  DeviceBuffer q(0, n + 16), qt(0, n + 16);
  cudaMemsetAsync(m.amax, 0, 4, d.dc.stream());
  fp8_amax(xb.as<__nv_bfloat16>(), n, m.amax, d.dc.stream());
  Fp8CastArgs a;
  a.x = xb.as<__nv_bfloat16>(), a.rows = rows, a.cols = cols, a.type = t;
  a.q = q.get(), a.qt = transpose ? qt.get() : nullptr;
  a.amax_in = m.amax, a.scale = m.scale, a.scale_inv = m.scale_inv;
  fp8_cast(a, d.dc.stream());
  const auto gq = d.down<std::uint8_t>(q, n), gqt = d.down<std::uint8_t>(qt, n);
  float scale = 0, scale_inv = 0;
  cudaMemcpy(&scale, m.scale, 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(&scale_inv, m.scale_inv, 4, cudaMemcpyDeviceToHost);
  const float want_scale = fp8_scale_for(host_amax(x), fp8_max(t), 0);
  ASSERT_EQ(scale, want_scale);
  ASSERT_EQ(scale_inv, 1.0f / want_scale);
  std::size_t bad = 0;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::uint8_t want = host_fp8(tb::bf16_to_float(x[std::size_t(r * cols + c)]) * want_scale, t);
      bad += gq[std::size_t(r * cols + c)] != want;
      if (transpose) bad += gqt[std::size_t(c * rows + r)] != want;
    }
  EXPECT_EQ(bad, 0u) << dtype_name(t) << " " << rows << "x" << cols << (transpose ? " transpose" : "");
}

TEST(Fp8, CurrentScalingCastsAreBitExact) {
  SKIP_WITHOUT_GPU();
  for (DType t : {DType::e4m3, DType::e5m2}) {
    check_cast(t, 256, 512, true);  // the vector kernel (8 x 8 blocks per thread)
    check_cast(t, 224, 320, true);  // ... 35 warp tiles: the last block's 5 warps idle
    check_cast(t, 96, 160, true);   // 32 x 32 tiles
    check_cast(t, 33, 50, true);  // edge tiles
    check_cast(t, 7, 9, false);   // scalar tail
    check_cast(t, 1024, 4096, false);
  }
}

// The FP8 value of a code (host).
float host_value(std::uint8_t c, DType t) { return t == DType::e4m3 ? tb::e4m3_to_float(c) : tb::e5m2_to_float(c); }

// Stochastic rounding with a delayed scale of 1 (so v * scale = v exactly) on three kernels (the vector kernel, 32 x 32
// tiles, q alone). Inputs: random values over many binades of both signs, values on the FP8 grid, values in the
// subnormal range, 0 and NaN, then a block of one repeated value whose nearest rounding is biased.
TEST(Fp8, StochasticRoundingIsUnbiasedAndRepeatable) {
  SKIP_WITHOUT_GPU();
  Dev d;
  Fp8Scales sc(0, 1, 1, d.dc.stream());
  const Fp8Meta m = sc.meta(0);
  for (DType t : {DType::e4m3, DType::e5m2}) {
    const float sub = t == DType::e4m3 ? 0x1p-9f : 0x1p-16f;  // the subnormal spacing
    const float same = t == DType::e4m3 ? 1.0625f : 1.125f;   // half a step above 1: nearest rounds to 1 (even)
    const float step = t == DType::e4m3 ? 0.125f : 0.25f;     // the spacing at 1
    std::vector<std::uint8_t> tiles;                            // the 256 x 512 codes of the 64 x 64 tiles
    for (auto [rows, cols, transpose] : {std::tuple{256, 512, true}, std::tuple{96, 160, true},
                                         std::tuple{256, 512, false}}) {
      const std::size_t n = std::size_t(rows) * cols, half = n / 2;
      std::mt19937 rng(unsigned(rows + cols));
      std::uniform_real_distribution<float> ue(-20.0f, 8.0f), u01(0.0f, 1.0f);
      std::vector<std::uint16_t> x(n);
      for (std::size_t i = 0; i < half; ++i) {
        const float mag = std::exp2(ue(rng)) * (i % 2 ? -1.0f : 1.0f);
        x[i] = tb::float_to_bf16(i % 7 == 0 ? host_value(host_fp8(mag, t), t)      // on the grid
                                 : i % 7 == 1 ? sub * 4.0f * u01(rng) : mag);       // subnormal range
      }
      x[0] = 0, x[1] = 0x7fc0;  // zero, NaN
      for (std::size_t i = half; i < n; ++i) x[i] = tb::float_to_bf16(same);
      ASSERT_EQ(tb::bf16_to_float(x[n - 1]), same);
      const auto xb = d.up(x);
      DeviceBuffer q(0, n + 16), qt(0, n + 16);
      const auto cast = [&](float scale) {
        cudaMemcpy(m.scale, &scale, 4, cudaMemcpyHostToDevice);
        Fp8CastArgs a;
        a.x = xb.as<__nv_bfloat16>(), a.rows = rows, a.cols = cols, a.type = t, a.stochastic = true;
        a.q = q.get(), a.qt = transpose ? qt.get() : nullptr, a.scale = m.scale, a.scale_inv = m.scale_inv;
        fp8_cast(a, d.dc.stream());
        return d.down<std::uint8_t>(q, n);
      };
      const auto got = cast(1.0f);
      const std::string where = std::string(dtype_name(t)) + " " + std::to_string(rows) + "x" + std::to_string(cols) +
                                (transpose ? " transpose" : "");
      if (transpose) {
        const auto gqt = d.down<std::uint8_t>(qt, n);
        std::size_t t_bad = 0;
        for (int r = 0; r < rows; ++r)
          for (int c = 0; c < cols; ++c) t_bad += gqt[std::size_t(c) * rows + r] != got[std::size_t(r) * cols + c];
        EXPECT_EQ(t_bad, 0u) << where;
      }
      EXPECT_EQ(cast(1.0f), got) << where << ": the same inputs, the same codes";
      std::size_t bad = 0, not_nearest = 0, inexact = 0;
      for (std::size_t i = 0; i < half; ++i) {
        const float v = tb::bf16_to_float(x[i]);
        if (std::isnan(v)) {
          EXPECT_TRUE(std::isnan(host_value(got[i], t))) << where;
          continue;
        }
        const std::uint8_t nearest = host_fp8(v, t);
        const float vn = host_value(nearest, t);
        if (vn == v) {
          bad += got[i] != nearest;
          continue;
        }
        ++inexact;
        // The other neighbour: one magnitude code away from nearest, on v's side of it (sign bit kept).
        const std::uint8_t other = std::fabs(vn) < std::fabs(v) ? nearest + 1 : nearest - 1;
        bad += got[i] != nearest && got[i] != other;
        not_nearest += got[i] == other;
      }
      EXPECT_EQ(bad, 0u) << where;
      EXPECT_GT(inexact, half / 2) << where;
      EXPECT_GT(not_nearest, inexact / 10) << where;  // (~1/4 expected; nearest rounding: none)
      // The repeated value: the mean of its codes is the value (to 5 standard errors); nearest rounding's is 1.
      double sum = 0;
      for (std::size_t i = half; i < n; ++i) sum += host_value(got[i], t);
      const double mean = sum / double(n - half), se = 0.5 * step / std::sqrt(double(n - half));
      EXPECT_NEAR(mean, same, 5 * se) << where;
      EXPECT_GT(std::fabs(1.0 - same), 20 * se) << where;
      // Another scale draws anew: about half the repeated value's codes change.
      const auto other_scale = cast(1.0f + 0x1p-20f);
      std::size_t changed = 0;
      for (std::size_t i = half; i < n; ++i) changed += other_scale[i] != got[i];
      EXPECT_GT(changed, (n - half) / 4) << where;
      if (rows == 256 && transpose) tiles = got;
      if (!transpose) EXPECT_EQ(got, tiles) << where << ": q alone draws as the vector kernel does";
    }
  }
}

TEST(Fp8, DelayedCastSaturatesAndRecordsAmax) {
  SKIP_WITHOUT_GPU();
  Dev d;
  Fp8Scales sc(0, 2, 4, d.dc.stream());
  const Fp8Meta m = sc.meta(1);
  auto x = random_bf16(64 * 64, 10.0f, 5);
  x[7] = 0x7fc0;  // NaN stays NaN
  auto xb = d.up(x);
  const float big = 1000.0f;  // way too large: most values saturate to +-448
  cudaMemcpy(m.scale, &big, 4, cudaMemcpyHostToDevice);
  cudaMemsetAsync(m.amax, 0, 4, d.dc.stream());
  DeviceBuffer q(0, x.size());
  Fp8CastArgs a;
  a.x = xb.as<__nv_bfloat16>(), a.rows = 64, a.cols = 64, a.type = DType::e4m3, a.q = q.get();
  a.scale = m.scale, a.scale_inv = m.scale_inv, a.amax_out = m.amax;
  fp8_cast(a, d.dc.stream());
  const auto gq = d.down<std::uint8_t>(q, x.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < x.size(); ++i) bad += gq[i] != host_fp8(tb::bf16_to_float(x[i]) * big, DType::e4m3);
  EXPECT_EQ(bad, 0u);
  float amax = 0, inv = 0;
  cudaMemcpy(&amax, m.amax, 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(&inv, m.scale_inv, 4, cudaMemcpyDeviceToHost);
  EXPECT_TRUE(std::isnan(amax));  // the NaN is recorded
  EXPECT_EQ(inv, 1.0f / big);
}

TEST(Fp8, DelayedUpdateRollsTheHistory) {
  SKIP_WITHOUT_GPU();
  Dev d;
  Fp8Scales sc(0, 3, 3, d.dc.stream());
  const float amaxes[3][3] = {{2.0f, 8.0f, 0.0f}, {1.0f, 0.5f, 0.0f}, {0.0f, 0.0f, 0.0f}};  // per step, per tensor
  for (int step = 0; step < 3; ++step) {
    for (int t = 0; t < 3; ++t) cudaMemcpy(sc.meta(t).amax, &amaxes[step][t], 4, cudaMemcpyHostToDevice);
    fp8_update_scales(sc, DType::e4m3, AmaxAlgo::max, 1, d.dc.stream());
  }
  d.dc.synchronize();
  auto read = [](const float* p) {
    float v = 0;
    cudaMemcpy(&v, p, 4, cudaMemcpyDeviceToHost);
    return v;
  };
  // tensor 0: history [0, 1, 2] -> max 2; tensor 1: [0, 0.5, 8] -> 8; tensor 2: all zeros -> scale unchanged (1)
  EXPECT_EQ(read(sc.meta(0).scale), fp8_scale_for(2.0f, 448.0f, 1));
  EXPECT_EQ(read(sc.meta(1).scale), fp8_scale_for(8.0f, 448.0f, 1));
  EXPECT_EQ(read(sc.meta(2).scale), 1.0f);
  EXPECT_EQ(read(sc.meta(0).history + 2), 2.0f);
  EXPECT_EQ(read(sc.meta(0).amax), 0.0f);
  fp8_update_scales(sc, DType::e4m3, AmaxAlgo::most_recent, 0, d.dc.stream());  // amax 0 now: unchanged
  EXPECT_EQ(read(sc.meta(1).scale), fp8_scale_for(8.0f, 448.0f, 1));
}

// y = bf16(fp8 value * scale_inv), bit for bit as the host rounds it (NaN codes: NaN); outside the block untouched.
void check_dequantize(DType t, std::int64_t rows, std::int64_t cols, std::int64_t ld_q, std::int64_t col0,
                      std::int64_t ld_y) {
  Dev d;
  std::vector<std::uint8_t> q(std::size_t(rows * ld_q));
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = std::uint8_t(i * 37 + 11);  // every code, in a scrambled order
  const std::vector<std::uint16_t> sentinel(std::size_t(rows * ld_y), 0x1234);
  const float scale_inv = 1.0f / 3.7f;  // not a power of two: the product rounds
  auto qb = d.up(q), yb = d.up(sentinel), sb = d.up(std::vector<float>{scale_inv});
  Fp8DequantArgs a;
  a.q = qb.as<std::uint8_t>() + col0, a.ld_q = ld_q, a.y = yb.as<__nv_bfloat16>() + col0, a.ld_y = ld_y;
  a.rows = rows, a.cols = cols, a.type = t, a.scale_inv = sb.as<float>();
  fp8_dequantize(a, d.dc.stream());
  const auto y = d.down<std::uint16_t>(yb, sentinel.size());
  std::size_t bad = 0;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < ld_y; ++c) {
      const std::uint16_t got = y[std::size_t(r * ld_y + c)];
      if (c < col0 || c >= col0 + cols) {
        bad += got != 0x1234;
        continue;
      }
      const std::uint8_t code = q[std::size_t(r * ld_q + c)];
      const float v = (t == DType::e4m3 ? tb::e4m3_to_float(code) : tb::e5m2_to_float(code)) * scale_inv;
      bad += std::isnan(v) ? !std::isnan(tb::bf16_to_float(got)) : got != tb::float_to_bf16(v);
    }
  EXPECT_EQ(bad, 0u) << dtype_name(t) << " " << rows << "x" << cols << " at column " << col0;
}

TEST(Fp8, DequantizeIsBitExactOnWholeTensorsAndColumnRanges) {
  SKIP_WITHOUT_GPU();
  for (DType t : {DType::e4m3, DType::e5m2}) {
    check_dequantize(t, 64, 256, 256, 0, 256);      // contiguous: every code many times
    check_dequantize(t, 3, 8, 8, 0, 8);             // one vector per row
    check_dequantize(t, 100, 128, 512, 256, 512);   // the dk block of a fused [rows, 512] buffer (same strides)
  }
  Dev d;
  Fp8DequantArgs a;
  a.rows = 4, a.cols = 12, a.ld_q = 12, a.ld_y = 12;  // 12 columns: not whole 8-element vectors
  DeviceBuffer q(0, 64), y(0, 128), s(0, 4);
  a.q = q.get(), a.y = y.as<__nv_bfloat16>(), a.scale_inv = s.as<float>();
  EXPECT_THROW(fp8_dequantize(a, d.dc.stream()), tb::Error);
}

}  // namespace
