// Tests ops/cuda/cross_entropy (lm_head_cross_entropy) against ops/cpu/cross_entropy in double, on the same
// bf16-rounded x and W, on one GPU.
//   Small shapes (t = 37 prime, V = 1000, 1001 and tiny V, h = 64 / 40 / 16, chunks that do not divide t, grad_scale
//   != 1): every element of dx and dW and every token's loss, each within a bound derived from the one lossy step
//   (bf16 logits: |dz| <= 2^-9 |z| + fp32 GEMM rounding; softmax error <= 2 |dz| relative; bf16 dlogits and dx
//   rounding), the mean loss within 1e-3 relative, dW within 1e-2 of its Frobenius norm.
//   A large shape (t = 8192, V = 128256, h = 4096, chunk 3000): sampled tokens' losses and dx rows in full (CPU,
//   double, every vocabulary entry), sampled dW rows within 1e-2 of their norm (the reference's softmax for every
//   token uses the GPU's per-token lse, itself checked on the sampled tokens).
//   Negative checks: the reference with one target changed, and a corrupted dx element, must fail the same checks;
//   an out-of-range target gives a NaN loss; bad arguments throw before anything runs.
//   Forward-only / dx-only / dW-only runs give bit-identical results and leave the other outputs untouched; two
//   runs are bit-identical.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench/sysinfo.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/cpu/cross_entropy.h"
#include "ops/cpu/gemm_ref.h"
#include "ops/cuda/context.h"
#include "ops/cuda/cross_entropy.h"
#include "ops/cuda/fill.h"
#include "../support/config_error.h"

