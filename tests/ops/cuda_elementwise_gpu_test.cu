// Tests ops/cuda/{norm,activation,rope,embedding} on one GPU against the CPU reference (ops/cpu/*.h) run in
// double on the SAME bf16-rounded inputs (the device inputs are copied back and decoded):
//   norms: rmsnorm / layernorm / layernorm1p, plain, fused with the residual, fused without residual_in; forward
//     (y, r, mean, rstd) and backward (dr with and without dr_next, dw/db accumulated onto random values), with a
//     caller's workspace and with stream-ordered scratch; only-dw (dx empty) backward; the fused amax of y and dx
//     (exactly the host max of the stored output, NaN propagating); the FP8 forward (q, qt bit for bit the host
//     conversion of the bf16 op's y and fp8_cast's bytes, on the 64 x 64 and the 32 x 32 tile paths; r, mean, rstd
//     the bf16 op's bits) and its refusals (current scaling, bad cast arguments);
//   activations: swiglu / gelu / sqrelu forward and backward, also on views with padded rows;
//   rope: GQA on the Q+K part of a fused QKV buffer (V untouched bit for bit), Llama 3.1 scaling, forward and
//     backward, a long sequence; pos_offset > 0 (context parallel chunks) against rope_*_at at p + offset;
//   embeddings: forward (exact gather, NaN rows for out-of-range tokens), backward (repeated tokens, one token
//     crossing many chunks, invalid tokens skipped; bitwise identical when repeated), learned positions (also rows
//     from flat row `first` on, partial sequences: a sequence-parallel slice, against the _at forms);
//   bf16 gradients: norm dw/db, embedding and position gradients the fp32 kernels' sums rounded once.
// Shapes include 1 row, a prime row count, dim 8 and 8192 x 4096. Outputs are poisoned first (0xFF bytes: NaN), so
// an unwritten element fails. Tolerances: bf16 outputs |got - ref| <= 2^-7 |ref| + 1e-3 rms(ref); fp32 statistics
// 1e-4 relative; fp32 gradients 1e-3 relative + 1e-3 rms(ref) (rope adds the fp32-angle term, see there).
// Every check is shown to be able to fail: one corrupted element (on the host copy, and once on the device) is
// found. Skips cleanly without a GPU.
#include <gtest/gtest.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/sysinfo.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/cpu/activation.h"
#include "ops/cpu/embedding.h"
#include "ops/cpu/norm.h"
#include "ops/cpu/rope.h"
#include "ops/cuda/activation.h"
#include "ops/cuda/embedding.h"
#include "ops/cuda/fill.h"
#include "ops/cuda/norm.h"
#include "ops/cuda/rope.h"
#include "../support/config_error.h"

