// Tests ops/cpu/adamw: AdamW steps against hand-computed values (bias correction, decoupled weight decay,
// decay mask), grad_norm and clip_grad_norm exactly, convergence on a quadratic, bad input.
#include "ops/cpu/adamw.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/error.h"

namespace cpu = tb::ops::cpu;

namespace {
cpu::AdamWParams hand_params() {
  cpu::AdamWParams hp;
  hp.lr = 0.1;
  hp.beta1 = 0.9;
  hp.beta2 = 0.999;
  hp.eps = 1e-8;
  hp.weight_decay = 0.1;
  return hp;
}
}  // namespace

TEST(AdamW, TwoStepsMatchHandComputedValues) {
  // Step 1, g = 0.5: m = 0.05, v = 0.00025; mhat = 0.05 / 0.1 = 0.5, vhat = 0.00025 / 0.001 = 0.25;
  //   p = 1 - 0.1 * (0.5 / (0.5 + 1e-8) + 0.1 * 1) = 0.890000001999999960...
  //   (without bias correction the update would be 0.05 / sqrt(0.00025) = 3.16, p = 0.67)
  // Step 2, g = -0.25: m = 0.045 - 0.025 = 0.02, v = 0.00024975 + 0.0000625 = 0.00031225;
  //   mhat = 0.02 / 0.19, vhat = 0.00031225 / 0.001999; p = 0.854466298687846162... (Decimal, 40 digits)
  std::vector<double> p = {1.0}, m = {0.0}, v = {0.0};
  const auto hp = hand_params();
  cpu::adamw_step(p, std::vector<double>{0.5}, m, v, hp, 1);
  EXPECT_NEAR(m[0], 0.05, 1e-16);
  EXPECT_NEAR(v[0], 0.00025, 1e-18);
  EXPECT_NEAR(p[0], 0.8900000019999999600, 1e-15);
  cpu::adamw_step(p, std::vector<double>{-0.25}, m, v, hp, 2);
  EXPECT_NEAR(m[0], 0.02, 1e-16);
  EXPECT_NEAR(v[0], 0.00031225, 1e-18);
  EXPECT_NEAR(p[0], 0.8544662986878461630, 1e-15);
}

TEST(AdamW, FloatMatchesDoubleToFloatRounding) {
  std::vector<float> pf = {1.0f, -2.0f, 0.5f}, mf(3, 0.0f), vf(3, 0.0f);
  std::vector<double> pd = {1.0, -2.0, 0.5}, md(3, 0.0), vd(3, 0.0);
  const std::vector<float> gf = {0.5f, -0.125f, 2.0f};
  const std::vector<double> gd = {0.5, -0.125, 2.0};
  for (int t = 1; t <= 3; ++t) {
    cpu::adamw_step(pf, gf, mf, vf, hand_params(), t);
    cpu::adamw_step(pd, gd, md, vd, hand_params(), t);
  }
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(pf[i], pd[i], 4e-7 * std::fabs(pd[i])) << i;
}

TEST(AdamW, ZeroGradientLeavesOnlyDecoupledWeightDecay) {
  // mhat = 0, so p -= lr * wd * p exactly: 2 - 0.1 * 0.5 * 2 = 1.9.
  std::vector<double> p = {2.0}, m = {0.0}, v = {0.0};
  auto hp = hand_params();
  hp.weight_decay = 0.5;
  cpu::adamw_step(p, std::vector<double>{0.0}, m, v, hp, 1);
  EXPECT_DOUBLE_EQ(p[0], 1.9);
}

TEST(AdamW, DecayMaskExcludesMarkedParameters) {
  // Same value and gradient; slot 1 is masked out: the difference is exactly lr * wd * p.
  std::vector<double> p = {1.0, 1.0, 1.0}, m(3, 0.0), v(3, 0.0);
  const std::vector<std::uint8_t> mask = {1, 0, 7};  // any non-zero byte decays
  cpu::adamw_step(p, std::vector<double>{0.5, 0.5, 0.5}, m, v, hand_params(), 1, mask);
  EXPECT_NEAR(p[0], 0.890000002, 1e-15);
  EXPECT_NEAR(p[1], 0.900000002, 1e-15);
  EXPECT_DOUBLE_EQ(p[0], p[2]);
  EXPECT_NEAR(p[1] - p[0], 0.1 * 0.1 * 1.0, 1e-15);
}