namespace {

using tb::DType;
using tb::TensorView;
using namespace tb::ops;
using bf16 = __nv_bfloat16;

#define SKIP_WITHOUT_GPU() \
  if (tb::bench::visible_gpu_count() == 0) GTEST_SKIP() << tb::bench::no_gpu_reason()

constexpr double kU = 0x1p-9;  // bf16 unit roundoff

// S[j] = sum_i a[i] M[i, j] and (when b) T[j] = sum_i b[i] |M[i, j]| over the rows of M [n, h] (row-major),
// in double, rows split over the cores, partial sums added in a fixed order.
void weighted_rows(const float* m, std::int64_t n, std::int64_t h, const std::vector<double>& a,
                   const std::vector<double>* b, std::vector<double>& S, std::vector<double>* T) {
  const int threads = std::max(1, int(std::min<std::int64_t>(n, std::thread::hardware_concurrency())));
  std::vector<std::vector<double>> ps(static_cast<std::size_t>(threads), std::vector<double>(std::size_t(h))), pt = ps;
  std::vector<std::thread> pool;
  for (int w = 0; w < threads; ++w)
    pool.emplace_back([&, w] {
      auto& s = ps[std::size_t(w)];
      auto& t = pt[std::size_t(w)];
      for (std::int64_t i = w; i < n; i += threads) {
        const float* row = m + i * h;
        const double ai = a[std::size_t(i)], bi = b ? (*b)[std::size_t(i)] : 0.0;
        for (std::int64_t j = 0; j < h; ++j) s[std::size_t(j)] += ai * double(row[j]);
        if (b)
          for (std::int64_t j = 0; j < h; ++j) t[std::size_t(j)] += bi * std::fabs(double(row[j]));
      }
    });
  for (auto& th : pool) th.join();
  S.assign(std::size_t(h), 0.0);
  if (T) T->assign(std::size_t(h), 0.0);
  for (int w = 0; w < threads; ++w)
    for (std::int64_t j = 0; j < h; ++j) {
      S[std::size_t(j)] += ps[std::size_t(w)][std::size_t(j)];
      if (T) (*T)[std::size_t(j)] += pt[std::size_t(w)][std::size_t(j)];
    }
}

// Runs fn(i) for i in [0, n) on all cores.
void parallel_for(std::int64_t n, const std::function<void(std::int64_t)>& fn) {
  const int threads = std::max(1, int(std::min<std::int64_t>(n, std::thread::hardware_concurrency())));
  std::vector<std::thread> pool;
  for (int w = 0; w < threads; ++w)
    pool.emplace_back([&, w] {
      for (std::int64_t i = w; i < n; i += threads) fn(i);
    });
  for (auto& th : pool) th.join();
}

// sum a[i] * b[i] and sum |a[i] * b[i]| in double, four accumulators.
std::pair<double, double> dot_abs(const float* a, const float* b, std::int64_t n) {
  double s[4] = {}, t[4] = {};
  const std::int64_t n4 = n / 4 * 4;
  for (std::int64_t i = 0; i < n4; i += 4)
    for (int k = 0; k < 4; ++k) {
      const double p = double(a[i + k]) * double(b[i + k]);
      s[k] += p;
      t[k] += std::fabs(p);
    }
  for (std::int64_t i = n4; i < n; ++i) {
    const double p = double(a[i]) * double(b[i]);
    s[0] += p;
    t[0] += std::fabs(p);
  }
  return {(s[0] + s[1]) + (s[2] + s[3]), (t[0] + t[1]) + (t[2] + t[3])};
}

template <class T>
std::vector<T> to_host(const void* dev, std::size_t count, cudaStream_t stream) {
  std::vector<T> h(count);
  TB_CHECK(cudaMemcpyAsync(h.data(), dev, count * sizeof(T), cudaMemcpyDeviceToHost, stream));
  TB_CHECK(cudaStreamSynchronize(stream));
  return h;
}

std::vector<float> bf16_to_floats(const std::vector<std::uint16_t>& bits) {
  std::vector<float> f(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) f[i] = tb::bf16_to_float(bits[i]);
  return f;
}

std::vector<std::int32_t> make_targets(std::int64_t t, std::int64_t vocab, std::uint64_t seed) {
  std::vector<std::int32_t> tg(static_cast<std::size_t>(t));
  for (std::int64_t r = 0; r < t; ++r)
    tg[std::size_t(r)] = std::int32_t(splitmix64(seed + std::uint64_t(r)) % std::uint64_t(vocab));
  tg[0] = 0;  // the first and last vocabulary entries (head / tail of the vectorised rows)
  if (t > 1) tg[std::size_t(t - 1)] = std::int32_t(vocab - 1);
  return tg;
}

// Element checks: |got - ref| <= tol, NaN fails; the worst ratio and where.
struct Check {
  std::string what;
  std::int64_t samples = 0, failures = 0, worst = -1;
  double worst_ratio = 0, worst_got = 0, worst_ref = 0, worst_tol = 0;
  void add(std::int64_t at, double got, double ref, double tol) {
    ++samples;
    const double err = std::fabs(got - ref);
    const double ratio = std::isnan(err) ? std::numeric_limits<double>::infinity() : err / tol;
    if (!(err <= tol)) ++failures;
    if (worst < 0 || ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = at, worst_got = got, worst_ref = ref, worst_tol = tol;
    }
  }
  bool ok() const { return samples > 0 && failures == 0; }
  std::string message() const {
    std::ostringstream o;
    o << what << "[" << worst << "] = " << worst_got << " vs reference " << worst_ref << " (tol " << worst_tol << ", "
      << worst_ratio << "x); " << failures << " of " << samples << " out of tolerance";
    return o.str();
  }
};

// ---------------------------------------------------------------- small shapes: full double reference + bounds
struct CeCase {
  std::int64_t t, vocab, hidden;
  int chunk;
  float grad_scale;
};

std::string case_name(const testing::TestParamInfo<CeCase>& info) {
  const auto& c = info.param;
  std::ostringstream o;
  o << "t" << c.t << "_V" << c.vocab << "_h" << c.hidden << "_chunk" << c.chunk << "_scale"
    << int(c.grad_scale * 100);
  return o.str();
}

// The CPU reference on the GPU's exact bf16 inputs, with per-element tolerances.
struct Reference {
  double loss = 0;
  std::vector<double> token_loss, token_tol, dx, dx_tol, dw, dw_tol;  // dw: the accumulated part only
};

Reference reference(const std::vector<float>& x, const std::vector<float>& w, const std::vector<std::int32_t>& tg,
                    const CeCase& c, std::int64_t chunks) {
  const std::int64_t t = c.t, V = c.vocab, h = c.hidden;
  Reference ref;
  // Values: ops::cpu::lm_head_cross_entropy in double (the spec).
  std::vector<double> xd(x.begin(), x.end()), wd(w.begin(), w.end());
  ref.dx.assign(std::size_t(t * h), 0.0);
  ref.dw.assign(std::size_t(V * h), 0.0);
  ref.loss = tb::ops::cpu::lm_head_cross_entropy<double>(
      TensorView<double>(ref.dx.data(), {t, h}), TensorView<double>(ref.dw.data(), {V, h}),
      TensorView<const double>(xd.data(), {t, h}), TensorView<const double>(wd.data(), {V, h}), tg, c.chunk,
      c.grad_scale);
  // Tolerances: logits z, softmax p, per-row logit error bound dz.
  const double scale = double(c.grad_scale) / double(t);
  const double acc_h = gemm_tol_acc(DType::bf16, DType::bf16, false, h);
  const double acc_v = gemm_tol_acc(DType::bf16, DType::bf16, false, V);
  const double acc_t = gemm_tol_acc(DType::bf16, DType::bf16, false, t) + double(chunks) * 0x1p-23;
  std::vector<double> e(static_cast<std::size_t>(t * V)), dl_abs(static_cast<std::size_t>(t * V));
  ref.token_loss.resize(std::size_t(t));
  ref.token_tol.resize(std::size_t(t));
  for (std::int64_t r = 0; r < t; ++r) {
    std::vector<double> z(static_cast<std::size_t>(V));
    double zmax = -INFINITY, zabs = 0, smax = 0;
    for (std::int64_t v = 0; v < V; ++v) {
      const auto [d, a] = dot_abs(&x[std::size_t(r * h)], &w[std::size_t(v * h)], h);
      z[std::size_t(v)] = d;
      zmax = std::max(zmax, d);
      zabs = std::max(zabs, std::fabs(d));
      smax = std::max(smax, a);
    }
    double sum = 0;
    for (double zv : z) sum += std::exp(zv - zmax);
    const double lse = zmax + std::log(sum);
    const std::int32_t target = tg[std::size_t(r)];
    const double dz = kU * zabs + acc_h * smax;
    ref.token_loss[std::size_t(r)] = lse - z[std::size_t(target)];
    ref.token_tol[std::size_t(r)] = 3 * dz + 1e-6 * (std::fabs(lse) + 1);
    for (std::int64_t v = 0; v < V; ++v) {
      const double p = std::exp(z[std::size_t(v)] - lse);
      const double q = std::fabs(p - (v == target ? 1.0 : 0.0));
      e[std::size_t(r * V + v)] = scale * (4 * dz * p + 2 * kU * q);
      dl_abs[std::size_t(r * V + v)] = scale * q;
    }
  }
  ref.dx_tol.assign(std::size_t(t * h), 0.0);
  for (std::int64_t r = 0; r < t; ++r)
    for (std::int64_t j = 0; j < h; ++j) {
      double s = 0;
      for (std::int64_t v = 0; v < V; ++v)
        s += (e[std::size_t(r * V + v)] + acc_v * dl_abs[std::size_t(r * V + v)]) *
             std::fabs(w[std::size_t(v * h + j)]);
      ref.dx_tol[std::size_t(r * h + j)] = 2 * kU * std::fabs(ref.dx[std::size_t(r * h + j)]) + s + 1e-30;
    }
  ref.dw_tol.assign(std::size_t(V * h), 0.0);
  for (std::int64_t v = 0; v < V; ++v)
    for (std::int64_t j = 0; j < h; ++j) {
      double s = 0;
      for (std::int64_t r = 0; r < t; ++r)
        s += (e[std::size_t(r * V + v)] + acc_t * dl_abs[std::size_t(r * V + v)]) *
             std::fabs(x[std::size_t(r * h + j)]);
      ref.dw_tol[std::size_t(v * h + j)] = s + 1e-30;
    }
  return ref;
}

// What one GPU run produced (host copies).
struct Result {
  float loss = 0;
  std::vector<float> token_loss, dw;  // dw: the whole buffer (D0 + accumulated)
  std::vector<std::uint16_t> dx;
};

// Device inputs and outputs of one case; outputs poisoned, dW set to D0.
struct Problem {
  CeCase c;
  LmHeadCeScratch layout;
  DeviceBuffer x, w, targets, dx, dw, scratch, loss;
  std::vector<float> xh, wh, d0;
  std::vector<std::int32_t> tg;