namespace {

namespace cpu = tb::ops::cpu;
namespace gpu = tb::ops;
using tb::TensorView;
using bf16 = __nv_bfloat16;
using Vec = std::vector<double>;
using NormKind = tb::ops::cpu::NormKind;

#define SKIP_WITHOUT_GPU() \
  if (tb::bench::visible_gpu_count() == 0) GTEST_SKIP() << tb::bench::no_gpu_reason()

// ---- device arrays ----

template <class T>
class Dev {
 public:
  explicit Dev(std::size_t n) : n_(n) {
    if (n_) TB_CHECK(cudaMalloc(&p_, n_ * sizeof(T)));
  }
  ~Dev() { cudaFree(p_); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  T* get() const { return p_; }
  std::size_t size() const { return n_; }
  void poison() { TB_CHECK(cudaMemset(p_, 0xff, n_ * sizeof(T))); }  // bf16 / fp32 NaN
  TensorView<T> view(std::initializer_list<std::int64_t> shape) const { return TensorView<T>(p_, shape); }
  TensorView<T> view2(std::int64_t rows, std::int64_t cols, std::int64_t stride) const {
    return TensorView<T>(p_, tb::Shape{rows, cols, 0, 0}, tb::Shape{stride, 1, 0, 0}, 2);
  }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

Vec decode(const Dev<bf16>& d) {
  TB_CHECK(cudaDeviceSynchronize());
  std::vector<std::uint16_t> bits(d.size());
  TB_CHECK(cudaMemcpy(bits.data(), d.get(), d.size() * 2, cudaMemcpyDeviceToHost));
  Vec v(d.size());
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = tb::bf16_to_float(bits[i]);
  return v;
}
Vec decode(const Dev<float>& d) {
  TB_CHECK(cudaDeviceSynchronize());
  std::vector<float> f(d.size());
  TB_CHECK(cudaMemcpy(f.data(), d.get(), d.size() * 4, cudaMemcpyDeviceToHost));
  return Vec(f.begin(), f.end());
}
std::vector<std::uint16_t> raw(const Dev<bf16>& d) {
  TB_CHECK(cudaDeviceSynchronize());
  std::vector<std::uint16_t> bits(d.size());
  TB_CHECK(cudaMemcpy(bits.data(), d.get(), d.size() * 2, cudaMemcpyDeviceToHost));
  return bits;
}

void fill(Dev<bf16>& d, std::uint64_t seed, float lo, float hi) {
  tb::ops::fill_uniform(d.get(), tb::DType::bf16, d.size(), seed, lo, hi, nullptr);
}
void fill(Dev<float>& d, std::uint64_t seed, float lo, float hi) {
  tb::ops::fill_uniform(d.get(), tb::DType::f32, d.size(), seed, lo, hi, nullptr);
}

std::size_t sz(std::int64_t v) { return std::size_t(v); }

TensorView<double> hv(Vec& v, std::initializer_list<std::int64_t> shape) { return TensorView<double>(v.data(), shape); }
TensorView<const double> hc(const Vec& v, std::initializer_list<std::int64_t> shape) {
  return TensorView<const double>(v.data(), shape);
}

// ---- checks ----

double rms(const Vec& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return v.empty() ? 0.0 : std::sqrt(s / double(v.size()));
}

struct Check {
  std::int64_t bad = 0, first = -1;
  double got = 0, want = 0, tol = 0;
  bool ok() const { return bad == 0; }
  std::string message(const std::string& what) const {
    std::ostringstream o;
    o << what << ": " << bad << " element(s) out of tolerance; first at " << first << ": got " << got << ", want "
      << want << " (tolerance " << tol << ")";
    return o.str();
  }
};

// |got - want| <= rel |want| + abs for every element; NaN never passes.
Check compare(const Vec& got, const Vec& want, double rel, double abs) {
  Check c;
  if (got.size() != want.size()) {
    c.bad = -1;
    return c;
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double tol = rel * std::abs(want[i]) + abs;
    if (!(std::abs(got[i] - want[i]) <= tol)) {
      if (c.bad++ == 0) c.first = std::int64_t(i), c.got = got[i], c.want = want[i], c.tol = tol;
    }
  }
  return c;
}

constexpr double kBf16Rel = 0x1p-7;
Check check_bf16(const Vec& got, const Vec& want) { return compare(got, want, kBf16Rel, 1e-3 * rms(want) + 1e-7); }
Check check_grad32(const Vec& got, const Vec& want) { return compare(got, want, 1e-3, 1e-3 * rms(want) + 1e-9); }

#define EXPECT_CHECK(expr, what)              \
  do {                                        \
    const Check c_ = (expr);                  \
    EXPECT_TRUE(c_.ok()) << c_.message(what); \
  } while (0)

// The check can fail: the element with the largest |want| moved by 4x its tolerance must be the one failure.
void expect_catches_corruption(Vec got, const Vec& want, double rel, double abs, const std::string& what) {
  ASSERT_FALSE(want.empty());
  const std::size_t i = std::size_t(
      std::max_element(want.begin(), want.end(), [](double a, double b) { return std::abs(a) < std::abs(b); }) -
      want.begin());
  got[i] = want[i] + 4 * (rel * std::abs(want[i]) + abs);
  const Check c = compare(got, want, rel, abs);
  EXPECT_EQ(c.bad, 1) << what << ": a corrupted element was not caught";
  EXPECT_EQ(c.first, std::int64_t(i)) << what;
}
void expect_catches_corruption_bf16(const Vec& got, const Vec& want, const std::string& what) {
  expect_catches_corruption(got, want, kBf16Rel, 1e-3 * rms(want) + 1e-7, what);
}

// Rows [rows, cols] out of a buffer with row stride `stride` (padded rows), contiguous.
Vec rows_of(const Vec& v, std::int64_t rows, std::int64_t cols, std::int64_t stride) {
  Vec out(sz(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r) std::copy_n(v.begin() + r * stride, cols, out.begin() + r * cols);
  return out;
}

// ======================= norms =======================

enum class NormForm { plain, fused, fused_no_residual };

struct NormCase {
  NormKind kind;
  std::int64_t rows, dim;
  NormForm form;
  bool bias;           // layernorms only
  bool dr_next;        // fused only
  bool own_workspace;  // pass a Workspace sized by norm_backward_workspace_bytes
};

std::string name(const NormCase& c) {
  const char* kinds[] = {"rmsnorm", "layernorm", "layernorm1p"};
  const char* forms[] = {"plain", "fused", "fused_no_residual"};
  std::ostringstream o;
  o << kinds[int(c.kind)] << " " << forms[int(c.form)] << " [" << c.rows << ", " << c.dim << "]"
    << (c.bias ? " bias" : "") << (c.dr_next ? " dr_next" : "") << (c.own_workspace ? " workspace" : "");
  return o.str();
}

void run_norm_case(const NormCase& c, std::uint64_t seed) {
  SCOPED_TRACE(name(c));
  const std::int64_t rows = c.rows, dim = c.dim;
  const std::size_t e = std::size_t(rows * dim);
  const bool ln = c.kind != NormKind::rmsnorm, has_b = ln && c.bias;
  const bool fused = c.form != NormForm::plain, has_res = c.form == NormForm::fused;
  const bool has_drn = c.form == NormForm::fused && c.dr_next;
  const float eps = 1e-5f;

  Dev<bf16> x(e), res(has_res ? e : 0), w(sz(dim)), b(has_b ? sz(dim) : 0);
  fill(x, seed, -2.f, 2.f);
  if (has_res) fill(res, seed + 1, -2.f, 2.f);
  if (c.kind == NormKind::layernorm1p)
    fill(w, seed + 2, -0.5f, 0.5f);  // stored as w - 1
  else
    fill(w, seed + 2, 0.5f, 1.5f);
  if (has_b) fill(b, seed + 3, -0.5f, 0.5f);
  Dev<bf16> y(e), r(fused ? e : 0);
  Dev<float> mean(sz(rows)), rstd(sz(rows));
  y.poison();
  if (fused) r.poison();
  mean.poison();
  rstd.poison();
  const TensorView<float> mean_v = ln ? mean.view({rows}) : TensorView<float>{};
  const TensorView<const bf16> b_v = has_b ? TensorView<const bf16>(b.view({dim})) : TensorView<const bf16>{};
  if (fused)
    gpu::add_norm_forward(c.kind, y.view({rows, dim}), r.view({rows, dim}), mean_v, rstd.view({rows}),
                          x.view({rows, dim}),
                          has_res ? TensorView<const bf16>(res.view({rows, dim})) : TensorView<const bf16>{},
                          w.view({dim}), b_v, eps, nullptr);
  else
    gpu::norm_forward(c.kind, y.view({rows, dim}), mean_v, rstd.view({rows}), x.view({rows, dim}), w.view({dim}), b_v,
                      eps, nullptr);

  const Vec hx = decode(x), hw = decode(w), hb = has_b ? decode(b) : Vec{};
  // r: x + residual_in (or x), then the reference normalises the GPU's bf16 r, as the backward will.
  Vec hr = hx;
  if (fused) {
    Vec want_r = hx;
    if (has_res) {
      const Vec hres = decode(res);
      for (std::size_t i = 0; i < e; ++i) want_r[i] += hres[i];
    }
    hr = decode(r);
    EXPECT_CHECK(check_bf16(hr, want_r), "r");
  }
  Vec want_y(e), want_mean(sz(rows)), want_rstd(sz(rows));
  cpu::norm_forward<double>(c.kind, hv(want_y, {rows, dim}), ln ? hv(want_mean, {rows}) : TensorView<double>{},
                            hv(want_rstd, {rows}), hc(hr, {rows, dim}), hc(hw, {dim}),
                            has_b ? hc(hb, {dim}) : TensorView<const double>{}, double(eps));
  const Vec got_y = decode(y), got_rstd = decode(rstd), got_mean = decode(mean);
  EXPECT_CHECK(check_bf16(got_y, want_y), "y");
  EXPECT_CHECK(compare(got_rstd, want_rstd, 1e-4, 0), "rstd");
  if (ln) EXPECT_CHECK(compare(got_mean, want_mean, 1e-4, 1e-5), "mean");
  expect_catches_corruption_bf16(got_y, want_y, "y");

  // ---- backward ----
  Dev<bf16> dy(e), drn(has_drn ? e : 0), dx(e);
  Dev<float> dw(sz(dim)), db(has_b ? sz(dim) : 0);
  fill(dy, seed + 4, -1.f, 1.f);
  if (has_drn) fill(drn, seed + 5, -1.f, 1.f);
  fill(dw, seed + 6, -1.f, 1.f);  // accumulated onto
  if (has_b) fill(db, seed + 7, -1.f, 1.f);
  dx.poison();
  const Vec dw0 = decode(dw), db0 = has_b ? decode(db) : Vec{};
  const std::size_t ws_bytes = gpu::norm_backward_workspace_bytes(rows, dim);
  Dev<unsigned char> ws(c.own_workspace ? ws_bytes : 0);
  const tb::ops::Workspace workspace = c.own_workspace ? tb::ops::Workspace{ws.get(), ws_bytes} : tb::ops::Workspace{};
  const TensorView<const float> mean_c = ln ? TensorView<const float>(mean.view({rows})) : TensorView<const float>{};
  const TensorView<float> db_v = has_b ? db.view({dim}) : TensorView<float>{};
  if (fused)
    gpu::add_norm_backward(c.kind, dx.view({rows, dim}), dw.view({dim}), db_v, dy.view({rows, dim}),
                           has_drn ? TensorView<const bf16>(drn.view({rows, dim})) : TensorView<const bf16>{},
                           r.view({rows, dim}), w.view({dim}), mean_c, rstd.view({rows}), nullptr, workspace);
  else
    gpu::norm_backward(c.kind, dx.view({rows, dim}), dw.view({dim}), db_v, dy.view({rows, dim}), x.view({rows, dim}),
                       w.view({dim}), mean_c, rstd.view({rows}), nullptr, workspace);

  const Vec hdy = decode(dy), hdrn = has_drn ? decode(drn) : Vec{};
  Vec want_dx(e), want_dw = dw0, want_db = db0;
  cpu::add_norm_backward<double>(
      c.kind, hv(want_dx, {rows, dim}), hv(want_dw, {dim}), has_b ? hv(want_db, {dim}) : TensorView<double>{},
      hc(hdy, {rows, dim}), has_drn ? hc(hdrn, {rows, dim}) : TensorView<const double>{}, hc(hr, {rows, dim}),
      hc(hw, {dim}), ln ? hc(got_mean, {rows}) : TensorView<const double>{}, hc(got_rstd, {rows}));
  const Vec got_dx = decode(dx), got_dw = decode(dw);
  EXPECT_CHECK(check_bf16(got_dx, want_dx), "dx");
  EXPECT_CHECK(check_grad32(got_dw, want_dw), "dw");
  if (has_b) EXPECT_CHECK(check_grad32(decode(db), want_db), "db");
  expect_catches_corruption_bf16(got_dx, want_dx, "dx");
  expect_catches_corruption(got_dw, want_dw, 1e-3, 1e-3 * rms(want_dw), "dw");
}

TEST(CudaNorm, MatchesReferenceOnEdgeAndModelShapes) {
  SKIP_WITHOUT_GPU();
  struct Shape2 {
    std::int64_t rows, dim;
  };
  // 1 row, dim 8, a prime row count, a width that leaves idle threads (1000 = 125 vectors), 4/8 vectors per thread.
  const Shape2 shapes[] = {{1, 8}, {97, 8}, {61, 1000}, {13, 4096}, {7, 16384}, {5, 18432}, {1, 32768}};
  std::uint64_t seed = 100;
  for (NormKind kind : {NormKind::rmsnorm, NormKind::layernorm, NormKind::layernorm1p})
    for (const Shape2& s : shapes) {
      run_norm_case({kind, s.rows, s.dim, NormForm::fused, true, true, false}, seed += 10);
      run_norm_case({kind, s.rows, s.dim, NormForm::plain, true, false, true}, seed += 10);
    }
}

TEST(CudaNorm, FusedVariants) {
  SKIP_WITHOUT_GPU();
  std::uint64_t seed = 1000;
  for (NormKind kind : {NormKind::rmsnorm, NormKind::layernorm, NormKind::layernorm1p}) {
    run_norm_case({kind, 37, 520, NormForm::fused, true, false, true}, seed += 10);               // no dr_next
    run_norm_case({kind, 37, 520, NormForm::fused_no_residual, true, false, false}, seed += 10);  // r = x
    run_norm_case({kind, 37, 520, NormForm::fused, false, true, false}, seed += 10);              // no bias
  }
}

TEST(CudaNorm, LargeShape) {
  SKIP_WITHOUT_GPU();
  std::uint64_t seed = 2000;
  for (NormKind kind : {NormKind::rmsnorm, NormKind::layernorm, NormKind::layernorm1p})
    run_norm_case({kind, 8192, 4096, NormForm::fused, true, true, kind == NormKind::layernorm}, seed += 10);
}

// dx empty: only the parameter gradients (frozen-input case); layernorm without db.
TEST(CudaNorm, ParameterGradientsOnly) {
  SKIP_WITHOUT_GPU();
  const std::int64_t rows = 300, dim = 256;
  Dev<bf16> x(rows * dim), w(dim), b(dim), y(rows * dim), dy(rows * dim);
  Dev<float> mean(rows), rstd(rows), dw(dim);
  fill(x, 1, -2, 2);
  fill(w, 2, 0.5f, 1.5f);
  fill(b, 3, -1, 1);
  fill(dy, 4, -1, 1);
  fill(dw, 5, -1, 1);
  gpu::norm_forward(NormKind::layernorm, y.view({rows, dim}), mean.view({rows}), rstd.view({rows}), x.view({rows, dim}),
                    w.view({dim}), b.view({dim}), 1e-5f, nullptr);
  const Vec dw0 = decode(dw);
  gpu::norm_backward(NormKind::layernorm, {}, dw.view({dim}), {}, dy.view({rows, dim}), x.view({rows, dim}),
                     w.view({dim}), mean.view({rows}), rstd.view({rows}), nullptr);
  Vec want_dw = dw0;
  const Vec hx = decode(x), hw = decode(w), hdy = decode(dy), hmean = decode(mean), hrstd = decode(rstd);
  cpu::norm_backward<double>(NormKind::layernorm, {}, hv(want_dw, {dim}), {}, hc(hdy, {rows, dim}), hc(hx, {rows, dim}),
                             hc(hw, {dim}), hc(hmean, {rows}), hc(hrstd, {rows}));
  EXPECT_CHECK(check_grad32(decode(dw), want_dw), "dw");
}

// Repeated calls give bitwise identical results (no atomics); a corrupted device element is caught.
TEST(CudaNorm, DeterministicAndDeviceCorruptionIsCaught) {
  SKIP_WITHOUT_GPU();
  const std::int64_t rows = 1031, dim = 2048;
  Dev<bf16> x(rows * dim), w(dim), b(dim), y(rows * dim), dy(rows * dim), dx(rows * dim);
  Dev<float> mean(rows), rstd(rows), dw1(dim), db1(dim), dw2(dim), db2(dim);
  fill(x, 11, -2, 2);
  fill(w, 12, -0.5f, 0.5f);
  fill(b, 13, -1, 1);
  fill(dy, 14, -1, 1);
  for (Dev<float>* g : {&dw1, &db1, &dw2, &db2}) TB_CHECK(cudaMemset(g->get(), 0, dim * 4));
  gpu::norm_forward(NormKind::layernorm1p, y.view({rows, dim}), mean.view({rows}), rstd.view({rows}),
                    x.view({rows, dim}), w.view({dim}), b.view({dim}), 1e-5f, nullptr);
  gpu::norm_backward(NormKind::layernorm1p, dx.view({rows, dim}), dw1.view({dim}), db1.view({dim}),
                     dy.view({rows, dim}), x.view({rows, dim}), w.view({dim}), mean.view({rows}), rstd.view({rows}),
                     nullptr);
  gpu::norm_backward(NormKind::layernorm1p, dx.view({rows, dim}), dw2.view({dim}), db2.view({dim}),
                     dy.view({rows, dim}), x.view({rows, dim}), w.view({dim}), mean.view({rows}), rstd.view({rows}),
                     nullptr);
  EXPECT_EQ(decode(dw1), decode(dw2));
  EXPECT_EQ(decode(db1), decode(db2));

  const Vec hx = decode(x), hw = decode(w), hb = decode(b);
  Vec want_y(rows * dim), want_mean(rows), want_rstd(rows);
  cpu::norm_forward<double>(NormKind::layernorm1p, hv(want_y, {rows, dim}), hv(want_mean, {rows}),
                            hv(want_rstd, {rows}), hc(hx, {rows, dim}), hc(hw, {dim}), hc(hb, {dim}), 1e-5);
  ASSERT_TRUE(check_bf16(decode(y), want_y).ok());
  const std::int64_t i = 517 * dim + 33;
  const std::uint16_t bad = tb::float_to_bf16(float(want_y[std::size_t(i)] + 0.25));
  TB_CHECK(cudaMemcpy(y.get() + i, &bad, 2, cudaMemcpyHostToDevice));
  const Check c = check_bf16(decode(y), want_y);
  EXPECT_EQ(c.bad, 1);
  EXPECT_EQ(c.first, i);
}

TEST(CudaNorm, RejectsBadShapes) {
  SKIP_WITHOUT_GPU();
  Dev<bf16> x(64 * 24), y(64 * 24), w(24), b(24);
  Dev<float> mean(64), rstd(64);
  // dim 12: not a multiple of 8
  EXPECT_THROW(gpu::norm_forward(NormKind::rmsnorm, y.view({4, 12}), {}, rstd.view({4}), x.view({4, 12}), w.view({12}),
                                 {}, 1e-5f, nullptr),
               tb::Error);
  // rmsnorm with a bias
  EXPECT_THROW(gpu::norm_forward(NormKind::rmsnorm, y.view({4, 16}), {}, rstd.view({4}), x.view({4, 16}), w.view({16}),
                                 b.view({16}), 1e-5f, nullptr),
               tb::Error);
  // layernorm without mean
  EXPECT_THROW(gpu::norm_forward(NormKind::layernorm, y.view({4, 16}), {}, rstd.view({4}), x.view({4, 16}),
                                 w.view({16}), {}, 1e-5f, nullptr),
               tb::Error);
  // w of the wrong length
  EXPECT_THROW(gpu::norm_forward(NormKind::rmsnorm, y.view({4, 16}), {}, rstd.view({4}), x.view({4, 16}), w.view({8}),
                                 {}, 1e-5f, nullptr),
               tb::Error);
  // workspace too small
  Dev<unsigned char> ws(16);
  EXPECT_THROW(gpu::norm_backward(NormKind::rmsnorm, y.view({4, 16}), mean.view({16}), {}, x.view({4, 16}),
                                  x.view({4, 16}), w.view({16}), {}, rstd.view({4}), nullptr, {ws.get(), 16}),
               tb::Error);
  try {
    gpu::norm_forward(NormKind::rmsnorm, y.view({4, 12}), {}, rstd.view({4}), x.view({4, 12}), w.view({12}), {}, 1e-5f,
                      nullptr);
    ADD_FAILURE() << "dim 12 was accepted";
  } catch (const tb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 8"), std::string::npos) << e.what();
  }
}

// ---- fused amax and the FP8 forward ----

double host_amax(const Vec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

std::vector<std::uint8_t> bytes(const Dev<std::uint8_t>& d) {
  TB_CHECK(cudaDeviceSynchronize());
  std::vector<std::uint8_t> b(d.size());
  TB_CHECK(cudaMemcpy(b.data(), d.get(), b.size(), cudaMemcpyDeviceToHost));
  return b;
}

void set_floats(Dev<float>& d, std::initializer_list<float> v) {
  TB_CHECK(cudaMemcpy(d.get(), v.begin(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
}

// One norm's inputs on fresh random values: x, residual_in (fused), w (layernorm1p: stored as w - 1), b (layernorms),
// and the forward's outputs (poisoned), with the calls that fill them.
struct NormRun {
  NormKind kind;
  std::int64_t rows, dim;
  bool fused, ln;
  Dev<bf16> x, res, w, b, y, r;
  Dev<float> mean, rstd;

  NormRun(NormKind k, std::int64_t rows_, std::int64_t dim_, bool fused_, std::uint64_t seed)
      : kind(k),
        rows(rows_),
        dim(dim_),
        fused(fused_),
        ln(k != NormKind::rmsnorm),
        x(sz(rows * dim)),
        res(fused ? sz(rows * dim) : 0),
        w(sz(dim)),
        b(ln ? sz(dim) : 0),
        y(sz(rows * dim)),
        r(fused ? sz(rows * dim) : 0),
        mean(sz(rows)),
        rstd(sz(rows)) {
    fill(x, seed, -2.f, 2.f);
    if (fused) fill(res, seed + 1, -2.f, 2.f);
    if (kind == NormKind::layernorm1p)
      fill(w, seed + 2, -0.5f, 0.5f);
    else
      fill(w, seed + 2, 0.5f, 1.5f);
    if (ln) fill(b, seed + 3, -0.5f, 0.5f);
    poison();
  }
  std::string name() const {
    const char* kinds[] = {"rmsnorm", "layernorm", "layernorm1p"};
    return std::string(kinds[int(kind)]) + (fused ? " fused" : " plain") + " [" + std::to_string(rows) + ", " +
           std::to_string(dim) + "]";
  }
  void poison() {
    y.poison();
    if (fused) r.poison();
    mean.poison();
    rstd.poison();
  }
  TensorView<float> mean_v() const { return ln ? mean.view({rows}) : TensorView<float>{}; }
  TensorView<const bf16> b_v() const { return ln ? TensorView<const bf16>(b.view({dim})) : TensorView<const bf16>{}; }
  TensorView<const float> mean_c() const { return mean_v(); }

  void forward(float* amax = nullptr) {
    if (fused)
      gpu::add_norm_forward(kind, y.view({rows, dim}), r.view({rows, dim}), mean_v(), rstd.view({rows}),
                            x.view({rows, dim}), res.view({rows, dim}), w.view({dim}), b_v(), 1e-5f, nullptr, amax);
    else
      gpu::norm_forward(kind, y.view({rows, dim}), mean_v(), rstd.view({rows}), x.view({rows, dim}), w.view({dim}),
                        b_v(), 1e-5f, nullptr, amax);
  }
  void forward_fp8(const tb::ops::Fp8CastArgs& c) {
    if (fused)
      gpu::add_norm_forward_fp8(kind, c, r.view({rows, dim}), mean_v(), rstd.view({rows}), x.view({rows, dim}),
                                res.view({rows, dim}), w.view({dim}), b_v(), 1e-5f, nullptr);
    else
      gpu::norm_forward_fp8(kind, c, mean_v(), rstd.view({rows}), x.view({rows, dim}), w.view({dim}), b_v(), 1e-5f,
                            nullptr);
  }
  // dx of the forward above (fused: with dr_next), dw accumulated; amax of dx.
  void backward(Dev<bf16>& dx, const Dev<bf16>& dy, const Dev<bf16>& drn, Dev<float>& dw, float* amax) {
    if (fused)
      gpu::add_norm_backward(kind, dx.view({rows, dim}), dw.view({dim}), {}, dy.view({rows, dim}),
                             drn.view({rows, dim}), r.view({rows, dim}), w.view({dim}), mean_c(), rstd.view({rows}),
                             nullptr, {}, amax);
    else
      gpu::norm_backward(kind, dx.view({rows, dim}), dw.view({dim}), {}, dy.view({rows, dim}), x.view({rows, dim}),
                         w.view({dim}), mean_c(), rstd.view({rows}), nullptr, {}, amax);
  }
};

// 64 x 64 cast tiles (rows, dim multiples of 64), 32 x 32 tiles (48 x 528: dim a multiple of 16, not of 64), and
// more rows than the persistent backward grid has blocks (each block records the max over several rows).
struct NormShape {
  std::int64_t rows, dim;
};
constexpr NormShape kAmaxShapes[] = {{256, 1024}, {48, 528}, {8192, 1024}};
constexpr NormShape kFp8Shapes[] = {{256, 1024}, {224, 1088}, {48, 528}};  // vector cast (a warp idle), 32 x 32

// *amax = max |output as stored| exactly (host max over the copied-back bf16 tensor), forward and backward; the
// outputs are the same bits as without amax; an *amax already larger stays.
TEST(CudaNorm, FusedAmaxIsMaxOfStoredOutput) {
  SKIP_WITHOUT_GPU();
  std::uint64_t seed = 7000;
  for (NormKind kind : {NormKind::rmsnorm, NormKind::layernorm, NormKind::layernorm1p})
    for (bool fused : {false, true})
      for (const NormShape& s : kAmaxShapes) {
        NormRun n(kind, s.rows, s.dim, fused, seed += 10);
        SCOPED_TRACE(n.name());
        n.forward();
        const auto y_bits = raw(n.y);
        Dev<float> amax(3);  // y, dx, y onto a larger value
        set_floats(amax, {0.f, 0.f, 1e6f});
        n.poison();
        n.forward(amax.get());
        EXPECT_TRUE(raw(n.y) == y_bits) << "y differs with amax";
        n.forward(amax.get() + 2);

        const std::size_t e = sz(s.rows * s.dim);
        Dev<bf16> dy(e), drn(fused ? e : 0), dx(e);
        Dev<float> dw(sz(s.dim));
        fill(dy, seed + 5, -1.f, 1.f);
        if (fused) fill(drn, seed + 6, -1.f, 1.f);
        fill(dw, seed + 7, -1.f, 1.f);
        dx.poison();
        n.backward(dx, dy, drn, dw, amax.get() + 1);

        const Vec am = decode(amax);
        const double my = host_amax(decode(n.y)), mdx = host_amax(decode(dx));
        ASSERT_GT(my, 0.0);
        ASSERT_GT(mdx, 0.0);
        EXPECT_EQ(am[0], my) << "amax of y";
        EXPECT_EQ(am[1], mdx) << "amax of dx";
        EXPECT_EQ(am[2], 1e6) << "amax is max(*amax, max |y|)";
      }
}

// A NaN in one element of the last row (the forward's input, the backward's dy) makes *amax NaN.
TEST(CudaNorm, FusedAmaxPropagatesNan) {
  SKIP_WITHOUT_GPU();
  const std::uint16_t nan = 0x7fc0;
  for (bool fused : {false, true}) {
    NormRun n(NormKind::layernorm, 2048, 4096, fused, 7500);
    SCOPED_TRACE(n.name());
    const std::int64_t at = (n.rows - 1) * n.dim + 1000;
    TB_CHECK(cudaMemcpy(n.x.get() + at, &nan, 2, cudaMemcpyHostToDevice));
    Dev<float> amax(2);
    set_floats(amax, {0.f, 0.f});
    n.forward(amax.get());

    NormRun m(NormKind::rmsnorm, 2048, 4096, fused, 7600);  // finite forward, NaN in dy
    m.forward();
    const std::size_t e = sz(m.rows * m.dim);
    Dev<bf16> dy(e), drn(fused ? e : 0), dx(e);
    Dev<float> dw(sz(m.dim));
    fill(dy, 7605, -1.f, 1.f);
    if (fused) fill(drn, 7606, -1.f, 1.f);
    fill(dw, 7607, -1.f, 1.f);
    TB_CHECK(cudaMemcpy(dy.get() + at, &nan, 2, cudaMemcpyHostToDevice));
    m.backward(dx, dy, drn, dw, amax.get() + 1);
    const Vec am = decode(amax);
    EXPECT_TRUE(std::isnan(am[0])) << "forward amax " << am[0];
    EXPECT_TRUE(std::isnan(am[1])) << "backward amax " << am[1];
  }
}

// The FP8 forward against the bf16 op then the cast, per element on the host: q[i, j] = qt[j, i] = fp8(y[i, j] * scale)
// for the y the bf16 op stored (the host's fp32 product and conversion: independent of the kernels), and the same
// bytes as fp8_cast of that y; r, mean, rstd bit for bit the bf16 op's; amax_out = max |y|; scale_inv = 1 / scale.
// scale = fp8_max / max |y|, so the largest |y| maps to the format's largest code. e5m2 runs without q.
TEST(CudaNorm, Fp8ForwardMatchesBf16ThenCast) {
  SKIP_WITHOUT_GPU();
  std::uint64_t seed = 8000;
  for (NormKind kind : {NormKind::rmsnorm, NormKind::layernorm, NormKind::layernorm1p})
    for (bool fused : {false, true})
      for (const NormShape& s : kFp8Shapes)
        for (const tb::DType type : {tb::DType::e4m3, tb::DType::e5m2}) {
          NormRun n(kind, s.rows, s.dim, fused, seed += 10);
          SCOPED_TRACE(n.name() + " " + std::string(tb::dtype_name(type)));
          const std::int64_t rows = s.rows, dim = s.dim;
          const std::size_t e = sz(rows * dim);
          const bool e4 = type == tb::DType::e4m3, want_q = e4;
          n.forward();
          const Vec hy = decode(n.y);
          const auto r_bits = fused ? raw(n.r) : std::vector<std::uint16_t>{};
          const Vec mean1 = decode(n.mean), rstd1 = decode(n.rstd);
          const float amax = float(host_amax(hy)), scale = tb::ops::fp8_max(type) / amax;
          ASSERT_GT(amax, 0.f);
          auto to_fp8 = [&](double v, float sc) {
            return e4 ? tb::float_to_e4m3(float(v) * sc) : tb::float_to_e5m2(float(v) * sc);
          };

          // The bf16 op's y through fp8_cast (delayed: the scale preset).
          Dev<std::uint8_t> q_ref(e), qt_ref(e), q(e), qt(e);
          Dev<float> meta(6);  // fp8_cast: scale, scale_inv, amax; fused: scale, scale_inv, amax
          set_floats(meta, {scale, 0.f, 0.f, scale, 0.f, 0.f});
          tb::ops::Fp8CastArgs c;
          c.x = n.y.get(), c.rows = rows, c.cols = dim, c.type = type, c.q = want_q ? q_ref.get() : nullptr;
          c.qt = qt_ref.get(), c.scale = meta.get(), c.scale_inv = meta.get() + 1, c.amax_out = meta.get() + 2;
          tb::ops::fp8_cast(c, nullptr);

          // Fused, into fresh (poisoned) r, mean, rstd, q, qt.
          n.poison();
          TB_CHECK(cudaMemset(q.get(), 0xff, e));
          TB_CHECK(cudaMemset(qt.get(), 0xff, e));
          c.x = nullptr, c.q = want_q ? q.get() : nullptr, c.qt = qt.get();
          c.scale = meta.get() + 3, c.scale_inv = meta.get() + 4, c.amax_out = meta.get() + 5;
          n.forward_fp8(c);

          const auto hq = bytes(q), hqt = bytes(qt);
          std::size_t bad = 0, moved = 0;
          int top = 0;
          for (std::int64_t i = 0; i < rows; ++i)
            for (std::int64_t j = 0; j < dim; ++j) {
              const double v = hy[sz(i * dim + j)];
              const std::uint8_t want = to_fp8(v, scale);
              bad += hqt[sz(j * rows + i)] != want || (want_q && hq[sz(i * dim + j)] != want);
              // A scale 2^-8 larger (E5M2, coarser codes: 2^-6) moves some codes (2^-10 moved none on one seed).
              moved += to_fp8(v, scale * (e4 ? 1.f + 0x1p-8f : 1.f + 0x1p-6f)) != want;
              top = std::max(top, hqt[sz(j * rows + i)] & 0x7f);
            }
          EXPECT_EQ(bad, 0u) << "q / qt differ from the host conversion of the bf16 op's y";
          EXPECT_GT(moved, 0u) << "the check cannot tell the scale apart from a slightly different one";
          EXPECT_EQ(top, e4 ? 0x7e : 0x7b) << "the largest |y| is not at the format's largest finite code";
          // Whole-tensor comparisons as booleans (gtest would print every element).
          EXPECT_TRUE(hqt == bytes(qt_ref)) << "qt differs from fp8_cast's";
          if (want_q) EXPECT_TRUE(hq == bytes(q_ref)) << "q differs from fp8_cast's";
          if (fused) EXPECT_TRUE(raw(n.r) == r_bits) << "r differs from the bf16 op's";
          EXPECT_TRUE(decode(n.rstd) == rstd1) << "rstd differs from the bf16 op's";
          if (n.ln) EXPECT_TRUE(decode(n.mean) == mean1) << "mean differs from the bf16 op's";
          const Vec m = decode(meta);
          EXPECT_EQ(m[4], double(1.0f / scale)) << "scale_inv";
          EXPECT_EQ(m[5], double(amax)) << "amax_out";
          EXPECT_EQ(m[5], m[2]) << "amax_out differs from fp8_cast's";
        }
}

// Current scaling (cast.amax_in) and malformed cast arguments are refused with Error{config} before anything runs;
// so is an amax without the output it would record.
TEST(CudaNorm, Fp8ForwardRefusesBadCasts) {
  SKIP_WITHOUT_GPU();
  NormRun n(NormKind::layernorm, 64, 128, true, 9000);
  Dev<std::uint8_t> qt(64 * 128);
  Dev<float> meta(3);
  set_floats(meta, {1.f, 0.f, 0.f});
  tb::ops::Fp8CastArgs c;
  c.rows = 64, c.cols = 128, c.qt = qt.get(), c.scale = meta.get(), c.scale_inv = meta.get() + 1;
  c.amax_in = meta.get() + 2;
  const std::string refusal = tb::testing_support::config_error([&] { n.forward_fp8(c); }, "cast.amax_in was accepted");
  EXPECT_NE(refusal.find("amax_in"), std::string::npos) << refusal;
  EXPECT_TRUE(std::isnan(decode(n.rstd)[0])) << "the refused call wrote rstd";
  c.amax_in = nullptr;
  tb::ops::Fp8CastArgs bad = c;
  bad.x = n.y.get();  // the source is the norm, not a bf16 tensor
  EXPECT_THROW(n.forward_fp8(bad), tb::Error);
  bad = c, bad.cols = 64;  // not the output's shape
  EXPECT_THROW(n.forward_fp8(bad), tb::Error);
  bad = c, bad.qt = nullptr;  // the transpose is what the GEMM reads
  EXPECT_THROW(n.forward_fp8(bad), tb::Error);
  bad = c, bad.type = tb::DType::bf16;
  EXPECT_THROW(n.forward_fp8(bad), tb::Error);
  EXPECT_TRUE(std::isnan(decode(n.rstd)[0])) << "a refused call wrote rstd";
  EXPECT_NO_THROW(n.forward_fp8(c));
  EXPECT_FALSE(std::isnan(decode(n.rstd)[0]));

  Dev<bf16> dy(64 * 128);
  Dev<float> dw(128);
  fill(dy, 9001, -1.f, 1.f);
  EXPECT_THROW(gpu::norm_backward(NormKind::layernorm, {}, dw.view({128}), {}, dy.view({64, 128}), n.x.view({64, 128}),
                                  n.w.view({128}), n.mean.view({64}), n.rstd.view({64}), nullptr, {}, meta.get() + 2),
               tb::Error);  // amax without dx
}

// ======================= activations =======================

enum class Act { swiglu, gelu, sqrelu };

// n: width of y (swiglu: x is [rows, 2n]); pad: extra elements per row of every buffer (strided rows).
void run_act_case(Act act, std::int64_t rows, std::int64_t n, std::int64_t pad, std::uint64_t seed) {
  const char* names[] = {"swiglu", "gelu", "sqrelu"};
  SCOPED_TRACE(std::string(names[int(act)]) + " [" + std::to_string(rows) + ", " + std::to_string(n) + "] pad " +
               std::to_string(pad));
  const std::int64_t xn = act == Act::swiglu ? 2 * n : n;
  const std::int64_t xs = xn + pad, ys = n + pad;
  Dev<bf16> x(sz(rows * xs)), y(sz(rows * ys)), dy(sz(rows * ys)), dx(sz(rows * xs));
  const float range = act == Act::sqrelu ? 2.f : 4.f;
  fill(x, seed, -range, range);
  fill(dy, seed + 1, -1.f, 1.f);
  y.poison();
  dx.poison();
  const auto xv = x.view2(rows, xn, xs), dxv = dx.view2(rows, xn, xs);
  const auto yv = y.view2(rows, n, ys), dyv = dy.view2(rows, n, ys);
  switch (act) {
    case Act::swiglu:
      gpu::swiglu_forward(yv, xv, nullptr);
      gpu::swiglu_backward(dxv, dyv, xv, nullptr);
      break;
    case Act::gelu:
      gpu::gelu_forward(yv, xv, nullptr);
      gpu::gelu_backward(dxv, dyv, xv, nullptr);
      break;
    case Act::sqrelu:
      gpu::sqrelu_forward(yv, xv, nullptr);
      gpu::sqrelu_backward(dxv, dyv, xv, nullptr);
      break;
  }
  const Vec hx = rows_of(decode(x), rows, xn, xs), hdy = rows_of(decode(dy), rows, n, ys);
  Vec want_y(sz(rows * n)), want_dx(sz(rows * xn));
  const auto hxv = hc(hx, {rows, xn}), hdyv = hc(hdy, {rows, n});
  const auto wy = hv(want_y, {rows, n}), wdx = hv(want_dx, {rows, xn});
  switch (act) {
    case Act::swiglu:
      cpu::swiglu_forward<double>(wy, hxv);
      cpu::swiglu_backward<double>(wdx, hdyv, hxv);
      break;
    case Act::gelu:
      cpu::gelu_forward<double>(wy, hxv);
      cpu::gelu_backward<double>(wdx, hdyv, hxv);
      break;
    case Act::sqrelu:
      cpu::sqrelu_forward<double>(wy, hxv);
      cpu::sqrelu_backward<double>(wdx, hdyv, hxv);
      break;
  }
  const Vec got_y = rows_of(decode(y), rows, n, ys), got_dx = rows_of(decode(dx), rows, xn, xs);
  EXPECT_CHECK(check_bf16(got_y, want_y), "y");
  EXPECT_CHECK(check_bf16(got_dx, want_dx), "dx");
  expect_catches_corruption_bf16(got_y, want_y, "y");
  expect_catches_corruption_bf16(got_dx, want_dx, "dx");
  if (pad > 0) {  // the padding between rows is never written
    const auto bits = raw(y);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t i = n; i < ys; ++i) ASSERT_EQ(bits[std::size_t(r * ys + i)], 0xffff) << "row " << r;
  }

  // With the amax fused in (FP8 current scaling): the same bits, and amax = max |output| exactly (the padding, NaN,
  // is not output).
  Dev<float> amax(2);
  TB_CHECK(cudaMemset(amax.get(), 0, 2 * sizeof(float)));
  const auto y_bits = raw(y), dx_bits = raw(dx);
  switch (act) {
    case Act::swiglu:
      gpu::swiglu_forward(yv, xv, nullptr, amax.get());
      gpu::swiglu_backward(dxv, dyv, xv, nullptr, amax.get() + 1);
      break;
    case Act::gelu:
      gpu::gelu_forward(yv, xv, nullptr, amax.get());
      gpu::gelu_backward(dxv, dyv, xv, nullptr, amax.get() + 1);
      break;
    case Act::sqrelu:
      gpu::sqrelu_forward(yv, xv, nullptr, amax.get());
      gpu::sqrelu_backward(dxv, dyv, xv, nullptr, amax.get() + 1);
      break;
  }
  EXPECT_EQ(raw(y), y_bits);
  EXPECT_EQ(raw(dx), dx_bits);
  double my = 0, mdx = 0;
  for (double v : got_y) my = std::max(my, std::fabs(v));
  for (double v : got_dx) mdx = std::max(mdx, std::fabs(v));
  const Vec am = decode(amax);
  EXPECT_EQ(am[0], my) << "amax of y";
  EXPECT_EQ(am[1], mdx) << "amax of dx";

  // Straight into FP8 with a given scale (delayed scaling): q and qt bit for bit the host conversion of y * scale,
  // amax recorded, scale_inv written; y is not touched.
  for (const tb::DType type : {tb::DType::e4m3, tb::DType::e5m2}) {
    const float scale = type == tb::DType::e4m3 ? 3.0f : 1000.0f;
    Dev<std::uint8_t> q(sz(rows * n)), qt(sz(rows * n));
    Dev<float> meta(3);  // scale, scale_inv, amax
    const float init[3] = {scale, 0.f, 0.f};
    TB_CHECK(cudaMemcpy(meta.get(), init, sizeof init, cudaMemcpyHostToDevice));
    tb::ops::Fp8CastArgs c;
    c.rows = rows, c.cols = n, c.q = q.get(), c.qt = qt.get(), c.type = type;
    c.scale = meta.get(), c.scale_inv = meta.get() + 1, c.amax_out = meta.get() + 2;
    const gpu::Activation a = act == Act::swiglu ? gpu::Activation::swiglu
                              : act == Act::gelu ? gpu::Activation::gelu
                                                 : gpu::Activation::sqrelu;
    gpu::activation_forward_fp8(a, xv, c, nullptr);
    EXPECT_EQ(raw(y), y_bits);
    TB_CHECK(cudaDeviceSynchronize());
    std::vector<std::uint8_t> hq(sz(rows * n)), hqt(sz(rows * n));
    TB_CHECK(cudaMemcpy(hq.data(), q.get(), hq.size(), cudaMemcpyDeviceToHost));
    TB_CHECK(cudaMemcpy(hqt.data(), qt.get(), hqt.size(), cudaMemcpyDeviceToHost));
    std::size_t bad = 0;
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t i = 0; i < n; ++i) {
        const float v = float(got_y[sz(r * n + i)]) * scale;
        const std::uint8_t want = type == tb::DType::e4m3 ? tb::float_to_e4m3(v) : tb::float_to_e5m2(v);
        bad += hq[sz(r * n + i)] != want || hqt[sz(i * rows + r)] != want;
      }
    EXPECT_EQ(bad, 0u) << tb::dtype_name(type);
    const Vec m = decode(meta);
    EXPECT_EQ(m[1], double(1.0f / scale)) << tb::dtype_name(type);
    EXPECT_EQ(m[2], my) << tb::dtype_name(type);

    // The backward likewise: q and qt of dx ([rows, xn]) bit for bit, amax = max |dx|, dx not touched.
    const float gscale = type == tb::DType::e4m3 ? 5.0f : 3000.0f;
    Dev<std::uint8_t> gq(sz(rows * xn)), gqt(sz(rows * xn));
    const float ginit[3] = {gscale, 0.f, 0.f};
    TB_CHECK(cudaMemcpy(meta.get(), ginit, sizeof ginit, cudaMemcpyHostToDevice));
    c.rows = rows, c.cols = xn, c.q = gq.get(), c.qt = gqt.get();
    gpu::activation_backward_fp8(a, dyv, xv, c, nullptr);
    EXPECT_EQ(raw(dx), dx_bits);
    TB_CHECK(cudaDeviceSynchronize());
    std::vector<std::uint8_t> hg(sz(rows * xn)), hgt(sz(rows * xn));
    TB_CHECK(cudaMemcpy(hg.data(), gq.get(), hg.size(), cudaMemcpyDeviceToHost));
    TB_CHECK(cudaMemcpy(hgt.data(), gqt.get(), hgt.size(), cudaMemcpyDeviceToHost));
    bad = 0;
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t i = 0; i < xn; ++i) {
        const float v = float(got_dx[sz(r * xn + i)]) * gscale;
        const std::uint8_t want = type == tb::DType::e4m3 ? tb::float_to_e4m3(v) : tb::float_to_e5m2(v);
        bad += hg[sz(r * xn + i)] != want || hgt[sz(i * rows + r)] != want;
      }
    EXPECT_EQ(bad, 0u) << "backward " << tb::dtype_name(type);
    const Vec gm = decode(meta);
    EXPECT_EQ(gm[1], double(1.0f / gscale)) << "backward " << tb::dtype_name(type);
    EXPECT_EQ(gm[2], mdx) << "backward " << tb::dtype_name(type);
  }
}

TEST(CudaActivation, MatchesReference) {
  SKIP_WITHOUT_GPU();
  std::uint64_t seed = 3000;
  for (Act act : {Act::swiglu, Act::gelu, Act::sqrelu}) {
    run_act_case(act, 1, 8, 0, seed += 10);
    run_act_case(act, 97, 8, 0, seed += 10);
    run_act_case(act, 61, 72, 0, seed += 10);
    run_act_case(act, 13, 2056, 0, seed += 10);
    run_act_case(act, 29, 136, 8, seed += 10);  // padded rows
    run_act_case(act, 33, 576, 0, seed += 10);  // 72 vectors a row: blocks of 96 x 2 threads
    run_act_case(act, 128, 96, 0, seed += 10);  // FP8 tiles: swiglu's halves not multiples of 64 (32 x 32 tiles)
    run_act_case(act, 192, 320, 0, seed += 10);  // the vector cast, swiglu's backward both halves per thread
    run_act_case(act, 8192, act == Act::swiglu ? 2048 : 4096, 0, seed += 10);
  }
}

TEST(CudaActivation, FusedAmaxPropagatesNan) {
  SKIP_WITHOUT_GPU();
  Dev<bf16> x(64 * 64), dy(64 * 64), dx(64 * 64);
  fill(x, 77, -2.f, 2.f);
  fill(dy, 78, -1.f, 1.f);
  const std::uint16_t nan = 0x7fc0;
  TB_CHECK(cudaMemcpy(dy.get() + 1000, &nan, 2, cudaMemcpyHostToDevice));
  Dev<float> amax(1);
  TB_CHECK(cudaMemset(amax.get(), 0, sizeof(float)));
  gpu::gelu_backward(dx.view({64, 64}), dy.view({64, 64}), x.view({64, 64}), nullptr, amax.get());
  EXPECT_TRUE(std::isnan(decode(amax)[0]));
}

TEST(CudaActivation, RejectsBadShapes) {
  SKIP_WITHOUT_GPU();
  Dev<bf16> x(1024), y(1024);
  EXPECT_THROW(gpu::swiglu_forward(y.view({4, 12}), x.view({4, 24}), nullptr), tb::Error);  // f = 12
  EXPECT_THROW(gpu::swiglu_forward(y.view({4, 16}), x.view({4, 16}), nullptr), tb::Error);  // y not [t, f]
  EXPECT_THROW(gpu::gelu_forward(y.view({4, 12}), x.view({4, 12}), nullptr), tb::Error);    // width 12
  EXPECT_THROW(gpu::gelu_forward(y.view({4, 16}), x.view({5, 16}), nullptr), tb::Error);    // rows differ
  Dev<std::uint8_t> q(128), qt(128);
  Dev<float> meta(3);
  tb::ops::Fp8CastArgs c;
  c.rows = 4, c.cols = 16, c.q = q.get(), c.qt = qt.get(), c.scale = meta.get(), c.scale_inv = meta.get() + 1;
  EXPECT_NO_THROW(gpu::activation_forward_fp8(gpu::Activation::gelu, x.view({4, 16}), c, nullptr));
  c.amax_in = meta.get() + 2;  // current scaling: the amax must come first
  EXPECT_THROW(gpu::activation_forward_fp8(gpu::Activation::gelu, x.view({4, 16}), c, nullptr), tb::Error);
  c.amax_in = nullptr, c.cols = 8;  // not the output's shape
  EXPECT_THROW(gpu::activation_forward_fp8(gpu::Activation::gelu, x.view({4, 16}), c, nullptr), tb::Error);
  c.cols = 32;  // swiglu's backward: dx [4, 32] from dy [4, 16] and x [4, 32]
  EXPECT_NO_THROW(gpu::activation_backward_fp8(gpu::Activation::swiglu, y.view({4, 16}), x.view({4, 32}), c, nullptr));
  EXPECT_THROW(gpu::activation_backward_fp8(gpu::Activation::swiglu, y.view({4, 32}), x.view({4, 32}), c, nullptr),
               tb::Error);  // dy not [t, f]
  EXPECT_THROW(
      gpu::sqrelu_backward(y.view({4, 16}), x.view({4, 16}), TensorView<const bf16>(x.get() + 1, {4, 16}), nullptr),
      tb::Error);  // misaligned
}

// ======================= rope =======================

// Q and K heads of a fused QKV buffer [B*S, (H + 2G) d] in one call; V must stay bit for bit. offset > 0: the
// sequence index p is at position p + offset (reference: rope_*_at), and the unshifted reference must fail.
void run_rope_case(std::int64_t B, std::int64_t S, std::int64_t H, std::int64_t G, std::int64_t d, bool scaled,
                   std::uint64_t seed, std::int64_t offset = 0) {
  SCOPED_TRACE("rope B=" + std::to_string(B) + " S=" + std::to_string(S) + " H=" + std::to_string(H) +
               " G=" + std::to_string(G) + " d=" + std::to_string(d) + (scaled ? " llama3.1-scaled" : "") +
               " pos_offset=" + std::to_string(offset));
  const std::int64_t width = (H + 2 * G) * d, tokens = B * S;
  cpu::RopeScaling scaling;  // Llama 3.1: factor 8, low 1, high 4, original 8192
  const std::vector<double> inv = cpu::rope_inv_freq(int(d), 500000.0, scaled ? &scaling : nullptr);
  Dev<float> dinv(sz(d / 2));
  gpu::upload_rope_inv_freq(dinv.view({d / 2}), inv, nullptr);
  Dev<bf16> qkv(sz(tokens * width));
  fill(qkv, seed, -1.f, 1.f);
  const tb::Shape shape{B, S, H + G, d}, strides{S * width, width, d, 1};
  const TensorView<bf16> qk(qkv.get(), shape, strides, 4);
  const auto before_bits = raw(qkv);
  const Vec before = decode(qkv);

  std::vector<std::int64_t> pos(sz(S));
  for (std::int64_t p = 0; p < S; ++p) pos[sz(p)] = p + offset;
  auto reference = [&](Vec x, bool forward) {
    const TensorView<double> v(x.data(), shape, strides, 4);
    if (offset == 0 && forward) cpu::rope_forward<double>(v, inv);
    if (offset == 0 && !forward) cpu::rope_backward<double>(v, inv);
    if (offset != 0 && forward) cpu::rope_forward_at<double>(v, inv, pos);
    if (offset != 0 && !forward) cpu::rope_backward_at<double>(v, inv, pos);
    return x;
  };

  // Angles in fp32: |error| <= pos * inv_freq * 2^-23 <= (S + offset) * 2^-23 rad, times |x1| + |x2| <= 2.
  const double abs_tol = double(S + offset) * 0x1p-22 + 1e-6;
  auto check = [&](const Vec& got, const Vec& want, const char* what) {
    EXPECT_CHECK(compare(got, want, kBf16Rel, abs_tol), what);
    expect_catches_corruption(got, want, kBf16Rel, abs_tol, what);
  };
  auto v_untouched = [&](const char* what) {
    const auto bits = raw(qkv);
    for (std::int64_t t = 0; t < tokens; ++t)
      for (std::int64_t i = (H + G) * d; i < width; ++i)
        ASSERT_EQ(bits[std::size_t(t * width + i)], before_bits[std::size_t(t * width + i)]) << what << " token " << t;
  };

  gpu::rope_forward(qk, dinv.view({d / 2}), nullptr, offset);
  const Vec fwd = decode(qkv);
  check(fwd, reference(before, true), "rope_forward");
  v_untouched("rope_forward");

  gpu::rope_backward(qk, dinv.view({d / 2}), nullptr, offset);
  const Vec bwd = decode(qkv);
  check(bwd, reference(fwd, false), "rope_backward");
  v_untouched("rope_backward");

  if (offset > 0) {  // the offset is applied: positions p (no offset) give another rotation
    Vec plain = before;
    cpu::rope_forward<double>(TensorView<double>(plain.data(), shape, strides, 4), inv);
    EXPECT_FALSE(compare(fwd, plain, kBf16Rel, abs_tol).ok()) << "rope_forward with pos_offset " << offset
                                                              << " matches the reference at positions p";
  }
}

TEST(CudaRope, GqaOnFusedQkvMatchesReference) {
  SKIP_WITHOUT_GPU();
  run_rope_case(1, 1, 1, 0, 16, false, 4001);      // one token, one head, the smallest head_dim
  run_rope_case(2, 37, 4, 2, 64, false, 4002);     // GQA, prime sequence length
  run_rope_case(3, 5, 3, 1, 256, true, 4003);      // wide heads, odd head counts
  run_rope_case(2, 129, 12, 12, 128, true, 4004);  // MHA
  run_rope_case(1, 8192, 32, 8, 128, true, 4005);  // Llama 3.1 8B shapes
}

// Context parallel: a rank's chunk of the sequence starts at pos_offset.
TEST(CudaRope, PositionOffsetMatchesReferenceAtShiftedPositions) {
  SKIP_WITHOUT_GPU();
  run_rope_case(1, 1, 1, 0, 16, false, 4011, 5);           // one token
  run_rope_case(2, 37, 4, 2, 64, false, 4012, 1000);       // GQA, prime chunk length
  run_rope_case(2, 64, 8, 2, 128, true, 4013, 192);        // the last quarter of a 256-token sequence
  run_rope_case(1, 2048, 32, 8, 128, true, 4014, 6144);    // Llama 3.1 8B, the last of 4 chunks of 8192
}

TEST(CudaRope, RejectsBadShapes) {
  SKIP_WITHOUT_GPU();
  Dev<bf16> x(4096);
  Dev<float> f(64);
  EXPECT_THROW(gpu::rope_forward(x.view({1, 4, 2, 24}), f.view({12}), nullptr), tb::Error);  // d = 24
  EXPECT_THROW(gpu::rope_forward(x.view({1, 4, 2, 32}), f.view({8}), nullptr), tb::Error);   // inv_freq length
  EXPECT_THROW(gpu::rope_forward(x.view({4, 2, 32}), f.view({16}), nullptr), tb::Error);     // rank 3
  const TensorView<bf16> odd(x.get(), tb::Shape{1, 4, 2, 32}, tb::Shape{256, 68, 34, 1}, 4);
  EXPECT_THROW(gpu::rope_forward(odd, f.view({16}), nullptr), tb::Error);  // head stride not a multiple of 8
  EXPECT_THROW(gpu::rope_forward(x.view({1, 4, 2, 32}), f.view({16}), nullptr, -1), tb::Error);  // negative offset
  EXPECT_THROW(gpu::rope_backward(x.view({1, 4, 2, 32}), f.view({16}), nullptr, (std::int64_t(1) << 24) - 3),
               tb::Error);  // last position 2^24: not exact in fp32
}

// ======================= embeddings =======================

// Tokens drawn from [0, pool); with hot: about half of them are token 7 (one token across many chunks); bad:
// a few out-of-range tokens (NaN rows forward, skipped backward).
void run_embedding_case(std::int64_t n, std::int64_t vocab, std::int64_t d, std::int64_t pool, bool hot, bool bad,
                        bool own_workspace, std::uint64_t seed) {
  SCOPED_TRACE("embedding n=" + std::to_string(n) + " V=" + std::to_string(vocab) + " d=" + std::to_string(d) +
               " pool=" + std::to_string(pool) + (hot ? " hot" : "") + (bad ? " bad" : "") +
               (own_workspace ? " workspace" : ""));
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> tok(sz(n));
  for (auto& t : tok) t = std::int32_t(std::uniform_int_distribution<std::int64_t>(0, pool - 1)(rng));
  if (hot)
    for (std::size_t i = 0; i < tok.size(); ++i)
      if (rng() % 2) tok[i] = 7;
  if (bad) {
    tok[0] = -1;
    tok[std::size_t(n / 2)] = std::int32_t(vocab);
  }
  Dev<std::int32_t> dtok(sz(n));
  TB_CHECK(cudaMemcpy(dtok.get(), tok.data(), tok.size() * 4, cudaMemcpyHostToDevice));
  Dev<bf16> table(sz(vocab * d)), y(sz(n * d)), dy(sz(n * d));
  Dev<float> de(sz(vocab * d)), de2(sz(vocab * d));
  fill(table, seed + 1, -1.f, 1.f);
  fill(dy, seed + 2, -1.f, 1.f);
  fill(de, seed + 3, -1.f, 1.f);
  TB_CHECK(cudaMemcpy(de2.get(), de.get(), de.size() * 4, cudaMemcpyDeviceToDevice));
  y.poison();

  gpu::embedding_forward(y.view({n, d}), table.view({vocab, d}), dtok.view({n}), nullptr);
  const auto ybits = raw(y), tbits = raw(table);
  for (std::int64_t t = 0; t < n; ++t) {
    const bool valid = tok[std::size_t(t)] >= 0 && tok[std::size_t(t)] < vocab;
    for (std::int64_t i = 0; i < d; ++i) {
      const std::uint16_t got = ybits[std::size_t(t * d + i)];
      if (valid)
        ASSERT_EQ(got, tbits[std::size_t(tok[std::size_t(t)] * d + i)]) << "y[" << t << ", " << i << "]";
      else
        ASSERT_TRUE(std::isnan(tb::bf16_to_float(got))) << "out-of-range token " << tok[std::size_t(t)] << " at " << t;
    }
  }

  const Vec de0 = decode(de);
  const std::size_t ws_bytes = gpu::embedding_backward_workspace_bytes(n, vocab, d);
  Dev<unsigned char> ws(own_workspace ? ws_bytes : 0);
  const tb::ops::Workspace workspace = own_workspace ? tb::ops::Workspace{ws.get(), ws_bytes} : tb::ops::Workspace{};
  gpu::embedding_backward(de.view({vocab, d}), dy.view({n, d}), dtok.view({n}), nullptr, workspace);
  gpu::embedding_backward(de2.view({vocab, d}), dy.view({n, d}), dtok.view({n}), nullptr, workspace);

  // Reference on the valid tokens only (the CPU reference rejects out-of-range tokens).
  const Vec hdy = decode(dy);
  std::vector<std::int32_t> valid_tok;
  Vec valid_dy;
  for (std::int64_t t = 0; t < n; ++t) {
    if (tok[std::size_t(t)] < 0 || tok[std::size_t(t)] >= vocab) continue;
    valid_tok.push_back(tok[std::size_t(t)]);
    valid_dy.insert(valid_dy.end(), hdy.begin() + t * d, hdy.begin() + (t + 1) * d);
  }
  Vec want = de0;
  cpu::embedding_backward<double>(hv(want, {vocab, d}), hc(valid_dy, {std::int64_t(valid_tok.size()), d}), valid_tok);
  const Vec got = decode(de);
  EXPECT_CHECK(check_grad32(got, want), "dE");
  expect_catches_corruption(got, want, 1e-3, 1e-3 * rms(want), "dE");
  EXPECT_EQ(got, decode(de2)) << "two identical backward calls differ: not deterministic";
}

TEST(CudaEmbedding, MatchesReference) {
  SKIP_WITHOUT_GPU();
  run_embedding_case(1, 16, 8, 16, false, false, false, 5001);
  run_embedding_case(97, 1000, 72, 50, false, false, true, 5002);       // repeats within and across chunks
  run_embedding_case(97, 1000, 72, 1000, false, true, false, 5003);     // out-of-range tokens
  run_embedding_case(4099, 3001, 136, 3001, true, false, false, 5004);  // one token spanning ~32 chunks
  run_embedding_case(200, 5, 2056, 5, false, false, true, 5005);        // tiny vocabulary: long runs everywhere
  run_embedding_case(8192, 4096, 4096, 4096, true, false, false, 5006);
}

TEST(CudaEmbedding, PositionsMatchReference) {
  SKIP_WITHOUT_GPU();
  // rows: the rows held, from flat row `first` of [batch, seq] (tensor parallel: a sequence-parallel slice)
  struct Case {
    std::int64_t rows, seq, max_seq, d, first;
  };
  for (const Case& c : {Case{1, 1, 1, 8, 0}, Case{111, 37, 40, 72, 0}, Case{4096, 2048, 2048, 4096, 0},
                        Case{50, 37, 40, 72, 61}, Case{20, 64, 64, 16, 32}, Case{300, 64, 70, 24, 5000}}) {
    SCOPED_TRACE("positions rows=" + std::to_string(c.rows) + " seq=" + std::to_string(c.seq) +
                 " d=" + std::to_string(c.d) + " first=" + std::to_string(c.first));
    const std::int64_t n = c.rows, d = c.d;
    Dev<bf16> y(sz(n * d)), p(sz(c.max_seq * d)), dy(sz(n * d));
    Dev<float> dp(sz(c.max_seq * d));
    fill(y, 6001, -1.f, 1.f);
    fill(p, 6002, -1.f, 1.f);
    fill(dy, 6003, -1.f, 1.f);
    fill(dp, 6004, -1.f, 1.f);
    Vec want_y = decode(y), want_dp = decode(dp);
    const Vec hp = decode(p), hdy = decode(dy);
    std::vector<std::int64_t> at(sz(n));
    for (std::int64_t t = 0; t < n; ++t) at[sz(t)] = (c.first + t) % c.seq;
    gpu::position_embedding_add(y.view({n, d}), p.view({c.max_seq, d}), int(c.seq), nullptr, c.first);
    gpu::position_embedding_backward(dp.view({c.max_seq, d}), dy.view({n, d}), int(c.seq), nullptr, c.first);
    cpu::position_embedding_add_at<double>(hv(want_y, {n, d}), hc(hp, {c.max_seq, d}), at);
    cpu::position_embedding_backward_at<double>(hv(want_dp, {c.max_seq, d}), hc(hdy, {n, d}), at);
    const Vec got_y = decode(y), got_dp = decode(dp);
    EXPECT_CHECK(check_bf16(got_y, want_y), "y");
    EXPECT_CHECK(check_grad32(got_dp, want_dp), "dP");
    expect_catches_corruption_bf16(got_y, want_y, "y");
    expect_catches_corruption(got_dp, want_dp, 1e-3, 1e-3 * rms(want_dp), "dP");
  }
}

TEST(CudaEmbedding, RejectsBadShapes) {
  SKIP_WITHOUT_GPU();
  Dev<bf16> table(64 * 16), y(8 * 16);
  Dev<float> de(64 * 16);
  Dev<std::int32_t> tok(8);
  EXPECT_THROW(gpu::embedding_forward(y.view({8, 12}), table.view({64, 12}), tok.view({8}), nullptr), tb::Error);
  EXPECT_THROW(gpu::embedding_forward(y.view({7, 16}), table.view({64, 16}), tok.view({8}), nullptr), tb::Error);
  EXPECT_THROW(gpu::embedding_backward(de.view({64, 16}), y.view({4, 16}), tok.view({8}), nullptr), tb::Error);
  EXPECT_THROW(gpu::position_embedding_add(y.view({8, 16}), table.view({64, 16}), 3, nullptr, -1), tb::Error);
  EXPECT_THROW(gpu::position_embedding_add(y.view({8, 16}), table.view({4, 16}), 8, nullptr), tb::Error);   // seq > 4
}

// bf16 gradients (the G = bf16 instances): norm dw/db, embedding and position gradients are each the fp32 kernel's
// result on the same (bf16) starting values, rounded to nearest once, bit for bit, where a row is added once (norms,
// positions, an embedding whose tokens fit one chunk); a token crossing chunks adds twice (two roundings): within half
// an ulp of the sum and half an ulp of the largest sum there. Negative: the fp32 dw is not bf16-exact (the bitwise check can fail).
// to = from's bf16 values widened to fp32 (the fp32 kernel's starting values).
void widen_into(const Dev<bf16>& from, Dev<float>& to) {
  const Vec v = decode(from);
  const std::vector<float> f(v.begin(), v.end());
  TB_CHECK(cudaMemcpy(to.get(), f.data(), f.size() * 4, cudaMemcpyHostToDevice));
}

std::vector<std::uint16_t> rounded(const Vec& v) {
  std::vector<std::uint16_t> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = tb::float_to_bf16(float(v[i]));
  return r;
}

TEST(CudaGradsBf16, RoundedOnceAsTheFp32Kernels) {
  SKIP_WITHOUT_GPU();
  {  // layernorm backward: dw and db
    const std::int64_t rows = 1031, dim = 2048;
    Dev<bf16> x(sz(rows * dim)), w(sz(dim)), b(sz(dim)), y(sz(rows * dim)), dy(sz(rows * dim)), dx(sz(rows * dim));
    Dev<bf16> dw16(sz(dim)), db16(sz(dim));
    Dev<float> mean(sz(rows)), rstd(sz(rows)), dw32(sz(dim)), db32(sz(dim));
    fill(x, 21, -2, 2), fill(w, 22, -0.5f, 0.5f), fill(b, 23, -1, 1), fill(dy, 24, -1, 1);
    fill(dw16, 25, -1, 1), fill(db16, 26, -1, 1);
    widen_into(dw16, dw32), widen_into(db16, db32);
    gpu::norm_forward(NormKind::layernorm, y.view({rows, dim}), mean.view({rows}), rstd.view({rows}),
                      x.view({rows, dim}), w.view({dim}), b.view({dim}), 1e-5f, nullptr);
    gpu::norm_backward(NormKind::layernorm, dx.view({rows, dim}), dw32.view({dim}), db32.view({dim}),
                       dy.view({rows, dim}), x.view({rows, dim}), w.view({dim}), mean.view({rows}), rstd.view({rows}),
                       nullptr);
    gpu::norm_backward(NormKind::layernorm, dx.view({rows, dim}), dw16.view({dim}), db16.view({dim}),
                       dy.view({rows, dim}), x.view({rows, dim}), w.view({dim}), mean.view({rows}), rstd.view({rows}),
                       nullptr);
    EXPECT_EQ(raw(dw16), rounded(decode(dw32))) << "norm dw";
    EXPECT_EQ(raw(db16), rounded(decode(db32))) << "norm db";
    const Vec w32 = decode(dw32);
    const auto inexact = [](double v) { return tb::bf16_to_float(tb::float_to_bf16(float(v))) != float(v); };
    EXPECT_TRUE(std::any_of(w32.begin(), w32.end(), inexact)) << "the fp32 dw is bf16-exact: the check cannot fail";
  }
  for (const std::int64_t n : {std::int64_t(60), std::int64_t(3000)}) {  // one chunk; a hot token across chunks
    SCOPED_TRACE("embedding n=" + std::to_string(n));
    const std::int64_t vocab = 300, d = 64;
    std::vector<std::int32_t> tok(sz(n));
    for (std::int64_t t = 0; t < n; ++t) tok[sz(t)] = std::int32_t((t * 7919) % 97 + (n > 64 && t % 2 ? 0 : 3));
    Dev<std::int32_t> dtok(sz(n));
    TB_CHECK(cudaMemcpy(dtok.get(), tok.data(), tok.size() * 4, cudaMemcpyHostToDevice));
    Dev<bf16> dy(sz(n * d)), de16(sz(vocab * d));
    Dev<float> de32(sz(vocab * d));
    fill(dy, 31, -1, 1), fill(de16, 32, -1, 1);
    widen_into(de16, de32);
    gpu::embedding_backward(de32.view({vocab, d}), dy.view({n, d}), dtok.view({n}), nullptr);
    gpu::embedding_backward(de16.view({vocab, d}), dy.view({n, d}), dtok.view({n}), nullptr);
    const Vec want32 = decode(de32);
    if (n <= 64) {
      EXPECT_EQ(raw(de16), rounded(want32));
    } else {  // two roundings: a bf16 ulp of the sum, plus half an ulp of the partial sum (at most the largest sum)
      const Vec got = decode(de16);
      double top = 0;
      for (double w : want32) top = std::max(top, std::fabs(w));
      std::int64_t far = 0;
      for (std::size_t i = 0; i < got.size(); ++i)
        far += std::fabs(got[i] - want32[i]) > 0x1p-8 * std::fabs(want32[i]) + 0x1p-8 * top;
      EXPECT_EQ(far, 0) << "beyond two bf16 roundings of the fp32 kernel's sum";
    }
  }
  {  // learned positions
    const std::int64_t seq = 64, rows = 4 * seq, d = 128;
    Dev<bf16> dy(sz(rows * d)), dp16(sz(seq * d));
    Dev<float> dp32(sz(seq * d));
    fill(dy, 41, -1, 1), fill(dp16, 42, -1, 1);
    widen_into(dp16, dp32);
    gpu::position_embedding_backward(dp32.view({seq, d}), dy.view({rows, d}), int(seq), nullptr);
    gpu::position_embedding_backward(dp16.view({seq, d}), dy.view({rows, d}), int(seq), nullptr);
    EXPECT_EQ(raw(dp16), rounded(decode(dp32))) << "position gradients";
  }
}

}  // namespace
