// Tests the GemmPlan extensions (ops/cuda/gemm.h) against ops/cpu/gemm_ref on one GPU:
//   layouts ab (D = A·B, B [k,n]) and atb (D = A^T·B, A [k,m]) for every non-fp8 type combination, bf16 -> f32
//   included, over ALL elements of small non-square shapes and sampled elements of a large one (verify_gemm reads
//   columns for these layouts); accumulate (D += A·B, beta = 1) in every layout, checked against a full host
//   reference with D's old values; then the checks must fail on a corrupted element, on the wrong layout and on a
//   forgotten accumulation. Host-only: fp8 in another layout and verify_gemm on an accumulating shape are refused.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <array>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "bench/sysinfo.h"
#include "core/dtype.h"
#include "core/error.h"
#include "ops/cpu/gemm_ref.h"
#include "ops/cuda/context.h"
#include "ops/cuda/fill.h"
#include "ops/cuda/gemm.h"

namespace {

using tb::DType;
using namespace tb::ops;

#define SKIP_WITHOUT_GPU() \
  if (tb::bench::visible_gpu_count() == 0) GTEST_SKIP() << tb::bench::no_gpu_reason()

struct Bufs {
  DeviceBuffer a, b, d;
  Bufs(DeviceContext& dc, const GemmShape& s)
      : a(dc.device(), std::size_t(s.m * s.k) * tb::dtype_size(s.a)),
        b(dc.device(), std::size_t(s.n * s.k) * tb::dtype_size(s.b)),
        d(dc.device(), std::size_t(s.m * s.n) * tb::dtype_size(s.d)) {
    fill_uniform(a.get(), s.a, std::size_t(s.m * s.k), 21, -1.0f, 1.0f, dc.stream());
    fill_uniform(b.get(), s.b, std::size_t(s.n * s.k), 22, -1.0f, 1.0f, dc.stream());
    TB_CHECK(cudaMemsetAsync(d.get(), 0xff, d.bytes(), dc.stream()));  // NaN until written
  }
};

std::vector<unsigned char> to_host(const DeviceBuffer& buf, cudaStream_t stream) {
  std::vector<unsigned char> h(buf.bytes());
  TB_CHECK(cudaMemcpyAsync(h.data(), buf.get(), h.size(), cudaMemcpyDeviceToHost, stream));
  TB_CHECK(cudaStreamSynchronize(stream));
  return h;
}

// op(A)[i,x] and op(B)[x,j] of the host copies, by layout.
double a_at(const GemmShape& s, const std::vector<unsigned char>& a, std::int64_t i, std::int64_t x) {
  const std::int64_t idx = s.layout == GemmLayout::atb ? x * s.m + i : i * s.k + x;
  return tb::load_as_double(s.a, a.data(), std::size_t(idx));
}
double b_at(const GemmShape& s, const std::vector<unsigned char>& b, std::int64_t x, std::int64_t j) {
  const std::int64_t idx = s.layout == GemmLayout::abt ? j * s.k + x : x * s.n + j;
  return tb::load_as_double(s.b, b.data(), std::size_t(idx));
}

// Every element of D against c0 + op(A)·op(B) (c0 empty: no accumulation); returns the check.
GemmCheck full_check(const GemmShape& s, const std::vector<unsigned char>& a, const std::vector<unsigned char>& b,
                     const std::vector<unsigned char>& d, const std::vector<unsigned char>* c0) {
  GemmCheck c;
  for (std::int64_t i = 0; i < s.m; ++i)
    for (std::int64_t j = 0; j < s.n; ++j) {
      DotRef r;
      for (std::int64_t x = 0; x < s.k; ++x) {
        const double p = a_at(s, a, i, x) * b_at(s, b, x, j);
        r.value += p;
        r.abs_sum += std::fabs(p);
      }
      double old = 0;
      if (c0) old = tb::load_as_double(s.d, c0->data(), std::size_t(i * s.n + j));
      // Accumulating, the epilogue may round the product to d's type before adding the old value (seen on
      // H200 with f16: 1.6 half-ulps, 2026-11-30): one more rounding of the product and of the old value.
      const double tol = gemm_tolerance(s.a, s.b, s.d, false, s.k, r) +
                         2 * tb::dtype_eps(s.d) * (std::fabs(r.value) + std::fabs(old));
      c.add({i, j}, tb::load_as_double(s.d, d.data(), std::size_t(i * s.n + j)), old + r.value, tol);
    }
  return c;
}

struct Case {
  GemmTypes t;
  GemmLayout layout;
};

std::vector<Case> cases() {
  std::vector<Case> v;
  for (const auto& t : gemm_type_combos())
    if (!tb::is_fp8(t.a))
      for (GemmLayout l : {GemmLayout::abt, GemmLayout::ab, GemmLayout::atb}) v.push_back({t, l});
  return v;
}

std::string case_name(const testing::TestParamInfo<Case>& info) {
  const auto& t = info.param.t;
  return gemm_types_name(t.a, t.b) + "_to_" + std::string(tb::dtype_name(t.d)) + "_" +
         std::string(gemm_layout_name(info.param.layout));
}

class GemmLayoutGpu : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    dc_ = std::make_unique<DeviceContext>(0);
  }
  GemmShape shape(std::int64_t m, std::int64_t n, std::int64_t k, bool accumulate = false) const {
    const auto& p = GetParam();
    GemmShape s{m, n, k, p.t.a, p.t.b, p.t.d};
    s.layout = p.layout;
    s.accumulate = accumulate;
    return s;
  }
  std::unique_ptr<DeviceContext> dc_;
};