  // W uniform in [-w_range, w_range]; dW starts at D0 uniform in [-d0_range, d0_range] (0: zeros).
  Problem(DeviceContext& dc, const CeCase& cc, float w_range, std::uint64_t seed, float d0_range = 1e-3f)
      : c(cc),
        layout(lm_head_ce_scratch(cc.t, cc.vocab, cc.hidden, cc.chunk)),
        x(dc.device(), std::size_t(cc.t * cc.hidden) * 2),
        w(dc.device(), std::size_t(cc.vocab * cc.hidden) * 2),
        targets(dc.device(), std::size_t(cc.t) * 4),
        dx(dc.device(), std::size_t(cc.t * cc.hidden) * 2),
        dw(dc.device(), std::size_t(cc.vocab * cc.hidden) * 4),
        scratch(dc.device(), layout.bytes),
        loss(dc.device(), 256) {
    fill_uniform(x.get(), DType::bf16, std::size_t(c.t * c.hidden), seed, -1.0f, 1.0f, dc.stream());
    fill_uniform(w.get(), DType::bf16, std::size_t(c.vocab * c.hidden), seed + 1, -w_range, w_range, dc.stream());
    if (d0_range > 0)
      fill_uniform(dw.get(), DType::f32, std::size_t(c.vocab * c.hidden), seed + 2, -d0_range, d0_range, dc.stream());
    else
      TB_CHECK(cudaMemsetAsync(dw.get(), 0, dw.bytes(), dc.stream()));
    tg = make_targets(c.t, c.vocab, seed + 3);
    TB_CHECK(cudaMemcpyAsync(targets.get(), tg.data(), tg.size() * 4, cudaMemcpyHostToDevice, dc.stream()));
    xh = bf16_to_floats(to_host<std::uint16_t>(x.get(), std::size_t(c.t * c.hidden), dc.stream()));
    wh = bf16_to_floats(to_host<std::uint16_t>(w.get(), std::size_t(c.vocab * c.hidden), dc.stream()));
    d0 = to_host<float>(dw.get(), std::size_t(c.vocab * c.hidden), dc.stream());
    poison(dc);
  }
  void poison(DeviceContext& dc) {
    TB_CHECK(cudaMemsetAsync(dx.get(), 0xff, dx.bytes(), dc.stream()));  // NaN
    TB_CHECK(cudaMemsetAsync(scratch.get(), 0xff, scratch.bytes(), dc.stream()));
    TB_CHECK(cudaMemsetAsync(loss.get(), 0xff, loss.bytes(), dc.stream()));
    TB_CHECK(cudaMemcpyAsync(dw.get(), d0.data(), d0.size() * 4, cudaMemcpyHostToDevice, dc.stream()));
    TB_CHECK(cudaStreamSynchronize(dc.stream()));
  }
  TensorView<bf16> dx_view() const { return TensorView<bf16>(dx.as<bf16>(), {c.t, c.hidden}); }
  TensorView<float> dw_view() const { return TensorView<float>(dw.as<float>(), {c.vocab, c.hidden}); }
  TensorView<const bf16> x_view() const { return TensorView<const bf16>(x.as<const bf16>(), {c.t, c.hidden}); }
  TensorView<const bf16> w_view() const { return TensorView<const bf16>(w.as<const bf16>(), {c.vocab, c.hidden}); }
  void run(DeviceContext& dc, bool want_dx = true, bool want_dw = true, bool dw_overwrite = false) {
    lm_head_cross_entropy(dc, want_dx ? dx_view() : TensorView<bf16>{}, want_dw ? dw_view() : TensorView<float>{},
                          x_view(), w_view(), targets.as<const std::int32_t>(), c.chunk, c.grad_scale,
                          loss.as<float>(), Workspace{scratch.get(), scratch.bytes()}, dw_overwrite);
  }
  Result fetch(DeviceContext& dc) const {
    Result r;
    r.loss = to_host<float>(loss.get(), 1, dc.stream())[0];
    r.token_loss =
        to_host<float>(scratch.as<unsigned char>() + layout.token_loss_offset, std::size_t(c.t), dc.stream());
    r.dx = to_host<std::uint16_t>(dx.get(), std::size_t(c.t * c.hidden), dc.stream());
    r.dw = to_host<float>(dw.get(), std::size_t(c.vocab * c.hidden), dc.stream());
    return r;
  }
  std::int64_t chunks() const { return (c.t + layout.chunk - 1) / layout.chunk; }
};

struct Checks {
  Check token{"token_loss"}, dx{"dx"}, dw{"dW"};
  double mean_rel = 0, dw_fro_rel = 0;
  bool mean_ok = false, dw_fro_ok = false;
  bool all_ok() const { return token.ok() && dx.ok() && dw.ok() && mean_ok && dw_fro_ok; }
};

Checks compare(const Result& got, const Reference& ref, const Problem& p) {
  Checks k;
  k.mean_rel = std::fabs(double(got.loss) - ref.loss) / std::fabs(ref.loss);
  double tol_mean = 0;
  for (double tt : ref.token_tol) tol_mean += tt / double(p.c.t);
  k.mean_ok = k.mean_rel <= 1e-3 && std::fabs(double(got.loss) - ref.loss) <= tol_mean + 1e-6;
  for (std::int64_t r = 0; r < p.c.t; ++r)
    k.token.add(r, got.token_loss[std::size_t(r)], ref.token_loss[std::size_t(r)], ref.token_tol[std::size_t(r)]);
  for (std::size_t i = 0; i < got.dx.size(); ++i)
    k.dx.add(std::int64_t(i), tb::bf16_to_float(got.dx[i]), ref.dx[i], ref.dx_tol[i]);
  double err2 = 0, ref2 = 0;
  for (std::size_t i = 0; i < got.dw.size(); ++i) {
    const double acc = double(got.dw[i]) - double(p.d0[i]);  // the accumulated part
    // fp32 accumulation into D0 rounds once per chunk
    const double tol =
        ref.dw_tol[i] + double(p.chunks() + 2) * 0x1p-24 * (std::fabs(double(p.d0[i])) + std::fabs(ref.dw[i]));
    k.dw.add(std::int64_t(i), acc, ref.dw[i], tol);
    err2 += (acc - ref.dw[i]) * (acc - ref.dw[i]);
    ref2 += ref.dw[i] * ref.dw[i];
  }
  k.dw_fro_rel = std::sqrt(err2 / ref2);
  k.dw_fro_ok = k.dw_fro_rel <= 1e-2;
  return k;
}

class LmHeadCeGpu : public testing::TestWithParam<CeCase> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    dc_ = std::make_unique<DeviceContext>(0);
  }
  std::unique_ptr<DeviceContext> dc_;
};

