// Tests ops/cuda/adamw (multi-tensor AdamW, grad norm, clipping) against ops/cpu/adamw on one GPU.
//   Seven tensors of odd sizes (1, 7, 1000, 32773 crossing a chunk boundary, 100003, 3, 65536), packed back to back
//   so their alignment phases differ, one of them with a gradient of another phase (the scalar path), one without a
//   bf16 model copy; a weight-decay mask by tensor; 3 steps with a changing lr and new gradients each step, read
//   from device scalars; clipping off, on (active) and with max_norm = +inf; fp32 and bf16 moments.
//   fp32 moments: p, m, v within 1e-6 relative (+1e-6 of the tensor's mean magnitude) of the CPU reference; bf16
//   moments: the reference's m and v rounded to bf16 after each step, all but a few elements exact (a rounding-boundary
//   flip between fp32 and double arithmetic), all within a few bf16 ulps. The bf16 model copy equals bf16(p) exactly.
//   Grad norm: norm_sq within 1e-12 of the double reference, bit-identical across runs; the clip scale as
//   clip_grad_norm_ computes it.
//   Negative checks: the clipped step against the unclipped reference fails; step 0 changes nothing; bad arguments
//   throw. bf16 gradients: bit for bit the fp32 gradients of the same values (AdamWBf16Grads).
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench/sysinfo.h"
#include "core/dtype.h"
#include "core/error.h"
#include "ops/cpu/adamw.h"
#include "ops/cuda/adamw.h"
#include "ops/cuda/context.h"
#include "ops/cuda/fill.h"
#include "ops/cuda/fp8.h"
#include "ops/cuda/master_split.h"
#include "../support/config_error.h"

namespace {

using tb::DType;
using namespace tb::ops;

#define SKIP_WITHOUT_GPU() \
  if (tb::bench::visible_gpu_count() == 0) GTEST_SKIP() << tb::bench::no_gpu_reason()

const std::vector<std::int64_t> kSizes = {1, 7, 1000, kAdamWChunk + 5, 100003, 3, 65536};
const std::vector<bool> kDecay = {false, true, true, true, false, true, true};
constexpr std::size_t kOtherPhaseGrad = 3;  // this tensor's gradient lives at another alignment phase
constexpr std::size_t kNoModel = 5;         // this tensor has no bf16 model copy
constexpr double kLr[3] = {1e-3, 2e-3, 5e-4};

enum class Clip { off, on, never };

struct Case {
  DType moments;
  Clip clip;
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  const char* clip[] = {"no_clip", "clip", "clip_inf"};
  return std::string(tb::dtype_name(info.param.moments)) + "_moments_" + clip[int(info.param.clip)];
}

float bf16_round(float x) { return tb::bf16_to_float(tb::float_to_bf16(x)); }

// Element checks |got - ref| <= rel |ref| + abs; counts failures and keeps the worst.
struct Check {
  std::string what;
  std::int64_t samples = 0, failures = 0, worst = -1;
  double worst_ratio = 0, worst_got = 0, worst_ref = 0;
  void add(std::int64_t at, double got, double ref, double tol) {
    ++samples;
    const double err = std::fabs(got - ref);
    const double ratio = std::isnan(err) ? std::numeric_limits<double>::infinity() : err / tol;
    if (!(err <= tol)) ++failures;
    if (worst < 0 || ratio > worst_ratio) worst_ratio = ratio, worst = at, worst_got = got, worst_ref = ref;
  }
  bool ok() const { return samples > 0 && failures == 0; }
  std::string message() const {
    std::ostringstream o;
    o << what << "[" << worst << "] = " << worst_got << " vs reference " << worst_ref << " (" << worst_ratio
      << "x tol); " << failures << " of " << samples << " out of tolerance";
    return o.str();
  }
};

double mean_abs(std::span<const float> v) {
  double s = 0;
  for (float x : v) s += std::fabs(double(x));
  return s / double(v.size());
}

// The GPU state: flat buffers (tensor k at offset off[k]) for p, g, m, v and the bf16 model copy.
struct Optim {
  std::int64_t n = 0;
  std::vector<std::int64_t> off;
  DType moments;
  DeviceBuffer p, g, g_other, m, v, w, scalars, norm;
  std::unique_ptr<AdamWGroup> group;

