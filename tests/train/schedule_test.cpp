// Tests train/schedule: linear warmup values, cosine decay (midpoint, end), constant after the end, bad configs.
#include "train/schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/error.h"

using tb::train::LrSchedule;

TEST(LrSchedule, LinearWarmupFromPeakOverWarmup) {
  const LrSchedule s{1.0, 0.1, 10, 110};
  EXPECT_DOUBLE_EQ(s.lr(0), 0.1);  // peak * 1 / 10
  EXPECT_DOUBLE_EQ(s.lr(4), 0.5);
  EXPECT_DOUBLE_EQ(s.lr(9), 1.0);  // the last warmup step reaches peak
  for (int t = 1; t < 10; ++t) EXPECT_GT(s.lr(t), s.lr(t - 1)) << t;
}

TEST(LrSchedule, CosineFromPeakToMin) {
  const LrSchedule s{1.0, 0.1, 10, 110};
  EXPECT_DOUBLE_EQ(s.lr(10), 1.0);                                     // cosine starts at peak
  EXPECT_NEAR(s.lr(60), (1.0 + 0.1) / 2, 1e-15);                       // midpoint of the decay: (peak + min) / 2
  EXPECT_NEAR(s.lr(35), 0.1 + 0.9 * (1 + std::sqrt(0.5)) / 2, 1e-15);  // a quarter: cos(pi/4)
  EXPECT_DOUBLE_EQ(s.lr(110), 0.1);
  EXPECT_DOUBLE_EQ(s.lr(111), 0.1);
  EXPECT_DOUBLE_EQ(s.lr(1000000), 0.1);
  EXPECT_GT(s.lr(109), 0.1);
  for (int t = 11; t <= 110; ++t) EXPECT_LT(s.lr(t), s.lr(t - 1)) << t;
}

TEST(LrSchedule, EdgeShapes) {
  const LrSchedule no_warmup{2.0, 0.0, 0, 4};
  EXPECT_DOUBLE_EQ(no_warmup.lr(0), 2.0);
  EXPECT_NEAR(no_warmup.lr(2), 1.0, 1e-15);
  EXPECT_DOUBLE_EQ(no_warmup.lr(4), 0.0);
  const LrSchedule warmup_only{1.0, 0.25, 4, 4};  // W = T: warmup, then min
  EXPECT_DOUBLE_EQ(warmup_only.lr(3), 1.0);
  EXPECT_DOUBLE_EQ(warmup_only.lr(4), 0.25);
  const LrSchedule constant{3e-4, 3e-4, 0, 10};
  EXPECT_DOUBLE_EQ(constant.lr(5), 3e-4);
}

TEST(LrSchedule, BadConfigsThrowNamingTheField) {
  const auto message = [](const LrSchedule& s, int step) -> std::string {
    try {
      (void)s.lr(step);
    } catch (const tb::Error& e) {
      EXPECT_EQ(e.kind(), tb::Error::Kind::config);
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message({1.0, 2.0, 0, 10}, 0).find("min lr"), std::string::npos);         // min > peak
  EXPECT_NE(message({-1.0, 0.0, 0, 10}, 0).find("peak lr"), std::string::npos);       // negative peak
  EXPECT_NE(message({1.0, -0.1, 0, 10}, 0).find("min lr"), std::string::npos);        // negative min
  EXPECT_NE(message({1.0, 0.1, 11, 10}, 0).find("warmup_steps"), std::string::npos);  // warmup > total
  EXPECT_NE(message({1.0, 0.1, -1, 10}, 0).find("warmup_steps"), std::string::npos);  // negative warmup
  EXPECT_NE(message({1.0, 0.1, 0, 0}, 0).find("total_steps"), std::string::npos);     // no steps
  EXPECT_NE(message({1.0, 0.1, 0, 10}, -1).find("step must be >= 0"), std::string::npos);
  EXPECT_NE(message({std::nan(""), 0.0, 0, 10}, 0).find("peak lr"), std::string::npos);
  EXPECT_THROW(LrSchedule({1.0, 0.1, 11, 10}).validate(), tb::Error);
  EXPECT_NO_THROW(LrSchedule({1.0, 0.1, 10, 10}).validate());
}
