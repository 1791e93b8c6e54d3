// Tests report/verdict: expectation floors, sibling outliers, throttle, errors and skips.
#include <gtest/gtest.h>

#include "recipe/system.h"
#include "report/verdict.h"

namespace {
nlohmann::json gemm(int dev, double tflops, std::string status = "ok") {
  return {{"bench", "micro.gemm"}, {"case", "bf16/8192x8192x8192"}, {"device", dev}, {"world", 1},
          {"status", status},      {"tflops", tflops}};
}

tb::recipe::SystemRef system_with_floor(double min) {
  tb::recipe::SystemRef s;
  s.expect.push_back({"micro.gemm", "bf16/8192x8192x8192", "tflops", min, 0, "test"});
  s.expect.push_back({"micro.nccl.all_reduce", "f32/1GiB", "busbw_gbps", 310, 2, "test"});
  return s;
}
}  // namespace

TEST(Verdict, ExpectationFloor) {
  const auto sys = system_with_floor(800);
  auto rows = tb::report::judge({gemm(0, 842)}, &sys);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].verdict, tb::report::Verdict::pass);
  EXPECT_DOUBLE_EQ(*rows[0].expected_min, 800);
  rows = tb::report::judge({gemm(0, 799.9)}, &sys);
  EXPECT_EQ(rows[0].verdict, tb::report::Verdict::fail);
  EXPECT_NE(rows[0].note.find("below the expected 800"), std::string::npos);
  EXPECT_TRUE(tb::report::any_failed(rows));
}

TEST(Verdict, SiblingOutlierIsTenPercentBelowTheOthersMedian) {
  // 8 GPUs: one at 88.9% of the others' median fails, one at 91% passes
  std::vector<nlohmann::json> recs;
  for (int d = 0; d < 6; ++d) recs.push_back(gemm(d, 840));
  recs.push_back(gemm(6, 746));  // 11.2% below
  recs.push_back(gemm(7, 765));  // 8.9% below
  const auto rows = tb::report::judge(recs, nullptr);
  ASSERT_EQ(rows.size(), 8u);
  for (int d = 0; d < 6; ++d) EXPECT_EQ(rows[d].verdict, tb::report::Verdict::pass) << d;
  EXPECT_EQ(rows[6].verdict, tb::report::Verdict::fail);
  EXPECT_NE(rows[6].note.find("siblings"), std::string::npos);
  EXPECT_EQ(rows[7].verdict, tb::report::Verdict::pass);
  EXPECT_DOUBLE_EQ(*rows[7].sibling_median, 840);
}

TEST(Verdict, TwoGpusOnlyTheSlowOneIsFlagged) {
  const auto rows = tb::report::judge({gemm(0, 840), gemm(1, 700)}, nullptr);
  EXPECT_EQ(rows[0].verdict, tb::report::Verdict::pass);
  EXPECT_EQ(rows[1].verdict, tb::report::Verdict::fail);
}

TEST(Verdict, LoneRecordWithoutExpectationIsInfo) {
  const auto rows = tb::report::judge({gemm(0, 100)}, nullptr);
  EXPECT_EQ(rows[0].verdict, tb::report::Verdict::info);
  EXPECT_FALSE(tb::report::any_failed(rows));
}

TEST(Verdict, ExpectationForAGpuCountAppliesOnlyThere) {
  const auto sys = system_with_floor(800);
  nlohmann::json ar = {{"bench", "micro.nccl.all_reduce"}, {"case", "f32/1GiB"}, {"world", 8},
                       {"status", "ok"}, {"busbw_gbps", 200.0}};
  EXPECT_EQ(tb::report::judge({ar}, &sys)[0].verdict, tb::report::Verdict::info);
  ar["world"] = 2;
  EXPECT_EQ(tb::report::judge({ar}, &sys)[0].verdict, tb::report::Verdict::fail);
  ar["busbw_gbps"] = 320.0;
  EXPECT_EQ(tb::report::judge({ar}, &sys)[0].verdict, tb::report::Verdict::pass);
}

TEST(Verdict, ThrottleErrorsAndSkips) {
  auto hot = gemm(0, 842);
  hot["telemetry"] = {{"throttle", {"sw_power_cap", "hw_thermal"}}};
  auto cap = gemm(1, 842);
  cap["telemetry"] = {{"throttle", {"sw_power_cap"}}};  // power capping is normal under load
  nlohmann::json err = {{"bench", "micro.gemm"}, {"case", "e4m3/8192x8192x8192"}, {"status", "error"},
                        {"error", {{"kind", "cublas"}, {"msg", "no algorithm"}}}};
  nlohmann::json skip = {{"bench", "micro.nccl.all_reduce"}, {"case", "f32/1GiB"}, {"status", "skipped"},
                         {"reason", "needs 2 GPUs"}};
  const auto rows = tb::report::judge({hot, cap, err, skip}, nullptr);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].verdict, tb::report::Verdict::fail);
  EXPECT_NE(rows[0].note.find("hw_thermal"), std::string::npos);
  EXPECT_EQ(rows[1].verdict, tb::report::Verdict::pass);
  EXPECT_EQ(rows[2].verdict, tb::report::Verdict::fail);
  EXPECT_EQ(rows[2].note, "no algorithm");
  EXPECT_EQ(rows[3].verdict, tb::report::Verdict::skipped);
  const auto table = tb::report::render_table(rows);
  EXPECT_NE(table.find("FAIL"), std::string::npos);
  EXPECT_NE(table.find("skipped"), std::string::npos);
}

TEST(Verdict, PeerCopiesAreSiblingsAcrossPairs) {
  auto peer = [](int s, int d, double gbps) {
    return nlohmann::json{{"bench", "micro.links.peer"}, {"case", "gpu" + std::to_string(s) + "->gpu" + std::to_string(d) + "/256MiB"},
                          {"world", 2}, {"status", "ok"}, {"gbps", gbps}};
  };
  const auto rows = tb::report::judge({peer(0, 1, 390), peer(1, 0, 388), peer(0, 2, 391), peer(2, 0, 200)}, nullptr);
  EXPECT_EQ(rows[3].verdict, tb::report::Verdict::fail);
  EXPECT_EQ(rows[0].verdict, tb::report::Verdict::pass);
}