  Optim(DeviceContext& dc, DType mom, const std::vector<float>& p0) : moments(mom) {
    for (auto s : kSizes) off.push_back(std::exchange(n, n + s));
    const std::size_t ms = tb::dtype_size(mom);
    p = DeviceBuffer(dc.device(), std::size_t(n) * 4);
    g = DeviceBuffer(dc.device(), std::size_t(n) * 4);
    g_other = DeviceBuffer(dc.device(), std::size_t(kSizes[kOtherPhaseGrad] + 1) * 4);
    m = DeviceBuffer(dc.device(), std::size_t(n) * ms);
    v = DeviceBuffer(dc.device(), std::size_t(n) * ms);
    w = DeviceBuffer(dc.device(), std::size_t(n) * 2);
    scalars = DeviceBuffer(dc.device(), sizeof(AdamWStepScalars));
    norm = DeviceBuffer(dc.device(), sizeof(GradNormResult));
    TB_CHECK(cudaMemcpy(p.get(), p0.data(), std::size_t(n) * 4, cudaMemcpyHostToDevice));
    TB_CHECK(cudaMemset(m.get(), 0, m.bytes()));
    TB_CHECK(cudaMemset(v.get(), 0, v.bytes()));
    TB_CHECK(cudaMemset(w.get(), 0xff, w.bytes()));  // NaN until written
    std::vector<AdamWTensor> ts;
    for (std::size_t k = 0; k < kSizes.size(); ++k) {
      AdamWTensor t;
      t.master = p.as<float>() + off[k];
      t.grad = k == kOtherPhaseGrad ? g_other.as<float>() + 1 : g.as<float>() + off[k];
      t.exp_avg = m.as<unsigned char>() + std::size_t(off[k]) * ms;
      t.exp_avg_sq = v.as<unsigned char>() + std::size_t(off[k]) * ms;
      t.model = k == kNoModel ? nullptr : w.as<__nv_bfloat16>() + off[k];
      t.numel = kSizes[k];
      t.decay = kDecay[k];
      ts.push_back(t);
    }
    group = std::make_unique<AdamWGroup>(dc.device(), ts, mom);
  }
  void set_grads(const std::vector<float>& gh) {
    TB_CHECK(cudaMemcpy(g.get(), gh.data(), std::size_t(n) * 4, cudaMemcpyHostToDevice));
    TB_CHECK(cudaMemcpy(g_other.as<float>() + 1, gh.data() + off[kOtherPhaseGrad],
                        std::size_t(kSizes[kOtherPhaseGrad]) * 4, cudaMemcpyHostToDevice));
  }
  void set_scalars(float lr, std::int64_t step) {
    AdamWStepScalars s;
    s.lr = lr;
    s.step = step;
    TB_CHECK(cudaMemcpy(scalars.get(), &s, sizeof(s), cudaMemcpyHostToDevice));
  }
  GradNormResult norm_result() const {
    GradNormResult r;
    TB_CHECK(cudaMemcpy(&r, norm.get(), sizeof(r), cudaMemcpyDeviceToHost));
    return r;
  }
  std::vector<float> floats(const DeviceBuffer& b, DType t) const {
    std::vector<unsigned char> raw(static_cast<std::size_t>(n) * tb::dtype_size(t));
    TB_CHECK(cudaMemcpy(raw.data(), b.get(), raw.size(), cudaMemcpyDeviceToHost));
    std::vector<float> f(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < f.size(); ++i) f[i] = float(tb::load_as_double(t, raw.data(), i));
    return f;
  }
  std::vector<std::uint16_t> model_bits() const {
    std::vector<std::uint16_t> bits(static_cast<std::size_t>(n));
    TB_CHECK(cudaMemcpy(bits.data(), w.get(), bits.size() * 2, cudaMemcpyDeviceToHost));
    return bits;
  }
};

std::vector<float> random_vector(std::int64_t n, std::uint64_t seed, float lo, float hi) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[std::size_t(i)] = fill_value(seed, std::uint64_t(i), lo, hi);
  return v;
}

// Gradients with a different scale per tensor (so the norm is not dominated by the element count alone).
std::vector<float> grads_for_step(std::int64_t n, const std::vector<std::int64_t>& off, int step) {
  auto g = random_vector(n, 1000 + std::uint64_t(step), -1.0f, 1.0f);
  for (std::size_t k = 0; k < kSizes.size(); ++k)
    for (std::int64_t i = 0; i < kSizes[k]; ++i) g[std::size_t(off[k] + i)] *= float(0.25 * double(k + 1));
  return g;
}

// The CPU state (the spec), advanced one step.
struct CpuState {
  std::vector<float> p, m, v;
  std::vector<std::uint8_t> mask;
  CpuState(const std::vector<float>& p0, const std::vector<std::int64_t>& off)
      : p(p0), m(p0.size(), 0.0f), v(p0.size(), 0.0f), mask(p0.size()) {
    for (std::size_t k = 0; k < kSizes.size(); ++k)
      for (std::int64_t i = 0; i < kSizes[k]; ++i) mask[std::size_t(off[k] + i)] = kDecay[k] ? 1 : 0;
  }
  void step(std::vector<float> g, double lr, std::int64_t t, double max_norm, DType moments) {
    if (max_norm > 0) tb::ops::cpu::clip_grad_norm(std::span<float>(g), max_norm);
    tb::ops::cpu::AdamWParams hp;
    hp.lr = lr;
    tb::ops::cpu::adamw_step(p, g, m, v, hp, t, mask);
    if (moments == DType::bf16)
      for (std::size_t i = 0; i < p.size(); ++i) m[i] = bf16_round(m[i]), v[i] = bf16_round(v[i]);
  }
};

struct StateChecks {
  Check p{"p"}, m{"m"}, v{"v"};
  std::int64_t inexact = 0;  // bf16 moments: elements not bit-equal to the reference's rounding
  bool ok() const { return p.ok() && m.ok() && v.ok(); }
};

StateChecks compare(const Optim& o, const CpuState& ref, double lr_max) {
  StateChecks c;
  const auto p = o.floats(o.p, DType::f32), m = o.floats(o.m, o.moments), v = o.floats(o.v, o.moments);
  const bool bf = o.moments == DType::bf16;
  for (std::size_t k = 0; k < kSizes.size(); ++k) {
    const auto span = [&](const std::vector<float>& x) {
      return std::span<const float>(x.data() + o.off[k], std::size_t(kSizes[k]));
    };
    const double mp = mean_abs(span(ref.p)), mm = mean_abs(span(ref.m)), mv = mean_abs(span(ref.v));
    for (std::int64_t i = 0; i < kSizes[k]; ++i) {
      const std::size_t j = std::size_t(o.off[k] + i);
      const double p_abs = bf ? 3 * lr_max * 0x1p-5 : 0.0;  // bf16 moments: an ulp flip moves later updates
      const double mv_rel = bf ? 0x1p-6 : 1e-6;             // a few bf16 ulps
      c.p.add(std::int64_t(j), p[j], ref.p[j], 1e-6 * std::fabs(ref.p[j]) + 1e-6 * mp + p_abs);
      c.m.add(std::int64_t(j), m[j], ref.m[j], mv_rel * std::fabs(ref.m[j]) + 1e-6 * mm);
      c.v.add(std::int64_t(j), v[j], ref.v[j], mv_rel * std::fabs(ref.v[j]) + 1e-6 * mv);
      if (bf && (m[j] != ref.m[j] || v[j] != ref.v[j])) ++c.inexact;
    }
  }
  return c;
}

class AdamWGpu : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    dc_ = std::make_unique<DeviceContext>(0);
  }
  std::unique_ptr<DeviceContext> dc_;
};