TEST_P(LmHeadCeGpu, MatchesTheCpuReferenceOnEveryElement) {
  Problem p(*dc_, GetParam(), 0.5f, 100);
  p.run(*dc_);
  const Result got = p.fetch(*dc_);
  const Reference ref = reference(p.xh, p.wh, p.tg, p.c, p.chunks());
  const Checks k = compare(got, ref, p);
  EXPECT_TRUE(k.mean_ok) << "loss " << got.loss << " vs " << ref.loss << " (relative " << k.mean_rel << ")";
  EXPECT_TRUE(k.token.ok()) << k.token.message();
  EXPECT_TRUE(k.dx.ok()) << k.dx.message();
  EXPECT_TRUE(k.dw.ok()) << k.dw.message();
  EXPECT_TRUE(k.dw_fro_ok) << "dW relative Frobenius error " << k.dw_fro_rel;
  double mean = 0;
  for (float l : got.token_loss) mean += double(l);
  mean /= double(p.c.t);
  EXPECT_NEAR(got.loss, mean, 1e-6 * std::fabs(mean)) << "loss_out is not the mean of the token losses";

  // Negative: the same outputs against the reference with one target changed fail the checks (the new target is
  // the vocabulary entry whose logit is farthest from the old one's, so the loss moves too).
  auto tg2 = p.tg;
  const std::int64_t r = p.c.t / 2, h = p.c.hidden;
  const auto logit = [&](std::int64_t v) {
    return dot_abs(&p.xh[std::size_t(r * h)], &p.wh[std::size_t(v * h)], h).first;
  };
  const double z_old = logit(tg2[std::size_t(r)]);
  std::int64_t far = 0;
  for (std::int64_t v = 1; v < p.c.vocab; ++v)
    if (std::fabs(logit(v) - z_old) > std::fabs(logit(far) - z_old)) far = v;
  tg2[std::size_t(r)] = std::int32_t(far);
  const Checks wrong = compare(got, reference(p.xh, p.wh, tg2, p.c, p.chunks()), p);
  EXPECT_FALSE(wrong.dx.ok());
  EXPECT_FALSE(wrong.dw.ok());
  EXPECT_FALSE(wrong.token.ok());
}