TEST(AdamW, ConvergesOnAQuadratic) {
  // f(p) = 1/2 sum a_i (p_i - c_i)^2, gradient a_i (p_i - c_i); no weight decay; lr decays linearly to 0.
  const std::vector<double> a = {1.0, 10.0, 0.1, 100.0}, c = {3.0, -1.0, 0.5, 2.0};
  std::vector<float> p(4, 0.0f), m(4, 0.0f), v(4, 0.0f), g(4);
  cpu::AdamWParams hp;
  hp.weight_decay = 0;
  const int steps = 2000;
  for (int t = 1; t <= steps; ++t) {
    for (int i = 0; i < 4; ++i) g[i] = float(a[i] * (p[i] - c[i]));
    hp.lr = 0.05 * (1.0 - double(t - 1) / steps);
    cpu::adamw_step(p, g, m, v, hp, t);
  }
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(p[i], c[i], 1e-2) << i;
}

TEST(AdamW, RejectsBadInput) {
  std::vector<float> p(3, 1.0f), m(3), v(3), g(3, 0.1f), short_m(2);
  const std::vector<std::uint8_t> bad_mask = {1, 0};
  cpu::AdamWParams hp;
  EXPECT_THROW(cpu::adamw_step(p, g, short_m, v, hp, 1), tb::Error);
  EXPECT_THROW(cpu::adamw_step(p, g, m, v, hp, 1, bad_mask), tb::Error);
  EXPECT_THROW(cpu::adamw_step(p, g, m, v, hp, 0), tb::Error);
  auto bad = hp;
  bad.beta2 = 1.0;
  EXPECT_THROW(cpu::adamw_step(p, g, m, v, bad, 1), tb::Error);
  bad = hp;
  bad.eps = 0;
  EXPECT_THROW(cpu::adamw_step(p, g, m, v, bad, 1), tb::Error);
  bad = hp;
  bad.lr = -1;
  try {
    cpu::adamw_step(p, g, m, v, bad, 1);
    FAIL() << "negative lr accepted";
  } catch (const tb::Error& e) {
    EXPECT_EQ(e.kind(), tb::Error::Kind::config);
    EXPECT_NE(std::string(e.what()).find("lr"), std::string::npos) << e.what();
  }
  EXPECT_FLOAT_EQ(p[0], 1.0f);  // nothing was touched by the rejected calls
}

TEST(GradNorm, IsTheL2NormAccumulatedInDouble) {
  EXPECT_DOUBLE_EQ(cpu::grad_norm(std::vector<float>{3.0f, -4.0f}), 5.0);
  EXPECT_DOUBLE_EQ(cpu::grad_norm(std::vector<float>{}), 0.0);
  // 2^24 + 4 ones: a float accumulator stalls at 2^24 and would give exactly 4096.
  const std::vector<float> ones((1u << 24) + 4, 1.0f);
  EXPECT_DOUBLE_EQ(cpu::grad_norm(ones), std::sqrt(16777220.0));
}

TEST(ClipGradNorm, ScalesByMaxNormOverNormWhenAbove) {
  std::vector<float> g = {3.0f, -4.0f};
  const double scale = 1.0 / (5.0 + 1e-6);  // 0.2 up to the 1e-6 of torch.nn.utils.clip_grad_norm_
  EXPECT_DOUBLE_EQ(cpu::clip_grad_norm(g, 1.0), 5.0);
  EXPECT_FLOAT_EQ(g[0], float(3.0 * scale));
  EXPECT_FLOAT_EQ(g[1], float(-4.0 * scale));
  EXPECT_NEAR(g[0], 0.6f, 1e-6);
  EXPECT_NEAR(g[1], -0.8f, 1e-6);
  EXPECT_NEAR(cpu::grad_norm(g), 1.0, 1e-6);
}

TEST(ClipGradNorm, LeavesSmallAndNonFiniteGradientsAlone) {
  std::vector<float> g = {0.75f, -1.0f};  // norm 1.25, exact in binary
  EXPECT_DOUBLE_EQ(cpu::clip_grad_norm(g, 2.0), 1.25);
  EXPECT_EQ(g[0], 0.75f);
  EXPECT_EQ(g[1], -1.0f);
  std::vector<float> at = {3.0f, 4.0f};  // norm == max_norm: not clipped
  EXPECT_DOUBLE_EQ(cpu::clip_grad_norm(at, 5.0), 5.0);
  EXPECT_EQ(at[1], 4.0f);
  std::vector<float> bad = {1.0f, std::numeric_limits<float>::infinity()};
  EXPECT_TRUE(std::isinf(cpu::clip_grad_norm(bad, 1.0)));
  EXPECT_EQ(bad[0], 1.0f);
  EXPECT_THROW(cpu::clip_grad_norm(g, 0.0), tb::Error);
}