TEST_P(AdamWGpu, ThreeStepsMatchTheCpuReference) {
  const auto [moments, clip] = GetParam();
  std::int64_t n = 0;
  for (auto s : kSizes) n += s;
  const auto p0 = random_vector(n, 7, -1.0f, 1.0f);
  Optim o(*dc_, moments, p0);
  std::vector<std::int64_t> off = o.off;
  CpuState ref(p0, off);
  const float max_norm = clip == Clip::never ? std::numeric_limits<float>::infinity() : 100.0f;
  AdamWConfig cfg;  // torch defaults, as cpu::AdamWParams
  for (int step = 1; step <= 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const auto g = grads_for_step(n, off, step);
    o.set_grads(g);
    o.set_scalars(float(kLr[step - 1]), step);
    const bool clipping = clip != Clip::off;
    if (clipping) {
      grad_norm(*o.group, max_norm, o.norm.as<GradNormResult>(), dc_->stream());
      TB_CHECK(cudaStreamSynchronize(dc_->stream()));
      const GradNormResult r = o.norm_result();
      const double want = tb::ops::cpu::grad_norm(std::span<const float>(g));
      EXPECT_NEAR(r.norm_sq, want * want, 1e-12 * want * want);
      EXPECT_NEAR(r.norm, want, 1e-7 * want);
      const double scale = clip == Clip::on ? double(max_norm) / (want + 1e-6) : 1.0;
      if (clip == Clip::on) ASSERT_GT(want, double(max_norm)) << "the test means to clip";
      EXPECT_NEAR(r.clip_scale, scale, 1e-7 * scale);
      // Deterministic: the same gradients give the same bits.
      grad_norm(*o.group, max_norm, o.norm.as<GradNormResult>(), dc_->stream());
      TB_CHECK(cudaStreamSynchronize(dc_->stream()));
      const GradNormResult r2 = o.norm_result();
      EXPECT_EQ(std::memcmp(&r, &r2, sizeof(r)), 0);
    }
    adamw_step(*o.group, cfg, o.scalars.as<AdamWStepScalars>(), clipping ? o.norm.as<GradNormResult>() : nullptr,
               dc_->stream());
    TB_CHECK(cudaStreamSynchronize(dc_->stream()));
    const CpuState before = ref;
    ref.step(g, kLr[step - 1], step, clip == Clip::on ? double(max_norm) : 0.0, moments);
    const StateChecks c = compare(o, ref, kLr[1]);
    EXPECT_TRUE(c.p.ok()) << c.p.message();
    EXPECT_TRUE(c.m.ok()) << c.m.message();
    EXPECT_TRUE(c.v.ok()) << c.v.message();
    if (moments == DType::bf16) EXPECT_LE(c.inexact, n / 1000) << "bf16 moments differ in more than 0.1% of elements";

    // The bf16 model copy is bf16(p) exactly; the tensor without one is untouched.
    const auto p = o.floats(o.p, DType::f32);
    const auto bits = o.model_bits();
    std::int64_t wrong = 0;
    for (std::size_t k = 0; k < kSizes.size(); ++k)
      for (std::int64_t i = 0; i < kSizes[k]; ++i) {
        const std::size_t j = std::size_t(off[k] + i);
        wrong += bits[j] != (k == kNoModel ? std::uint16_t(0xffff) : tb::float_to_bf16(p[j]));
      }
    EXPECT_EQ(wrong, 0);

    // Negative: had the step used the other clipping choice, the check would fail.
    if (step == 1 && clip != Clip::never) {
      CpuState other = before;
      other.step(g, kLr[0], 1, clip == Clip::on ? 0.0 : 1.0, moments);
      EXPECT_FALSE(compare(o, other, kLr[1]).ok()) << "the check cannot tell clipped from unclipped";
    }
  }
}

TEST_P(AdamWGpu, StepZeroChangesNothing) {
  const auto [moments, clip] = GetParam();
  if (clip != Clip::off) GTEST_SKIP() << "independent of clipping";
  std::int64_t n = 0;
  for (auto s : kSizes) n += s;
  const auto p0 = random_vector(n, 8, -1.0f, 1.0f);
  Optim o(*dc_, moments, p0);
  o.set_grads(grads_for_step(n, o.off, 1));
  o.set_scalars(1e-3f, 0);
  adamw_step(*o.group, AdamWConfig{}, o.scalars.as<AdamWStepScalars>(), nullptr, dc_->stream());
  TB_CHECK(cudaStreamSynchronize(dc_->stream()));
  EXPECT_EQ(o.floats(o.p, DType::f32), p0);
  const auto m = o.floats(o.m, moments);
  EXPECT_TRUE(std::all_of(m.begin(), m.end(), [](float x) { return x == 0.0f; }));
  const auto bits = o.model_bits();
  EXPECT_TRUE(std::all_of(bits.begin(), bits.end(), [](std::uint16_t b) { return b == 0xffff; }));
}

INSTANTIATE_TEST_SUITE_P(MomentsAndClipping, AdamWGpu,
                         testing::Values(Case{DType::f32, Clip::off}, Case{DType::f32, Clip::on},
                                         Case{DType::f32, Clip::never}, Case{DType::bf16, Clip::off},
                                         Case{DType::bf16, Clip::on}),
                         case_name);

TEST(AdamWGpuArgs, BadArgumentsThrow) {
  SKIP_WITHOUT_GPU();
  DeviceContext dc(0);
  std::int64_t n = 0;
  for (auto s : kSizes) n += s;
  Optim o(dc, DType::f32, random_vector(n, 9, -1.0f, 1.0f));
  auto* scalars = o.scalars.as<AdamWStepScalars>();
  AdamWConfig bad;
  bad.beta1 = 1.0;
  EXPECT_THROW(adamw_step(*o.group, bad, scalars, nullptr, dc.stream()), tb::Error);
  bad = AdamWConfig{};
  bad.eps = 0;
  EXPECT_THROW(adamw_step(*o.group, bad, scalars, nullptr, dc.stream()), tb::Error);
  EXPECT_THROW(adamw_step(*o.group, AdamWConfig{}, nullptr, nullptr, dc.stream()), tb::Error);
  EXPECT_THROW(grad_norm(*o.group, 0.0f, o.norm.as<GradNormResult>(), dc.stream()), tb::Error);
  EXPECT_THROW(grad_norm(*o.group, 1.0f, nullptr, dc.stream()), tb::Error);
  EXPECT_EQ(o.group->tensors(), int(kSizes.size()));
  EXPECT_EQ(o.group->numel(), n);
  std::int64_t chunks = 0;
  for (auto s : kSizes) chunks += (s + kAdamWChunk - 1) / kAdamWChunk;
  EXPECT_EQ(o.group->chunks(), chunks);
}