TEST_P(LmHeadCeGpu, PartialRunsAreBitIdenticalAndLeaveOtherOutputsAlone) {
  Problem p(*dc_, GetParam(), 0.5f, 200);
  p.run(*dc_);
  const Result full = p.fetch(*dc_);
  p.poison(*dc_);
  p.run(*dc_);
  const Result again = p.fetch(*dc_);
  EXPECT_EQ(std::memcmp(&full.loss, &again.loss, 4), 0) << "two runs differ: " << full.loss << " " << again.loss;
  EXPECT_EQ(full.dx, again.dx);
  EXPECT_EQ(full.dw, again.dw);

  p.poison(*dc_);
  p.run(*dc_, false, false);
  const Result fwd = p.fetch(*dc_);
  EXPECT_EQ(std::memcmp(&full.loss, &fwd.loss, 4), 0);
  EXPECT_EQ(full.token_loss, fwd.token_loss);
  EXPECT_TRUE(std::all_of(fwd.dx.begin(), fwd.dx.end(), [](std::uint16_t b) { return b == 0xffff; }));
  EXPECT_EQ(fwd.dw, p.d0);

  p.poison(*dc_);
  p.run(*dc_, true, false);
  const Result dx_only = p.fetch(*dc_);
  EXPECT_EQ(full.dx, dx_only.dx);
  EXPECT_EQ(dx_only.dw, p.d0);

  p.poison(*dc_);
  p.run(*dc_, false, true);
  const Result dw_only = p.fetch(*dc_);
  EXPECT_EQ(full.dw, dw_only.dw);
  EXPECT_TRUE(std::all_of(dw_only.dx.begin(), dw_only.dx.end(), [](std::uint16_t b) { return b == 0xffff; }));
}

