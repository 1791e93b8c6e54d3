// Tests core/stats: quantiles against numpy's linear method, moments, edge cases.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/stats.h"

TEST(Stats, QuantilesMatchNumpyLinear) {
  // numpy.percentile([7, 1, 3, 9, 5], [10, 50, 90]) = [1.8, 5.0, 8.2]
  const std::vector<double> x = {7, 1, 3, 9, 5};
  const auto s = tb::summarize(x);
  EXPECT_DOUBLE_EQ(s.median, 5.0);
  EXPECT_NEAR(s.p10, 1.8, 1e-12);
  EXPECT_NEAR(s.p90, 8.2, 1e-12);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 9);
  EXPECT_DOUBLE_EQ(s.mean, 5);
  EXPECT_NEAR(s.stdev, std::sqrt(10.0), 1e-12);  // sample stdev: sum of squares 40 / 4
  EXPECT_EQ(s.n, 5u);
}

TEST(Stats, EvenCountMedianInterpolates) {
  const std::vector<double> x = {4, 1, 2, 3};
  EXPECT_DOUBLE_EQ(tb::quantile(x, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(tb::quantile(x, 0.0), 1);
  EXPECT_DOUBLE_EQ(tb::quantile(x, 1.0), 4);
}

TEST(Stats, SingleAndEmpty) {
  const std::vector<double> one = {3.5};
  const auto s = tb::summarize(one);
  EXPECT_DOUBLE_EQ(s.median, 3.5);
  EXPECT_DOUBLE_EQ(s.p90, 3.5);
  EXPECT_DOUBLE_EQ(s.stdev, 0);
  EXPECT_EQ(tb::summarize({}).n, 0u);
  EXPECT_TRUE(std::isnan(tb::quantile({}, 0.5)));
}

TEST(Stats, ScaledAndJson) {
  const std::vector<double> x = {1, 2, 3};
  const auto s = tb::scaled(tb::summarize(x), 1000);
  EXPECT_DOUBLE_EQ(s.median, 2000);
  EXPECT_DOUBLE_EQ(s.max, 3000);
  const auto j = tb::to_json(s);
  EXPECT_DOUBLE_EQ(j["median"].get<double>(), 2000);
  EXPECT_EQ(j["n"].get<int>(), 3);
}