TEST(AdamWGpuArgs, ClipFromNormSqMatchesGradNorm) {
  SKIP_WITHOUT_GPU();
  DeviceContext dc(0);
  std::int64_t n = 0;
  for (auto s : kSizes) n += s;
  Optim o(dc, DType::f32, random_vector(n, 10, -1.0f, 1.0f));
  o.set_grads(grads_for_step(n, o.off, 1));
  grad_norm(*o.group, 50.0f, o.norm.as<GradNormResult>(), dc.stream());
  TB_CHECK(cudaStreamSynchronize(dc.stream()));
  const GradNormResult r = o.norm_result();
  // As after an all-reduce over two identical ranks: norm_sq doubled.
  GradNormResult twice = r;
  twice.norm_sq *= 2;
  TB_CHECK(cudaMemcpy(o.norm.get(), &twice, sizeof(twice), cudaMemcpyHostToDevice));
  clip_from_norm_sq(o.norm.as<GradNormResult>(), 50.0f, dc.stream());
  TB_CHECK(cudaStreamSynchronize(dc.stream()));
  const GradNormResult c = o.norm_result();
  const double norm = std::sqrt(2 * r.norm_sq);
  EXPECT_NEAR(c.norm, norm, 1e-7 * norm);
  EXPECT_NEAR(c.clip_scale, 50.0 / (norm + 1e-6), 1e-7);
}

// Host only: the group's checks run before anything is allocated.
TEST(AdamWGroupArgs, RejectsBadTensorsBeforeAllocating) {
  auto* fake = reinterpret_cast<float*>(std::uintptr_t(0x10000));
  AdamWTensor t;
  t.master = fake;
  t.grad = fake;
  t.exp_avg = fake;
  t.exp_avg_sq = fake;
  t.numel = 10;
  const auto message = [](std::span<const AdamWTensor> ts, DType mom) {
    return tb::testing_support::config_error([&] { AdamWGroup g(0, ts, mom); });
  };
  EXPECT_NE(message({}, DType::f32).find("no tensors"), std::string::npos);
  EXPECT_NE(message(std::span(&t, 1), DType::f16).find("f32 or bf16"), std::string::npos);
  AdamWTensor bad = t;
  bad.numel = 0;
  EXPECT_NE(message(std::span(&bad, 1), DType::f32).find("numel"), std::string::npos);
  bad = t;
  bad.grad = nullptr;
  EXPECT_NE(message(std::span(&bad, 1), DType::f32).find("grad"), std::string::npos);
  bad = t;
  bad.master = reinterpret_cast<float*>(std::uintptr_t(0x10002));
  EXPECT_NE(message(std::span(&bad, 1), DType::f32).find("aligned"), std::string::npos);
  // FP8 copies: a model weight to cast, the tensor's shape, a known (delayed) scale.
  AdamWTensor copy = t;
  copy.model = reinterpret_cast<__nv_bfloat16*>(fake);
  copy.fp8_copy.rows = 2, copy.fp8_copy.cols = 5, copy.fp8_copy.qt = fake;
  copy.fp8_copy.scale = fake, copy.fp8_copy.scale_inv = fake;
  bad = copy;
  bad.model = nullptr;
  EXPECT_NE(message(std::span(&bad, 1), DType::f32).find("no bf16 model weight"), std::string::npos);
  bad = copy;
  bad.fp8_copy.cols = 4;
  EXPECT_NE(message(std::span(&bad, 1), DType::f32).find("rows * cols = 10"), std::string::npos);
  bad = copy;
  bad.fp8_copy.amax_in = fake;
  EXPECT_NE(message(std::span(&bad, 1), DType::f32).find("current scaling"), std::string::npos);
  bad = copy;
  bad.fp8_copy.type = DType::bf16;
  EXPECT_NE(message(std::span(&bad, 1), DType::f32).find("fp8 type"), std::string::npos);
}

// FP8 copies (AdamWTensor::fp8_copy) are bit for bit adamw_step followed by fp8_cast of the model weight: master (or
// its split halves), moments, model, q, q^T, scale_inv and amax, over 3 clipped steps, on four tensors with copies,
// [128, 256] and [32, 128] (the copy kernel's 32 x 128 tiles), [128, 192] (the cast's 64 x 64 tiles) and [48, 80]
// starting at an odd element (32 x 32 tiles, scalar accesses), and one without; each step changes some of the codes.
// A step 0 then changes nothing, and its copies are the cast of the weights as they are.
struct CopyCase {
  DType moments;
  bool split;
  DType type;
};

class AdamWFp8Copies : public testing::TestWithParam<CopyCase> {};