// dw_overwrite: dW is written, whatever it held (D0 here), equal to accumulating into zeros but for the fp32
// summation order of the beta = 0 GEMM plan; D0 left in would be off by ~100% (|D0| ~ |dW|).
TEST_P(LmHeadCeGpu, OverwriteWritesWhatAccumulatingIntoZerosGives) {
  Problem zeros(*dc_, GetParam(), 0.5f, 300, 0.0f), over(*dc_, GetParam(), 0.5f, 300, 1e-2f);
  zeros.run(*dc_);
  over.run(*dc_, true, true, true);
  const Result want = zeros.fetch(*dc_), got = over.fetch(*dc_);
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < want.dw.size(); ++i) {
    diff += (double(got.dw[i]) - want.dw[i]) * (double(got.dw[i]) - want.dw[i]);
    norm += double(want.dw[i]) * want.dw[i];
  }
  EXPECT_LE(std::sqrt(diff), 1e-5 * std::sqrt(norm));
  EXPECT_EQ(got.dx, want.dx);
  EXPECT_EQ(std::memcmp(&got.loss, &want.loss, 4), 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, LmHeadCeGpu,
                         testing::Values(CeCase{37, 1000, 64, 37, 1.0f},    // one chunk
                                         CeCase{37, 1000, 64, 16, 1.0f},    // 16 + 16 + 5
                                         CeCase{37, 1000, 64, 5, 0.5f},     // rounded up to 6: six of 6 and one of 1
                                         CeCase{37, 1000, 64, 1, 1.0f},     // rounded up to 2
                                         CeCase{37, 1001, 64, 10, 1.0f},    // V not a multiple of 8
                                         CeCase{37, 1001, 40, 10, 2.0f},    // h = 40: chunk rounded up to 16
                                         CeCase{37, 5, 16, 7, 1.0f},        // V < 8: no 16-byte vector in a row
                                         CeCase{1, 1000, 64, 4096, 1.0f},   // one token
                                         CeCase{64, 4104, 64, 4096, 1.0f},  // the 512-thread kernel
                                         CeCase{19, 32771, 16, 8, 1.0f}),   // the 1024-thread kernel, odd V
                         case_name);

TEST(LmHeadCeGpuChecks, CorruptedElementFailsTheCheck) {
  SKIP_WITHOUT_GPU();
  DeviceContext dc(0);
  const CeCase c{37, 1000, 64, 16, 1.0f};
  Problem p(dc, c, 0.5f, 300);
  p.run(dc);
  Result got = p.fetch(dc);
  const Reference ref = reference(p.xh, p.wh, p.tg, c, p.chunks());
  ASSERT_TRUE(compare(got, ref, p).all_ok());
  const std::size_t i = std::size_t(36 * c.hidden + 5);  // the last row: the tail chunk
  got.dx[i] = tb::float_to_bf16(tb::bf16_to_float(got.dx[i]) + 0.01f);
  const Checks k = compare(got, ref, p);
  EXPECT_EQ(k.dx.failures, 1);
  EXPECT_EQ(k.dx.worst, std::int64_t(i));
}

TEST(LmHeadCeGpuChecks, OutOfRangeTargetGivesANanLoss) {
  SKIP_WITHOUT_GPU();
  DeviceContext dc(0);
  Problem p(dc, CeCase{37, 1000, 64, 16, 1.0f}, 0.5f, 400);
  p.tg[3] = 1000;
  TB_CHECK(cudaMemcpy(p.targets.get(), p.tg.data(), p.tg.size() * 4, cudaMemcpyHostToDevice));
  p.run(dc);
  const Result got = p.fetch(dc);
  EXPECT_TRUE(std::isnan(got.loss));
  EXPECT_TRUE(std::isnan(got.token_loss[3]));
  EXPECT_TRUE(std::isfinite(got.token_loss[2]) && std::isfinite(got.token_loss[4]));
}

