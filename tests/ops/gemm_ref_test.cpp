// Tests ops/cpu/gemm_ref: the reference dot product on hand-checked rows (bf16, e4m3, e4m3 x e5m2 with
// per-tensor scales), the tolerance formula, element sampling and the pass/fail bookkeeping.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

#include "core/dtype.h"
#include "ops/cpu/gemm_ref.h"

namespace {

using tb::DType;
using namespace tb::ops;

// a = [1, 2, -0.5], b = [0.25, -1, 4]: sum a_i b_i = 0.25 - 2 - 2 = -3.75, sum |a_i b_i| = 4.25.
// All six values are exact in bf16, e4m3 and e5m2.
const float kA[] = {1.0f, 2.0f, -0.5f};
const float kB[] = {0.25f, -1.0f, 4.0f};

TEST(GemmRef, Bf16Rows) {
  std::vector<std::uint16_t> a, b;
  for (float x : kA) a.push_back(tb::float_to_bf16(x));
  for (float x : kB) b.push_back(tb::float_to_bf16(x));
  const DotRef r = dot_ref(DType::bf16, a.data(), DType::bf16, b.data(), 3);
  EXPECT_DOUBLE_EQ(r.value, -3.75);
  EXPECT_DOUBLE_EQ(r.abs_sum, 4.25);
}

TEST(GemmRef, Fp8RowsWithScales) {
  std::vector<std::uint8_t> a, b4, b5;
  for (float x : kA) a.push_back(tb::float_to_e4m3(x));
  for (float x : kB) b4.push_back(tb::float_to_e4m3(x));
  for (float x : kB) b5.push_back(tb::float_to_e5m2(x));
  // scales 0.5 and 4: value -3.75 * 2 = -7.5, abs_sum 4.25 * 2 = 8.5
  const DotRef r44 = dot_ref(DType::e4m3, a.data(), DType::e4m3, b4.data(), 3, 0.5, 4.0);
  EXPECT_DOUBLE_EQ(r44.value, -7.5);
  EXPECT_DOUBLE_EQ(r44.abs_sum, 8.5);
  const DotRef r45 = dot_ref(DType::e4m3, a.data(), DType::e5m2, b5.data(), 3, 0.5, 4.0);
  EXPECT_DOUBLE_EQ(r45.value, -7.5);
  EXPECT_DOUBLE_EQ(r45.abs_sum, 8.5);
  // A negative scale flips the value, never abs_sum.
  const DotRef neg = dot_ref(DType::e4m3, a.data(), DType::e4m3, b4.data(), 3, -1.0, 1.0);
  EXPECT_DOUBLE_EQ(neg.value, 3.75);
  EXPECT_DOUBLE_EQ(neg.abs_sum, 4.25);
}

TEST(GemmRef, ToleranceFormula) {
  const DotRef r{-3.75, 4.25};
  // bf16: eps(bf16) |ref| + sqrt(k) 2^-19 abs_sum
  EXPECT_DOUBLE_EQ(gemm_tolerance(DType::bf16, DType::bf16, DType::bf16, false, 64, r),
                   0x1p-8 * 3.75 + 8 * 0x1p-19 * 4.25);
  // tf32 adds the input truncation 2^-9; fp8 uses the looser accumulation term 2^-15.
  EXPECT_DOUBLE_EQ(gemm_tol_acc(DType::tf32, DType::tf32, false, 64), 0x1p-9 + 8 * 0x1p-19);
  EXPECT_DOUBLE_EQ(gemm_tol_acc(DType::e4m3, DType::e5m2, true, 64), 8 * 0x1p-15);
  EXPECT_LT(gemm_tol_acc(DType::bf16, DType::bf16, false, 4096), gemm_tol_acc(DType::e4m3, DType::e4m3, true, 4096));
  EXPECT_LT(gemm_tol_acc(DType::bf16, DType::bf16, false, 64), gemm_tol_acc(DType::bf16, DType::bf16, false, 4096));
}

TEST(GemmRef, SampleElements) {
  const auto all = sample_elements(3, 5, 100);
  ASSERT_EQ(all.size(), 15u);
  EXPECT_EQ(all[7].i, 1);
  EXPECT_EQ(all[7].j, 2);
  const auto some = sample_elements(1000, 3000, 256, 7);
  ASSERT_EQ(some.size(), 256u);
  EXPECT_EQ(some[3].i, 999);  // the corners come first
  EXPECT_EQ(some[3].j, 2999);
  std::set<std::pair<std::int64_t, std::int64_t>> distinct;
  for (const auto& e : some) {
    EXPECT_TRUE(e.i >= 0 && e.i < 1000 && e.j >= 0 && e.j < 3000);
    distinct.insert({e.i, e.j});
  }
  EXPECT_GT(distinct.size(), 250u);
  const auto again = sample_elements(1000, 3000, 256, 7);
  EXPECT_EQ(again[100].i, some[100].i);  // deterministic in the seed
  EXPECT_EQ(again[100].j, some[100].j);
}

TEST(GemmRef, CheckCountsFailuresAndKeepsTheWorst) {
  GemmCheck c;
  EXPECT_FALSE(c.ok());  // nothing checked is not a pass
  c.add({0, 0}, 1.0, 1.0, 0.1);
  c.add({0, 1}, 1.05, 1.0, 0.1);
  EXPECT_TRUE(c.ok());
  EXPECT_NEAR(c.max_err_over_tol, 0.5, 1e-12);
  c.add({2, 3}, 2.0, 1.0, 0.1);  // 10x the tolerance
  c.add({4, 4}, 1.0, 1.2, 0.1);  // 2x
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(c.failures, 2);
  EXPECT_EQ(c.worst.i, 2);
  EXPECT_EQ(c.worst.j, 3);
  EXPECT_NEAR(c.max_err_over_tol, 10.0, 1e-9);
  EXPECT_NE(c.worst_message().find("D[2,3]"), std::string::npos) << c.worst_message();
  GemmCheck nan;
  nan.add({0, 0}, std::nan(""), 1.0, 0.1);
  EXPECT_FALSE(nan.ok());
  EXPECT_TRUE(std::isinf(nan.max_err_over_tol));
}

}  // namespace