TEST_P(AdamWFp8Copies, BitForBitTheStepThenTheCast) {
  SKIP_WITHOUT_GPU();
  const CopyCase cc = GetParam();
  DeviceContext dc(0);
  cudaStream_t st = dc.stream();
  constexpr int kCopies = 4;
  const std::int64_t rows[kCopies] = {128, 32, 128, 48}, cols[kCopies] = {256, 128, 192, 80};
  std::int64_t n[kCopies + 1], off[kCopies + 1], qoff[kCopies];
  std::int64_t total = 0, qbytes = 0;
  for (int k = 0; k <= kCopies; ++k) {
    n[k] = k < kCopies ? rows[k] * cols[k] : 1000;
    off[k] = total + (k == 3 ? 1 : 0);  // tensor 3 at an odd element: pointers of mixed alignment phases
    total = off[k] + n[k] + (k == 3 ? 3 : 0);
    if (k < kCopies) qoff[k] = qbytes, qbytes += n[k];
  }
  const std::size_t ms = tb::dtype_size(cc.moments);
  struct State {
    DeviceBuffer master, lo, model, mom, q, qt;
    std::unique_ptr<Fp8Scales> scales;
  };
  DeviceBuffer init(0, total * 4), grad(0, total * 4), scalars(0, sizeof(AdamWStepScalars));
  DeviceBuffer norm(0, sizeof(GradNormResult));
  fill_normal(init.as<float>(), std::size_t(total), 5, 0.0f, 0.05f, st);
  const bool e4 = cc.type == DType::e4m3;
  const float scale[kCopies] = {e4 ? 3000.5f : 400000.5f, e4 ? 1500.25f : 90000.5f, e4 ? 2500.f : 2e5f,
                                e4 ? 2000.75f : 150000.5f};
  auto make_state = [&] {
    State s{DeviceBuffer(0, total * 4), DeviceBuffer(0, total * 2), DeviceBuffer(0, total * 2),
            DeviceBuffer(0, 2 * total * ms), DeviceBuffer(0, qbytes), DeviceBuffer(0, qbytes),
            std::make_unique<Fp8Scales>(0, kCopies, 1, st)};
    TB_CHECK(cudaMemcpyAsync(s.master.get(), init.get(), total * 4, cudaMemcpyDeviceToDevice, st));
    if (cc.split)
      master_split(init.as<float>(), s.model.as<__nv_bfloat16>(), s.lo.as<std::int16_t>(), std::size_t(total), st);
    else
      cast_f32_to_bf16(s.model.get(), init.as<float>(), std::size_t(total), st);
    TB_CHECK(cudaMemsetAsync(s.mom.get(), 0, s.mom.bytes(), st));
    for (int k = 0; k < kCopies; ++k)
      TB_CHECK(cudaMemcpyAsync(s.scales->meta(k).scale, &scale[k], 4, cudaMemcpyHostToDevice, st));
    return s;
  };
  State a = make_state(), b = make_state();  // a: the step, then fp8_cast; b: the step with its copies
  auto cast_args = [&](State& s, int k, bool with_x) {
    Fp8CastArgs c;
    c.x = with_x ? s.model.as<__nv_bfloat16>() + off[k] : nullptr;
    c.rows = rows[k], c.cols = cols[k], c.type = cc.type, c.margin = 1;
    c.q = s.q.as<std::uint8_t>() + qoff[k], c.qt = s.qt.as<std::uint8_t>() + qoff[k];
    const Fp8Meta m = s.scales->meta(k);
    c.scale = m.scale, c.scale_inv = m.scale_inv, c.amax_out = m.amax;
    return c;
  };
  auto group = [&](State& s, bool copies) {
    std::vector<AdamWTensor> ts(kCopies + 1);
    for (int k = 0; k <= kCopies; ++k) {
      AdamWTensor& t = ts[std::size_t(k)];
      if (cc.split)
        t.master_lo = s.lo.as<std::int16_t>() + off[k];
      else
        t.master = s.master.as<float>() + off[k];
      t.grad = grad.as<float>() + off[k];
      t.exp_avg = s.mom.as<unsigned char>() + std::size_t(off[k]) * ms;
      t.exp_avg_sq = s.mom.as<unsigned char>() + std::size_t(total + off[k]) * ms;
      t.model = s.model.as<__nv_bfloat16>() + off[k];
      t.numel = n[k];
      t.decay = k != 1;
      if (copies && k < kCopies) t.fp8_copy = cast_args(s, k, false);
    }
    return std::make_unique<AdamWGroup>(0, ts, cc.moments);
  };
  const auto ga = group(a, false), gb = group(b, true);
  ASSERT_EQ(gb->fp8_copies().size(), std::size_t(kCopies));
  auto bytes = [&](const DeviceBuffer& d) {
    std::vector<std::uint8_t> h(d.bytes());
    TB_CHECK(cudaMemcpyAsync(h.data(), d.get(), h.size(), cudaMemcpyDeviceToHost, st));
    dc.synchronize();
    return h;
  };
  auto slots = [&](const State& s) {  // every tensor's amax, scale, scale_inv (and history) blocks
    std::vector<float> h(kCopies * s.scales->slot_stride());
    TB_CHECK(cudaMemcpyAsync(h.data(), s.scales->base(), h.size() * 4, cudaMemcpyDeviceToHost, st));
    dc.synchronize();
    return h;
  };
  auto expect_equal = [&](const char* when) {
    EXPECT_TRUE(bytes(a.master) == bytes(b.master) || cc.split) << when << ": master";
    EXPECT_TRUE(bytes(a.lo) == bytes(b.lo) || !cc.split) << when << ": master halves";
    EXPECT_TRUE(bytes(a.model) == bytes(b.model)) << when << ": model";
    EXPECT_TRUE(bytes(a.mom) == bytes(b.mom)) << when << ": moments";
    EXPECT_TRUE(bytes(a.q) == bytes(b.q)) << when << ": q";
    EXPECT_TRUE(bytes(a.qt) == bytes(b.qt)) << when << ": qt";
    EXPECT_TRUE(slots(a) == slots(b)) << when << ": amax, scale, scale_inv";
  };
  AdamWConfig cfg;
  cfg.weight_decay = 0.1;
  std::vector<std::uint8_t> before;
  for (int step = 0; step <= 3; ++step) {  // step 0 last: a step < 1 changes nothing
    const std::int64_t t = step == 3 ? 0 : step + 1;
    fill_uniform(grad.get(), DType::f32, std::size_t(total), 200 + step, -0.05f, 0.05f, st);
    const AdamWStepScalars sc{float(kLr[step % 3]), 0, t};
    TB_CHECK(cudaMemcpyAsync(scalars.get(), &sc, sizeof sc, cudaMemcpyHostToDevice, st));
    for (State* s : {&a, &b})
      for (int k = 0; k < kCopies; ++k) TB_CHECK(cudaMemsetAsync(s->scales->meta(k).amax, 0, 4, st));
    for (const AdamWGroup* g : {ga.get(), gb.get()}) {
      grad_norm(*g, 1.0f, norm.as<GradNormResult>(), st);
      adamw_step(*g, cfg, scalars.as<AdamWStepScalars>(), norm.as<GradNormResult>(), st);
    }
    for (int k = 0; k < kCopies; ++k) fp8_cast(cast_args(a, k, true), st);
    dc.synchronize();  // sc is on this stack frame
    expect_equal(t == 0 ? "step 0" : "step");
    const std::vector<std::uint8_t> after = bytes(b.q);
    std::int64_t changed = 0;
    for (std::size_t i = 0; i < before.size(); ++i) changed += after[i] != before[i];
    if (t == 0)
      EXPECT_EQ(changed, 0) << "step 0 changed codes";
    else if (step > 0)  // (no copies before step 1)
      EXPECT_GT(changed, qbytes / 100) << "step " << t << " changed only " << changed << " codes";
    before = after;
    const std::vector<float> recorded = slots(b);
    for (int k = 0; k < kCopies; ++k) EXPECT_GT(recorded[k * b.scales->slot_stride()], 0.0f) << "amax " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(MomentsMastersFormats, AdamWFp8Copies,
                         testing::Values(CopyCase{DType::f32, true, DType::e4m3},
                                         CopyCase{DType::f32, false, DType::e4m3},
                                         CopyCase{DType::bf16, true, DType::e4m3},
                                         CopyCase{DType::bf16, false, DType::e5m2}),
                         [](const testing::TestParamInfo<CopyCase>& i) {
                           return std::string(tb::dtype_name(i.param.moments)) + "_moments_" +
                                  (i.param.split ? "split" : "f32") + "_master_" +
                                  std::string(tb::dtype_name(i.param.type));
                         });

// Split master (master_lo): the same updates bit for bit as the fp32 master, over 5 clipped steps on two tensors
// (one starting at an odd element, so the scalar path runs too); the model half is the master rounded to nearest.
TEST(AdamWSplitMaster, BitIdenticalToTheFp32Master) {
  SKIP_WITHOUT_GPU();
  DeviceContext dc(0);
  cudaStream_t st = dc.stream();
  const std::int64_t n0 = 100003, n1 = kAdamWChunk + 7, off1 = n0 + 1, total = off1 + n1;  // tensor 1 misaligned
  DeviceBuffer master(0, total * 4), model_a(0, total * 2), lo(0, total * 2), model_b(0, total * 2), grad(0, total * 4);
  DeviceBuffer mom_a(0, 2 * total * 4), mom_b(0, 2 * total * 4), joined(0, total * 4), scalars(0, sizeof(AdamWStepScalars));
  DeviceBuffer norm_a(0, sizeof(GradNormResult)), norm_b(0, sizeof(GradNormResult));
  fill_normal(master.as<float>(), std::size_t(total), 11, 0.0f, 0.02f, st);
  master_split(master.as<float>(), model_b.as<__nv_bfloat16>(), lo.as<std::int16_t>(), std::size_t(total), st);
  cudaMemsetAsync(mom_a.get(), 0, mom_a.bytes(), st);
  cudaMemsetAsync(mom_b.get(), 0, mom_b.bytes(), st);
  auto tensors = [&](bool split) {
    std::vector<AdamWTensor> t(2);
    const std::int64_t offs[2] = {0, off1}, ns[2] = {n0, n1};
    float* m = (split ? mom_b : mom_a).as<float>();
    for (int k = 0; k < 2; ++k) {
      t[k].grad = grad.as<float>() + offs[k];
      t[k].exp_avg = m + offs[k];
      t[k].exp_avg_sq = m + total + offs[k];
      t[k].numel = ns[k];
      t[k].decay = k == 0;
      if (split) {
        t[k].model = model_b.as<__nv_bfloat16>() + offs[k];
        t[k].master_lo = lo.as<std::int16_t>() + offs[k];
      } else {
        t[k].model = model_a.as<__nv_bfloat16>() + offs[k];
        t[k].master = master.as<float>() + offs[k];
      }
    }
    return t;
  };
  const auto ta = tensors(false), tb_ = tensors(true);
  const AdamWGroup a(0, ta), b(0, tb_);
  AdamWConfig cfg;
  cfg.weight_decay = 0.1;
  for (int step = 1; step <= 5; ++step) {
    fill_uniform(grad.get(), DType::f32, std::size_t(total), 100 + step, -0.01f, 0.01f, st);
    const AdamWStepScalars sc{float(kLr[step % 3]), 0, step};
    cudaMemcpyAsync(scalars.get(), &sc, sizeof sc, cudaMemcpyHostToDevice, st);
    grad_norm(a, 1.0f, norm_a.as<GradNormResult>(), st);
    adamw_step(a, cfg, scalars.as<AdamWStepScalars>(), norm_a.as<GradNormResult>(), st);
    grad_norm(b, 1.0f, norm_b.as<GradNormResult>(), st);
    adamw_step(b, cfg, scalars.as<AdamWStepScalars>(), norm_b.as<GradNormResult>(), st);
    dc.synchronize();  // sc is on this stack frame
  }
  master_join(joined.as<float>(), model_b.as<__nv_bfloat16>(), lo.as<std::int16_t>(), std::size_t(total), st);
  std::vector<std::uint32_t> want(total), got(total);
  std::vector<std::uint16_t> hi(total);
  cudaMemcpyAsync(want.data(), master.get(), total * 4, cudaMemcpyDeviceToHost, st);
  cudaMemcpyAsync(got.data(), joined.get(), total * 4, cudaMemcpyDeviceToHost, st);
  cudaMemcpyAsync(hi.data(), model_b.get(), total * 2, cudaMemcpyDeviceToHost, st);
  dc.synchronize();
  std::int64_t differ = 0, hi_wrong = 0;
  for (std::int64_t i = 0; i < total; ++i) {
    if (i == n0) continue;  // the gap between the tensors
    differ += want[i] != got[i];
    float p;
    std::memcpy(&p, &want[i], 4);
    hi_wrong += hi[i] != split_master(p).hi;
  }
  EXPECT_EQ(differ, 0) << "split-master updates differ from fp32-master ones";
  EXPECT_EQ(hi_wrong, 0) << "model halves are not the master rounded to nearest";
}

// No master (model alone, Master::none): each step updates the bf16 weights as an fp32-master step would from those
// weights (widened), rounded to nearest even: over 5 clipped steps on two tensors (one misaligned: the scalar path),
// the weights and moments bit for bit those of the fp32-master group reset to the bf16 weights before each step.
TEST(AdamWNoMaster, EachStepIsTheFp32StepOfTheBf16Weights) {
  SKIP_WITHOUT_GPU();
  DeviceContext dc(0);
  cudaStream_t st = dc.stream();
  const std::int64_t n0 = 100003, n1 = kAdamWChunk + 7, off1 = n0 + 1, total = off1 + n1;
  DeviceBuffer master(0, total * 4), model_a(0, total * 2), model_b(0, total * 2), grad(0, total * 4);
  DeviceBuffer mom_a(0, 2 * total * 4), mom_b(0, 2 * total * 4), scalars(0, sizeof(AdamWStepScalars));
  DeviceBuffer norm_a(0, sizeof(GradNormResult)), norm_b(0, sizeof(GradNormResult));
  fill_normal(master.as<float>(), std::size_t(total), 12, 0.0f, 0.02f, st);
  std::vector<float> p(total);
  std::vector<std::uint16_t> w(total);
  cudaMemcpyAsync(p.data(), master.get(), total * 4, cudaMemcpyDeviceToHost, st);
  dc.synchronize();
  for (std::int64_t i = 0; i < total; ++i) w[i] = tb::float_to_bf16(p[i]);
  cudaMemcpyAsync(model_b.get(), w.data(), total * 2, cudaMemcpyHostToDevice, st);
  cudaMemsetAsync(mom_a.get(), 0, mom_a.bytes(), st);
  cudaMemsetAsync(mom_b.get(), 0, mom_b.bytes(), st);
  auto tensors = [&](bool none) {
    std::vector<AdamWTensor> t(2);
    const std::int64_t offs[2] = {0, off1}, ns[2] = {n0, n1};
    float* m = (none ? mom_b : mom_a).as<float>();
    for (int k = 0; k < 2; ++k) {
      t[k].grad = grad.as<float>() + offs[k];
      t[k].exp_avg = m + offs[k];
      t[k].exp_avg_sq = m + total + offs[k];
      t[k].numel = ns[k];
      t[k].decay = k == 0;
      t[k].model = (none ? model_b : model_a).as<__nv_bfloat16>() + offs[k];
      if (!none) t[k].master = master.as<float>() + offs[k];
    }
    return t;
  };
  const auto ta = tensors(false), tb_ = tensors(true);
  const AdamWGroup a(0, ta), b(0, tb_);
  AdamWConfig cfg;
  cfg.weight_decay = 0.1;
  std::int64_t differ = 0, moved = 0;
  for (int step = 1; step <= 5; ++step) {
    cudaMemcpyAsync(w.data(), model_b.get(), total * 2, cudaMemcpyDeviceToHost, st);  // the master := the weights
    dc.synchronize();
    for (std::int64_t i = 0; i < total; ++i) p[i] = tb::bf16_to_float(w[i]);
    cudaMemcpyAsync(master.get(), p.data(), total * 4, cudaMemcpyHostToDevice, st);
    fill_uniform(grad.get(), DType::f32, std::size_t(total), 200 + step, -0.01f, 0.01f, st);
    const AdamWStepScalars sc{float(kLr[step % 3]), 0, step};
    cudaMemcpyAsync(scalars.get(), &sc, sizeof sc, cudaMemcpyHostToDevice, st);
    grad_norm(a, 1.0f, norm_a.as<GradNormResult>(), st);
    adamw_step(a, cfg, scalars.as<AdamWStepScalars>(), norm_a.as<GradNormResult>(), st);
    grad_norm(b, 1.0f, norm_b.as<GradNormResult>(), st);
    adamw_step(b, cfg, scalars.as<AdamWStepScalars>(), norm_b.as<GradNormResult>(), st);
    std::vector<std::uint16_t> wa(total), wb(total);
    std::vector<std::uint32_t> ma(2 * total), mb(2 * total);
    cudaMemcpyAsync(wa.data(), model_a.get(), total * 2, cudaMemcpyDeviceToHost, st);
    cudaMemcpyAsync(wb.data(), model_b.get(), total * 2, cudaMemcpyDeviceToHost, st);
    cudaMemcpyAsync(ma.data(), mom_a.get(), total * 8, cudaMemcpyDeviceToHost, st);
    cudaMemcpyAsync(mb.data(), mom_b.get(), total * 8, cudaMemcpyDeviceToHost, st);
    dc.synchronize();
    for (std::int64_t i = 0; i < total; ++i) {
      if (i == n0) continue;  // the gap between the tensors
      differ += wa[i] != wb[i] || ma[i] != mb[i] || ma[total + i] != mb[total + i];
      moved += wb[i] != w[i];
    }
  }
  EXPECT_EQ(differ, 0) << "bf16-weight updates differ from the fp32-master step of the same weights";
  EXPECT_GT(moved, total) << "the weights barely moved: the test tests little";
}

// bf16 gradients (AdamWGroup's grads): the norm, clip scale, master, moments, model weights and FP8 copies bit for bit
// those of fp32 gradients holding the same values, over 3 clipped steps with fp32 and bf16 moments, on tensors that
// take each path: FP8 copies by the copy kernel ([128, 256]) and by the cast kernels at an odd element ([48, 80]),
// plain updates by 4-vectors (crossing a chunk) and scalars (an odd element). Negative: the bf16 gradients read as
// the fp32 group's would give another norm.
TEST(AdamWBf16Grads, BitForBitTheFp32GradientsOfTheSameValues) {
  SKIP_WITHOUT_GPU();
  DeviceContext dc(0);
  cudaStream_t st = dc.stream();
  constexpr int kTensors = 4, kCopies = 2;
  const std::int64_t n[kTensors] = {128 * 256, 48 * 80, kAdamWChunk + 5, 1003};
  const std::int64_t rows[kCopies] = {128, 48}, cols[kCopies] = {256, 80};
  std::int64_t off[kTensors], total = 0;
  for (int k = 0; k < kTensors; ++k) {
    off[k] = total + (k % 2);  // tensors 1 and 3 at an odd element
    total = off[k] + n[k] + 8;
  }
  for (DType moments : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(tb::dtype_name(moments));
    const std::size_t ms = tb::dtype_size(moments);
    DeviceBuffer init(0, total * 4), g32(0, total * 4), g16(0, total * 2), scalars(0, sizeof(AdamWStepScalars));
    fill_normal(init.as<float>(), std::size_t(total), 9, 0.0f, 0.05f, st);
    struct State {
      DeviceBuffer lo, model, mom, q, qt, norm;
      std::unique_ptr<Fp8Scales> scales;
      std::unique_ptr<AdamWGroup> group;
    };
    auto make = [&](DType grads) {
      State s{DeviceBuffer(0, total * 2), DeviceBuffer(0, total * 2), DeviceBuffer(0, 2 * total * ms),
              DeviceBuffer(0, total),     DeviceBuffer(0, total),     DeviceBuffer(0, sizeof(GradNormResult)),
              std::make_unique<Fp8Scales>(0, kCopies, 1, st),         nullptr};
      master_split(init.as<float>(), s.model.as<__nv_bfloat16>(), s.lo.as<std::int16_t>(), std::size_t(total), st);
      TB_CHECK(cudaMemsetAsync(s.mom.get(), 0, s.mom.bytes(), st));
      std::vector<AdamWTensor> ts(kTensors);
      for (int k = 0; k < kTensors; ++k) {
        AdamWTensor& t = ts[std::size_t(k)];
        t.master_lo = s.lo.as<std::int16_t>() + off[k];
        t.grad = grads == DType::bf16 ? static_cast<const void*>(g16.as<__nv_bfloat16>() + off[k])
                                      : static_cast<const void*>(g32.as<float>() + off[k]);
        t.exp_avg = s.mom.as<unsigned char>() + std::size_t(off[k]) * ms;
        t.exp_avg_sq = s.mom.as<unsigned char>() + std::size_t(total + off[k]) * ms;
        t.model = s.model.as<__nv_bfloat16>() + off[k];
        t.numel = n[k];
        t.decay = k != 2;
        if (k < kCopies) {
          const float scale = 2000.5f + float(k);
          TB_CHECK(cudaMemcpyAsync(s.scales->meta(k).scale, &scale, 4, cudaMemcpyHostToDevice, st));
          Fp8CastArgs& c = t.fp8_copy;
          c.rows = rows[k], c.cols = cols[k], c.type = DType::e4m3;
          c.q = s.q.as<std::uint8_t>() + off[k], c.qt = s.qt.as<std::uint8_t>() + off[k];
          const Fp8Meta m = s.scales->meta(k);
          c.scale = m.scale, c.scale_inv = m.scale_inv, c.amax_out = m.amax;
        }
      }
      s.group = std::make_unique<AdamWGroup>(0, ts, moments, grads);
      return s;
    };
    State a = make(DType::f32), b = make(DType::bf16);
    ASSERT_EQ(b.group->grads(), DType::bf16);
    auto bytes = [&](const DeviceBuffer& d) {
      std::vector<std::uint8_t> h(d.bytes());
      TB_CHECK(cudaMemcpyAsync(h.data(), d.get(), h.size(), cudaMemcpyDeviceToHost, st));
      dc.synchronize();
      return h;
    };
    AdamWConfig cfg;
    cfg.weight_decay = 0.1;
    for (int step = 1; step <= 3; ++step) {
      // the bf16 gradients, and the same values widened to fp32
      fill_uniform(g16.get(), DType::bf16, std::size_t(total), 300 + step, -0.05f, 0.05f, st);
      const std::vector<std::uint8_t> raw = bytes(g16);
      std::vector<float> wide(static_cast<std::size_t>(total));
      for (std::size_t i = 0; i < wide.size(); ++i) wide[i] = float(tb::load_as_double(DType::bf16, raw.data(), i));
      TB_CHECK(cudaMemcpyAsync(g32.get(), wide.data(), total * 4, cudaMemcpyHostToDevice, st));
      const AdamWStepScalars sc{float(kLr[step - 1]), 0, step};
      TB_CHECK(cudaMemcpyAsync(scalars.get(), &sc, sizeof sc, cudaMemcpyHostToDevice, st));
      for (State* s : {&a, &b}) {
        grad_norm(*s->group, 0.5f, s->norm.as<GradNormResult>(), st);
        adamw_step(*s->group, cfg, scalars.as<AdamWStepScalars>(), s->norm.as<GradNormResult>(), st);
      }
      dc.synchronize();  // sc and wide are on this stack frame
      SCOPED_TRACE("step " + std::to_string(step));
      GradNormResult ra, rb;
      TB_CHECK(cudaMemcpy(&ra, a.norm.get(), sizeof ra, cudaMemcpyDeviceToHost));
      TB_CHECK(cudaMemcpy(&rb, b.norm.get(), sizeof rb, cudaMemcpyDeviceToHost));
      EXPECT_EQ(std::memcmp(&ra, &rb, sizeof ra), 0) << "norm " << ra.norm << " vs " << rb.norm;
      EXPECT_LT(ra.clip_scale, 1.0f) << "the test means to clip";
      EXPECT_TRUE(bytes(a.lo) == bytes(b.lo)) << "master halves";
      EXPECT_TRUE(bytes(a.model) == bytes(b.model)) << "model";
      EXPECT_TRUE(bytes(a.mom) == bytes(b.mom)) << "moments";
      EXPECT_TRUE(bytes(a.q) == bytes(b.q) && bytes(a.qt) == bytes(b.qt)) << "FP8 copies";
    }
    // Negative: the same bytes read as fp32 gradients give another norm.
    std::vector<AdamWTensor> as_f32(1);
    as_f32[0].master_lo = a.lo.as<std::int16_t>(), as_f32[0].model = a.model.as<__nv_bfloat16>();
    as_f32[0].grad = g16.get(), as_f32[0].exp_avg = a.mom.get(), as_f32[0].exp_avg_sq = a.mom.get();
    as_f32[0].numel = n[0] / 2;
    const AdamWGroup wrong(0, as_f32, moments, DType::f32), right(0, as_f32, moments, DType::bf16);
    grad_norm(wrong, 1.0f, a.norm.as<GradNormResult>(), st);
    grad_norm(right, 1.0f, b.norm.as<GradNormResult>(), st);
    GradNormResult rw, rr;
    TB_CHECK(cudaMemcpy(&rw, a.norm.get(), sizeof rw, cudaMemcpyDeviceToHost));
    TB_CHECK(cudaMemcpy(&rr, b.norm.get(), sizeof rr, cudaMemcpyDeviceToHost));
    EXPECT_NE(rw.norm_sq, rr.norm_sq);
  }
}

}  // namespace