TEST(LmHeadCeGpuChecks, BadArgumentsThrowBeforeRunning) {
  SKIP_WITHOUT_GPU();
  DeviceContext dc(0);
  const CeCase c{37, 1000, 64, 16, 1.0f};
  Problem p(dc, c, 0.5f, 500);
  const Workspace ws{p.scratch.get(), p.scratch.bytes()};
  const auto* tg = p.targets.as<const std::int32_t>();
  float* loss = p.loss.as<float>();
  const auto expect_config = [](auto&& fn, const char* needle) {
    const std::string msg = tb::testing_support::config_error(fn);
    EXPECT_NE(msg.find(needle), std::string::npos) << msg << " (expected one mentioning '" << needle << "')";
  };
  TensorView<const bf16> w_wrong_h(p.w.as<const bf16>(), {c.vocab / 2, 2 * c.hidden});
  expect_config([&] {
    lm_head_cross_entropy(dc, p.dx_view(), p.dw_view(), p.x_view(), w_wrong_h, tg, 16, 1, loss, ws);
  },
                "hidden size");
  expect_config([&] { lm_head_cross_entropy(dc, p.dx_view(), p.dw_view(), p.x_view(), p.w_view(), tg, 16, 1, loss,
                                            Workspace{ws.ptr, ws.bytes - 1}); },
                "scratch");
  expect_config([&] {
    lm_head_cross_entropy(dc, p.dx_view(), p.dw_view(), p.x_view(), p.w_view(), tg, 0, 1, loss, ws);
  },
                "chunk");
  TensorView<const bf16> x_off(p.x.as<const bf16>() + 8, {c.t - 1, c.hidden});
  expect_config([&] { lm_head_cross_entropy(dc, p.dx_view().slice0(1, c.t), p.dw_view(), x_off, p.w_view(), tg, 16, 1,
                                            loss, ws); },
                "aligned");
  TensorView<float> dw_small(p.dw.as<float>(), {c.vocab - 1, c.hidden});
  expect_config([&] { lm_head_cross_entropy(dc, p.dx_view(), dw_small, p.x_view(), p.w_view(), tg, 16, 1, loss, ws); },
                "dW");
  expect_config([&] { lm_head_cross_entropy(dc, p.dx_view(), p.dw_view(), p.x_view(), p.w_view(), nullptr, 16, 1, loss,
                                            ws); },
                "targets");
  // Nothing ran: the poisoned loss is still NaN.
  EXPECT_TRUE(std::isnan(to_host<float>(p.loss.get(), 1, dc.stream())[0]));
}

// Host only: the scratch layout and the chunk rounding.
TEST(LmHeadCeScratch, ChunkIsRoundedToKeepRowsAligned) {
  EXPECT_EQ(lm_head_ce_scratch(37, 1000, 64, 5).chunk, 6);      // 128 / gcd(64, 128) = 2
  EXPECT_EQ(lm_head_ce_scratch(37, 1000, 64, 16).chunk, 16);
  EXPECT_EQ(lm_head_ce_scratch(37, 1001, 40, 10).chunk, 16);    // 128 / gcd(40, 128) = 16
  EXPECT_EQ(lm_head_ce_scratch(37, 1000, 64, 4096).chunk, 37);  // at most t
  EXPECT_EQ(lm_head_ce_scratch(8192, 128256, 4096, 3000).chunk, 3000);
  const auto s = lm_head_ce_scratch(8192, 128256, 4096);
  EXPECT_EQ(s.chunk, kLmHeadDefaultChunk);
  EXPECT_EQ(s.logits_bytes, std::size_t(kLmHeadDefaultChunk) * 128256 * 2);
  EXPECT_EQ(s.token_loss_offset % 256, 0u);
  EXPECT_GE(s.token_loss_offset, s.logits_bytes);
  EXPECT_GE(s.bytes, s.token_loss_offset + 8192 * 4);
  EXPECT_THROW(lm_head_ce_scratch(37, 1000, 64, 0), tb::Error);
  EXPECT_THROW(lm_head_ce_scratch(0, 1000, 64, 16), tb::Error);
}

