// tests/report/plus_minus_test.cpp: report/plus_minus.h, the "11,730 ± 180" of `run`'s extrapolation: the
// uncertainty to two significant figures, the value to the same place, thousands grouped.
#include "report/plus_minus.h"

#include <gtest/gtest.h>

namespace tb::report {
namespace {

TEST(PlusMinus, TwoSignificantFiguresAndTheValueToTheSamePlace) {
  EXPECT_EQ(plus_minus(11734.2, 183.4, 0), "11,730 ± 180");
  EXPECT_EQ(plus_minus(5399.01, 256.98, 0), "5,400 ± 260");
  EXPECT_EQ(plus_minus(47.416, 2.2569, 2), "47.4 ± 2.3");
  EXPECT_EQ(plus_minus(47.416, 0.0374, 2), "47.42 ± 0.04");  // capped at 2 decimals
  EXPECT_EQ(plus_minus(0.5, 0.0374, 3), "0.500 ± 0.037");
  EXPECT_EQ(plus_minus(1234567.0, 0, 0), "1,234,567");  // no uncertainty: the value alone
  EXPECT_EQ(plus_minus(-1500.0, 25, 0), "-1,500 ± 25");
}

TEST(PlusMinus, Grouped) {
  EXPECT_EQ(grouped(0, 0), "0");
  EXPECT_EQ(grouped(999, 0), "999");
  EXPECT_EQ(grouped(1000, 0), "1,000");
  EXPECT_EQ(grouped(12345.678, 2), "12,345.68");
  EXPECT_EQ(grouped(-0.001, 1), "0.0");
}

}  // namespace
}  // namespace tb::report