TEST_P(GemmLayoutGpu, MatchesReferenceOnEveryElementOfSmallShapes) {
  for (const auto& [m, n, k] : std::vector<std::array<std::int64_t, 3>>{
           {96, 160, 64}, {127, 65, 33}, {200, 300, 210}, {1, 1, 1}, {3, 1, 257}, {37, 64, 1000}}) {
    const GemmShape s = shape(m, n, k);
    SCOPED_TRACE(describe(s));
    Bufs op(*dc_, s);
    dc_->gemm(s, op.d.get(), op.a.get(), op.b.get());
    const auto elements = sample_elements(s.m, s.n, int(s.m * s.n));
    const GemmCheck c = verify_gemm(s, op.d.get(), op.a.get(), op.b.get(), 1, 1, elements, dc_->stream());
    EXPECT_EQ(c.samples, int(s.m * s.n));
    EXPECT_TRUE(c.ok()) << c.worst_message() << " [" << dc_->gemm_plan(s).algo().describe() << "]";
    // The host reference (own indexing) agrees with verify_gemm's column reads.
    const GemmCheck h = full_check(s, to_host(op.a, dc_->stream()), to_host(op.b, dc_->stream()),
                                   to_host(op.d, dc_->stream()), nullptr);
    EXPECT_TRUE(h.ok()) << h.worst_message();
  }
}

TEST_P(GemmLayoutGpu, MatchesReferenceOnSampledElementsOfALargeShape) {
  const GemmShape s = shape(3000, 2048, 4096);
  Bufs op(*dc_, s);
  dc_->gemm(s, op.d.get(), op.a.get(), op.b.get());
  const auto elements = sample_elements(s.m, s.n, 256, 5);
  const GemmCheck c = verify_gemm(s, op.d.get(), op.a.get(), op.b.get(), 1, 1, elements, dc_->stream());
  EXPECT_TRUE(c.ok()) << describe(s) << ": " << c.worst_message() << " [" << dc_->gemm_plan(s).algo().describe()
                      << "]";
}

TEST_P(GemmLayoutGpu, AccumulateAddsToTheOldValues) {
  for (const auto& [m, n, k] :
       std::vector<std::array<std::int64_t, 3>>{{96, 160, 64}, {127, 65, 33}, {1000, 64, 37}, {1, 1, 1}}) {
    const GemmShape s = shape(m, n, k, true);
    SCOPED_TRACE(describe(s));
    Bufs op(*dc_, s);
    fill_uniform(op.d.get(), s.d, std::size_t(s.m * s.n), 23, -4.0f, 4.0f, dc_->stream());
    const auto c0 = to_host(op.d, dc_->stream());
    dc_->gemm(s, op.d.get(), op.a.get(), op.b.get());
    const auto a = to_host(op.a, dc_->stream()), b = to_host(op.b, dc_->stream());
    const auto d = to_host(op.d, dc_->stream());
    const GemmCheck c = full_check(s, a, b, d, &c0);
    EXPECT_TRUE(c.ok()) << c.worst_message() << " [" << dc_->gemm_plan(s).algo().describe() << "]";
    if (s.m * s.n < 1000) continue;  // a single element may be too small to tell apart
    // Negative: the same D is not the product alone (the old values were added).
    EXPECT_FALSE(full_check(s, a, b, d, nullptr).ok());
    // Twice: D = c0 + 2 A·B; checking it as c0 + A·B must fail.
    dc_->gemm(s, op.d.get(), op.a.get(), op.b.get());
    EXPECT_FALSE(full_check(s, a, b, to_host(op.d, dc_->stream()), &c0).ok());
  }
}