// ---------------------------------------------------------------- a large shape, sampled
TEST(LmHeadCeGpuLarge, Llama3VocabSampled) {
  SKIP_WITHOUT_GPU();
  DeviceContext dc(0);
  const CeCase c{8192, 128256, 4096, 3000, 1.0f};  // chunks of 3000, 3000, 2192
  const std::int64_t t = c.t, V = c.vocab, h = c.hidden;
  Problem p(dc, c, 0.025f, 600, 0.0f);  // logits ~ N(0, 0.53^2); dW from zero (its entries are ~1e-8..1e-4)
  p.run(dc);
  const Result got = p.fetch(dc);
  const double scale = double(c.grad_scale) / double(t);
  const double acc_h = gemm_tol_acc(DType::bf16, DType::bf16, false, h);
  const double acc_v = gemm_tol_acc(DType::bf16, DType::bf16, false, V);

  double mean = 0;
  for (float l : got.token_loss) mean += double(l);
  mean /= double(t);
  EXPECT_NEAR(got.loss, mean, 1e-6 * std::fabs(mean));
  EXPECT_GT(got.loss, 0.5 * std::log(double(V)));  // near log V for small logits
  EXPECT_LT(got.loss, 2.0 * std::log(double(V)));

  // Sampled tokens: the loss and the whole dx row, against every vocabulary entry.
  for (std::int64_t r : {std::int64_t(0), std::int64_t(2999), std::int64_t(3000), t - 1}) {
    SCOPED_TRACE("token " + std::to_string(r));
    std::vector<double> z(static_cast<std::size_t>(V)), zs(static_cast<std::size_t>(V));
    parallel_for(V, [&](std::int64_t v) {
      const auto [d, a] = dot_abs(&p.xh[std::size_t(r * h)], &p.wh[std::size_t(v * h)], h);
      z[std::size_t(v)] = d;
      zs[std::size_t(v)] = a;
    });
    const double zmax = *std::max_element(z.begin(), z.end());
    double zabs = 0, smax = 0, sum = 0;
    for (std::int64_t v = 0; v < V; ++v) {
      zabs = std::max(zabs, std::fabs(z[std::size_t(v)]));
      smax = std::max(smax, zs[std::size_t(v)]);
      sum += std::exp(z[std::size_t(v)] - zmax);
    }
    const double lse = zmax + std::log(sum), dz = kU * zabs + acc_h * smax;
    const std::int32_t target = p.tg[std::size_t(r)];
    const double loss_ref = lse - z[std::size_t(target)];
    EXPECT_NEAR(got.token_loss[std::size_t(r)], loss_ref, 3 * dz + 1e-6 * (lse + 1));
    // dx[r, j] = scale * sum_v (p_v - onehot_v) W[v, j]
    for (int variant = 0; variant < 2; ++variant) {  // 1: the wrong target (negative check)
      const std::int32_t tgt = variant == 0 ? target : std::int32_t((target + 1) % V);
      std::vector<double> a(static_cast<std::size_t>(V)), b(static_cast<std::size_t>(V)), dx, err;
      for (std::int64_t v = 0; v < V; ++v) {
        const double pv = std::exp(z[std::size_t(v)] - lse);
        const double q = pv - (v == tgt ? 1.0 : 0.0);
        a[std::size_t(v)] = scale * q;
        b[std::size_t(v)] = scale * (4 * dz * pv + (2 * kU + acc_v) * std::fabs(q));
      }
      weighted_rows(p.wh.data(), V, h, a, &b, dx, &err);
      Check k{"dx row"};
      for (std::int64_t j = 0; j < h; ++j)
        k.add(j, tb::bf16_to_float(got.dx[std::size_t(r * h + j)]), dx[std::size_t(j)],
              2 * kU * std::fabs(dx[std::size_t(j)]) + err[std::size_t(j)] + 1e-30);
      if (variant == 0)
        EXPECT_TRUE(k.ok()) << k.message();
      else
        EXPECT_FALSE(k.ok()) << "the dx check passes with the wrong target";
    }
  }

  // Sampled dW rows: softmax of every token at vocabulary entry v, from the GPU's lse_r = loss_r + z[r, target_r].
  std::vector<double> lse(static_cast<std::size_t>(t));
  parallel_for(t, [&](std::int64_t r) {
    const std::int32_t target = p.tg[std::size_t(r)];
    const double z_target = dot_abs(&p.xh[std::size_t(r * h)], &p.wh[std::size_t(target * h)], h).first;
    lse[std::size_t(r)] = double(got.token_loss[std::size_t(r)]) + z_target;
  });
  for (std::int64_t v : {std::int64_t(p.tg[0]), std::int64_t(p.tg[std::size_t(t - 1)]), std::int64_t(1),
                         std::int64_t(77777), V - 2}) {
    SCOPED_TRACE("dW row " + std::to_string(v));
    std::vector<double> q(static_cast<std::size_t>(t));
    parallel_for(t, [&](std::int64_t r) {
      const double zv = dot_abs(&p.xh[std::size_t(r * h)], &p.wh[std::size_t(v * h)], h).first;
      q[std::size_t(r)] = scale * (std::exp(zv - lse[std::size_t(r)]) - (p.tg[std::size_t(r)] == v ? 1.0 : 0.0));
    });
    std::vector<double> ref;
    weighted_rows(p.xh.data(), t, h, q, nullptr, ref, nullptr);
    double err2 = 0, ref2 = 0;
    for (std::int64_t j = 0; j < h; ++j) {
      const double acc = double(got.dw[std::size_t(v * h + j)]) - double(p.d0[std::size_t(v * h + j)]);
      err2 += (acc - ref[std::size_t(j)]) * (acc - ref[std::size_t(j)]);
      ref2 += ref[std::size_t(j)] * ref[std::size_t(j)];
    }
    EXPECT_LE(std::sqrt(err2 / ref2), 1e-2) << "relative error of the dW row";
    EXPECT_GT(ref2, 0.0);
  }
}

}  // namespace