TEST_P(GemmLayoutGpu, CorruptedElementAndWrongLayoutFailTheCheck) {
  const GemmShape s = shape(96, 160, 64);
  Bufs op(*dc_, s);
  dc_->gemm(s, op.d.get(), op.a.get(), op.b.get());
  const auto all = sample_elements(s.m, s.n, int(s.m * s.n));
  ASSERT_TRUE(verify_gemm(s, op.d.get(), op.a.get(), op.b.get(), 1, 1, all, dc_->stream()).ok());
  // Checked as another layout (same buffer sizes: m, n, k kept), the result is wrong.
  for (GemmLayout other : {GemmLayout::abt, GemmLayout::ab, GemmLayout::atb}) {
    if (other == s.layout) continue;
    GemmShape t = s;
    t.layout = other;
    EXPECT_FALSE(verify_gemm(t, op.d.get(), op.a.get(), op.b.get(), 1, 1, all, dc_->stream()).ok())
        << gemm_layout_name(other);
  }
  unsigned char bad[8] = {};
  tb::store_from_double(s.d, bad, 0, 100.0);
  const std::size_t size = tb::dtype_size(s.d);
  TB_CHECK(cudaMemcpyAsync(op.d.as<unsigned char>() + std::size_t(5 * s.n + 7) * size, bad, size,
                           cudaMemcpyHostToDevice, dc_->stream()));
  const GemmCheck c = verify_gemm(s, op.d.get(), op.a.get(), op.b.get(), 1, 1, all, dc_->stream());
  EXPECT_EQ(c.failures, 1);
  EXPECT_EQ(c.worst.i, 5);
  EXPECT_EQ(c.worst.j, 7);
}

TEST_P(GemmLayoutGpu, LayoutAndAccumulateArePartOfThePlanKey) {
  const GemmShape s = shape(128, 128, 128);
  GemmShape acc = s;
  acc.accumulate = true;
  EXPECT_NE(&dc_->gemm_plan(s), &dc_->gemm_plan(acc));
  EXPECT_EQ(&dc_->gemm_plan(acc), &dc_->gemm_plan(acc));
}

INSTANTIATE_TEST_SUITE_P(NonFp8, GemmLayoutGpu, testing::ValuesIn(cases()), case_name);

TEST(GemmLayoutShape, Fp8OnlyInTheAbtLayout) {
  GemmShape s{64, 64, 64, DType::e4m3, DType::e4m3, DType::bf16};
  EXPECT_NO_THROW(check_gemm_shape(s));
  for (GemmLayout l : {GemmLayout::ab, GemmLayout::atb}) {
    s.layout = l;
    try {
      check_gemm_shape(s);
      ADD_FAILURE() << "fp8 in layout " << gemm_layout_name(l) << " was accepted";
    } catch (const tb::Error& e) {
      EXPECT_EQ(e.kind(), tb::Error::Kind::config);
      EXPECT_NE(std::string(e.what()).find("abt layout only"), std::string::npos) << e.what();
    }
  }
  GemmShape f32{8, 8, 8, DType::bf16, DType::bf16, DType::f32};
  f32.layout = GemmLayout::atb;
  f32.accumulate = true;
  EXPECT_NO_THROW(check_gemm_shape(f32));
  EXPECT_EQ(describe(f32), "bf16->f32 m=8 n=8 k=8 atb accumulate");
  EXPECT_EQ(describe(GemmShape{8, 8, 8}), "bf16->bf16 m=8 n=8 k=8");  // unchanged for the default layout
}

TEST(GemmLayoutShape, VerifyRefusesAccumulatingShapes) {
  GemmShape s{8, 8, 8};
  s.accumulate = true;
  const std::vector<GemmIndex> one{{0, 0}};
  EXPECT_THROW(verify_gemm(s, nullptr, nullptr, nullptr, 1, 1, one, nullptr), tb::Error);
}

}  // namespace
