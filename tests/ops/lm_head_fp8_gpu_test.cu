// Tests ops/cuda/cross_entropy's FP8 LM head (lm_head_cross_entropy_fp8) on one GPU, stage by stage on its own
// intermediate tensors (read back from the scratch after a one-chunk call), then end to end:
//   xq, xq^T  = e4m3(x s_x) bit for bit (host conversion), s_x = 448 / amax(x)
//   logits    = (xq / s_x)(Wq / s_w)^T within bf16 rounding + fp32 accumulation: 2^-8 |ref| + 2^-9 sum |terms|
//   losses    = lse(logits) - logits[target] of the GPU's own logits, fp32: 1e-5 (1 + |lse|)
//   amax      = max |g| over the chunk, g = (2^(z log2 e - lse2) - onehot) grad_scale / t recomputed in double from the
//               GPU's logits and lse2: 1e-5 relative
//   dlq       = fp8(g s_g), s_g = fp8_max / amax (E5M2 57344; all-E4M3 448): equal codes, or neighbouring codes
//               where g s_g lies within 1e-4 (relative) of the rounding midpoint (fp32 vs double); stochastic rounding:
//               one of the two codes around g s_g; dlq^T its exact transpose
//   dx, dW    = the products of the dequantised FP8 operands (in double): bf16 output 2^-8 |ref| + 2^-9 sum |terms|;
//               fp32 output 2^-9 sum |terms|. Not fp32's 2^-24: Hopper's FP8 tensor cores add products at reduced
//               precision between promotions to fp32 even without fast accumulation (measured on an H200: errors up to
//               2^-11 of sum |terms|, 2^-12 failed 4.5% of dW's elements).
// End to end against the unquantised fp64 reference (ops/cpu/cross_entropy.h on the same bf16 x, W): mean loss within
// 2%, dx and dW within 15% relative L2 (E4M3 inputs, E5M2 gradients: ~2^-4 and 2^-3 relative per element). Several
// chunks agree with one chunk (losses 1e-3, dx and dW 15%); forward-only losses are bit-identical; a corrupted
// dx element fails its check; bad arguments throw before anything runs.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "bench/sysinfo.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/cpu/cross_entropy.h"
#include "ops/cuda/context.h"
#include "ops/cuda/cross_entropy.h"
#include "ops/cuda/fill.h"
#include "ops/cuda/fp8.h"

namespace {

using tb::TensorView;
using namespace tb::ops;
using bf16 = __nv_bfloat16;

#define SKIP_WITHOUT_GPU() \
  if (tb::bench::visible_gpu_count() == 0) GTEST_SKIP() << tb::bench::no_gpu_reason()

struct Case {
  std::int64_t t, vocab, h;
  float grad_scale;
  tb::DType grad = tb::DType::e5m2;  // the logit gradients' format
  bool stochastic = false;           // ... rounded stochastically
};

template <class T>
std::vector<T> down(const void* dev, std::size_t n) {
  std::vector<T> h(n);
  TB_CHECK(cudaMemcpy(h.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}
template <class T>
DeviceBuffer up(const std::vector<T>& h) {
  DeviceBuffer b(0, h.size() * sizeof(T) + 256);
  TB_CHECK(cudaMemcpy(b.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return b;
}
float scalar(const float* dev) { return down<float>(dev, 1)[0]; }

// One problem on the GPU: random bf16 x [t, h] (U(-1, 1)) and W [V, h] (logits of std ~2), W's FP8 copies made with
// fp8_cast as the decoder does, and the call's outputs.
struct Problem {
  Case c;
  std::vector<std::uint16_t> x, w;
  std::vector<std::int32_t> targets;
  DeviceBuffer dx_, dw_, x_, w_, tg_, wq_, wqt_, loss_;
  Fp8Scales scales{0, 3, 1, nullptr};  // W, x, dlogits

  explicit Problem(Case cs) : c(cs) {
    std::mt19937 rng(std::uint32_t(c.t * 131 + c.vocab * 7 + c.h));
    std::uniform_real_distribution<float> ux(-1, 1), uw(-6.0f / std::sqrt(float(c.h)), 6.0f / std::sqrt(float(c.h)));
    x.resize(std::size_t(c.t * c.h)), w.resize(std::size_t(c.vocab * c.h)), targets.resize(std::size_t(c.t));
    for (auto& v : x) v = tb::float_to_bf16(ux(rng));
    for (auto& v : w) v = tb::float_to_bf16(uw(rng));
    std::uniform_int_distribution<int> ut(0, int(c.vocab) - 1);
    for (auto& v : targets) v = ut(rng);
    x_ = up(x), w_ = up(w), tg_ = up(targets);
    dx_ = DeviceBuffer(0, x.size() * 2), dw_ = DeviceBuffer(0, w.size() * 4), loss_ = DeviceBuffer(0, 256);
    wq_ = DeviceBuffer(0, w.size()), wqt_ = DeviceBuffer(0, w.size());
    const Fp8Meta m = scales.meta(0);
    Fp8CastArgs a;
    a.x = w_.as<bf16>(), a.rows = c.vocab, a.cols = c.h, a.q = wq_.get(), a.qt = wqt_.get(), a.type = tb::DType::e4m3;
    a.amax_in = m.amax, a.scale = m.scale, a.scale_inv = m.scale_inv;
    fp8_amax(a.x, w.size(), m.amax, nullptr);
    fp8_cast(a, nullptr);
    TB_CHECK(cudaDeviceSynchronize());
  }
  // The unquantised head in fp64 (ops/cpu/cross_entropy.h) on the same bf16 x and W: mean loss, dx, dW.
  struct Exact {
    double loss;
    std::vector<double> dx, dw;
  };
  Exact exact() const {
    const std::size_t th = std::size_t(c.t * c.h), vh = std::size_t(c.vocab * c.h);
    std::vector<double> xd(th), wd(vh);
    for (std::size_t i = 0; i < th; ++i) xd[i] = tb::bf16_to_float(x[i]);
    for (std::size_t i = 0; i < vh; ++i) wd[i] = tb::bf16_to_float(w[i]);
    Exact e{0, std::vector<double>(th), std::vector<double>(vh, 0.0)};
    e.loss = cpu::lm_head_cross_entropy<double>({e.dx.data(), {c.t, c.h}}, {e.dw.data(), {c.vocab, c.h}},
                                                {xd.data(), {c.t, c.h}}, {wd.data(), {c.vocab, c.h}}, targets,
                                                int(c.t), c.grad_scale);
    return e;
  }
  LmHeadFp8 head(unsigned fp8_gemms = kHeadAllGemms) const {
    LmHeadFp8 f;
    f.wq = wq_.as<std::uint8_t>(), f.wqt = wqt_.as<std::uint8_t>(), f.w_scale_inv = scales.meta(0).scale_inv;
    f.x = scales.meta(1), f.dlogits = scales.meta(2), f.grad = c.grad, f.stochastic = c.stochastic;
    f.fp8_gemms = fp8_gemms, f.w_bf16 = fp8_gemms == kHeadAllGemms ? nullptr : w_.as<bf16>();
    return f;
  }
  // Runs the head with `chunk` (backward unless forward_only) into a fresh scratch, which it returns.
  // overwrite: dW starts as garbage (0.5 everywhere) and the call writes it (dw_overwrite); else zeros, accumulated.
  // fp8_gemms: the GEMMs in FP8 (the others BF16); bf16_head: the bf16 head (lm_head_cross_entropy) instead.
  DeviceBuffer run(DeviceContext& dc, int chunk, bool forward_only = false, bool overwrite = false,
                   unsigned fp8_gemms = kHeadAllGemms, bool bf16_head = false) {
    const LmHeadCeScratch L = lm_head_ce_scratch(c.t, c.vocab, c.h, chunk, !bf16_head);
    DeviceBuffer scratch(0, L.bytes);
    if (overwrite)
      tb::ops::fill_uniform(dw_.get(), tb::DType::f32, std::size_t(c.vocab * c.h), 5, 0.5f, 0.5001f, dc.stream());
    else
      TB_CHECK(cudaMemset(dw_.get(), 0, dw_.bytes()));
    TensorView<bf16> dx = forward_only ? TensorView<bf16>() : TensorView<bf16>(dx_.as<bf16>(), {c.t, c.h});
    TensorView<float> dw = forward_only ? TensorView<float>() : TensorView<float>(dw_.as<float>(), {c.vocab, c.h});
    if (bf16_head)
      lm_head_cross_entropy(dc, dx, dw, {x_.as<bf16>(), {c.t, c.h}}, {w_.as<bf16>(), {c.vocab, c.h}},
                            tg_.as<std::int32_t>(), chunk, c.grad_scale, loss_.as<float>(), {scratch.get(), L.bytes},
                            overwrite);
    else
      lm_head_cross_entropy_fp8(dc, dx, dw, {x_.as<bf16>(), {c.t, c.h}}, head(fp8_gemms), c.vocab,
                                tg_.as<std::int32_t>(), chunk, c.grad_scale, loss_.as<float>(),
                                {scratch.get(), L.bytes}, overwrite);
    dc.synchronize();
    return scratch;
  }
};

float bf(std::uint16_t b) { return tb::bf16_to_float(b); }
std::vector<float> widen(const std::vector<std::uint16_t>& bf16_bits) {  // bf16 values as floats
  std::vector<float> f(bf16_bits.size());
  for (std::size_t i = 0; i < f.size(); ++i) f[i] = bf(bf16_bits[i]);
  return f;
}

// Counts elements with |got - ref| > rel |ref| + abs_coef * mag (mag: the sum of |terms| of that element); reports
// the first three as test failures when `what` is not empty.
int violations(const std::vector<float>& got, const std::vector<double>& ref, const std::vector<double>& mag,
               double rel, double abs_coef, const std::string& what) {
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double tol = rel * std::fabs(ref[i]) + abs_coef * mag[i] + 1e-30;
    if (!(std::fabs(double(got[i]) - ref[i]) <= tol) && bad++ < 3 && !what.empty())
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << ref[i] << " +- " << tol;
  }
  return bad;
}

// FP8 codes [rows, K] (row-major) of one format and their dequantisation scale (scale_inv).
struct Codes {
  const std::vector<std::uint8_t>& q;
  bool e5m2;
  float scale_inv;
  double at(std::size_t i) const { return double(e5m2 ? tb::e5m2_to_float(q[i]) : tb::e4m3_to_float(q[i])) * scale_inv; }
};
struct Products {
  std::vector<double> sum, mag;  // [I, J]: sum_k a[i, k] b[j, k] and sum_k |a[i, k] b[j, k]|, in double
};
Products products(const Codes& a, const Codes& b, std::int64_t I, std::int64_t J, std::int64_t K) {
  Products p{std::vector<double>(std::size_t(I * J)), std::vector<double>(std::size_t(I * J))};
  for (std::int64_t i = 0; i < I; ++i)
    for (std::int64_t j = 0; j < J; ++j) {
      double s = 0, m = 0;
      for (std::int64_t k = 0; k < K; ++k) {
        const double t = a.at(std::size_t(i * K + k)) * b.at(std::size_t(j * K + k));
        s += t, m += std::fabs(t);
      }
      p.sum[std::size_t(i * J + j)] = s, p.mag[std::size_t(i * J + j)] = m;
    }
  return p;
}

class LmHeadFp8Gpu : public testing::TestWithParam<Case> {};

TEST_P(LmHeadFp8Gpu, EveryStageMatchesItsHostModel) {
  SKIP_WITHOUT_GPU();
  const Case c = GetParam();
  DeviceContext dc(0);
  Problem P(c);
  const int chunk = int(c.t);
  const DeviceBuffer scr = P.run(dc, chunk);
  const LmHeadCeScratch L = lm_head_ce_scratch(c.t, c.vocab, c.h, chunk, true);
  ASSERT_EQ(L.chunk, c.t);
  const auto* base = static_cast<const unsigned char*>(scr.get());
  const std::size_t tv = std::size_t(c.t * c.vocab), th = std::size_t(c.t * c.h), vh = std::size_t(c.vocab * c.h);
  const LmHeadFp8 f = P.head();

  // x's scale and FP8 copies, bit for bit.
  float amax_x = 0;
  for (auto b : P.x) amax_x = std::max(amax_x, std::fabs(bf(b)));
  const float s_x = fp8_scale_for(amax_x, 448.0f, 0);
  EXPECT_EQ(scalar(f.x.scale), s_x);
  const auto xq = down<std::uint8_t>(base + L.xq_offset, th), xqt = down<std::uint8_t>(base + L.xqt_offset, th);
  int xbad = 0;
  for (std::int64_t r = 0; r < c.t; ++r)
    for (std::int64_t k = 0; k < c.h; ++k) {
      const std::uint8_t want = tb::float_to_e4m3(bf(P.x[std::size_t(r * c.h + k)]) * s_x);
      xbad += xq[std::size_t(r * c.h + k)] != want || xqt[std::size_t(k * c.t + r)] != want;
    }
  EXPECT_EQ(xbad, 0);

  // Logits from the dequantised operands.
  const float xi = scalar(f.x.scale_inv), wi = scalar(f.w_scale_inv);
  const auto wq = down<std::uint8_t>(f.wq, vh), wqt = down<std::uint8_t>(f.wqt, vh);
  const auto zb = down<std::uint16_t>(base, tv);
  std::vector<float> z(tv);
  for (std::size_t i = 0; i < tv; ++i) z[i] = bf(zb[i]);
  const Products zref = products({xq, false, xi}, {wq, false, wi}, c.t, c.vocab, c.h);
  EXPECT_EQ(violations(z, zref.sum, zref.mag, 0x1p-8, 0x1p-9, "logits"), 0);

  // Losses and the gradients' amax from the GPU's own logits and lse2.
  const auto loss = down<float>(base + L.token_loss_offset, std::size_t(c.t));
  const auto lse2 = down<float>(base + L.lse_offset, std::size_t(c.t));
  const double scale = double(float(double(c.grad_scale) / double(c.t)));
  std::vector<double> g(tv);
  double amax = 0;
  for (std::int64_t r = 0; r < c.t; ++r) {
    double mx = -INFINITY, s = 0;
    for (std::int64_t v = 0; v < c.vocab; ++v) mx = std::max(mx, double(z[std::size_t(r * c.vocab + v)]));
    for (std::int64_t v = 0; v < c.vocab; ++v) s += std::exp(double(z[std::size_t(r * c.vocab + v)]) - mx);
    const double lse = mx + std::log(s);
    const std::int32_t tg = P.targets[std::size_t(r)];
    EXPECT_NEAR(loss[std::size_t(r)], lse - z[std::size_t(r * c.vocab + tg)], 1e-5 * (1 + std::fabs(lse))) << r;
    EXPECT_NEAR(lse2[std::size_t(r)], lse * M_LOG2E, 1e-5 * (1 + std::fabs(lse * M_LOG2E))) << r;
    for (std::int64_t v = 0; v < c.vocab; ++v) {
      const std::size_t i = std::size_t(r * c.vocab + v);
      g[i] = (std::exp2(double(z[i]) * M_LOG2E - double(lse2[std::size_t(r)])) - (v == tg ? 1.0 : 0.0)) * scale;
      amax = std::max(amax, std::fabs(g[i]));
    }
  }
  const float amax_gpu = scalar(f.dlogits.amax);
  EXPECT_NEAR(amax_gpu, amax, 1e-5 * amax);
  const float s_g = scalar(f.dlogits.scale);
  const bool e5m2 = c.grad == tb::DType::e5m2;
  EXPECT_EQ(s_g, fp8_scale_for(amax_gpu, fp8_max(c.grad), 0));
  const auto code = [&](double v) { return e5m2 ? tb::float_to_e5m2(float(v)) : tb::float_to_e4m3(float(v)); };
  const auto value = [&](std::uint8_t q) { return double(e5m2 ? tb::e5m2_to_float(q) : tb::e4m3_to_float(q)); };

  // dlq and its transpose.
  const auto dlq = down<std::uint8_t>(base + L.dlq_offset, tv), dlqt = down<std::uint8_t>(base + L.dlqt_offset, tv);
  int code_bad = 0, near_ties = 0, t_bad = 0;
  for (std::int64_t r = 0; r < c.t; ++r)
    for (std::int64_t v = 0; v < c.vocab; ++v) {
      const std::size_t i = std::size_t(r * c.vocab + v);
      t_bad += dlq[i] != dlqt[std::size_t(v * c.t + r)];
      const double val = g[i] * s_g;
      const std::uint8_t want = code(val);
      if (dlq[i] == want) continue;
      if (c.stochastic) {  // the other code around val: one magnitude step from the nearest, on val's side
        const double a = value(want);
        if (a != val && dlq[i] == (std::fabs(a) < std::fabs(val) ? want + 1 : want - 1)) continue;
        if (code_bad++ < 3) ADD_FAILURE() << "dlq[" << r << ", " << v << "] = " << value(dlq[i]) << ", value " << val;
        continue;
      }
      // Accept the neighbouring code only when val sits at the midpoint of the two (fp32 vs double rounding).
      const double a = value(dlq[i]), b = value(want);
      if (std::fabs(val - 0.5 * (a + b)) <= 1e-4 * std::fabs(val))
        ++near_ties;
      else if (code_bad++ < 3)
        ADD_FAILURE() << "dlq[" << r << ", " << v << "] = " << a << ", want " << b << " (value " << val << ")";
    }
  EXPECT_EQ(code_bad, 0);
  EXPECT_EQ(t_bad, 0);
  EXPECT_LT(near_ties, int(tv / 100));

  // dx and dW from the dequantised FP8 operands.
  const float gi = scalar(f.dlogits.scale_inv);
  const Products dx_ref = products({dlq, e5m2, gi}, {wqt, false, wi}, c.t, c.h, c.vocab);
  const Products dw_ref = products({dlqt, e5m2, gi}, {xqt, false, xi}, c.vocab, c.h, c.t);
  const std::vector<float> dx = widen(down<std::uint16_t>(P.dx_.get(), th));
  const auto dw = down<float>(P.dw_.get(), vh);
  EXPECT_EQ(violations(dx, dx_ref.sum, dx_ref.mag, 0x1p-8, 0x1p-9, "dx"), 0);
  EXPECT_EQ(violations(dw, dw_ref.sum, dw_ref.mag, 0.0, 0x1p-9, "dW"), 0);

  // A corrupted element fails the same check.
  std::vector<float> bad = dx;
  bad[th / 2] = float(dx_ref.sum[th / 2] + 0.05 * dx_ref.mag[th / 2] + 1e-3);
  EXPECT_EQ(violations(bad, dx_ref.sum, dx_ref.mag, 0x1p-8, 0x1p-9, ""), 1);
}

double rel_l2(const std::vector<float>& got, const std::vector<double>& ref) {
  double n = 0, d = 0;
  for (std::size_t i = 0; i < got.size(); ++i) n += (got[i] - ref[i]) * (got[i] - ref[i]), d += ref[i] * ref[i];
  return std::sqrt(n / d);
}

TEST_P(LmHeadFp8Gpu, EndToEndWithinFp8ErrorOfTheExactHead) {
  SKIP_WITHOUT_GPU();
  const Case c = GetParam();
  DeviceContext dc(0);
  Problem P(c);
  const std::size_t th = std::size_t(c.t * c.h), vh = std::size_t(c.vocab * c.h);
  const auto [loss_ref, dx_ref, dw_ref] = P.exact();
  const auto one = [&](int chunk) {
    P.run(dc, chunk);
    return std::tuple{double(scalar(P.loss_.as<float>())), widen(down<std::uint16_t>(P.dx_.get(), th)),
                      down<float>(P.dw_.get(), vh)};
  };
  const auto [loss1, dx1, dw1] = one(int(c.t));
  std::printf("t %lld V %lld h %lld: loss %.6f (exact %.6f, rel %.2e), dx rel L2 %.3f, dW rel L2 %.3f\n",
              (long long)c.t, (long long)c.vocab, (long long)c.h, loss1, loss_ref,
              std::fabs(loss1 - loss_ref) / loss_ref, rel_l2(dx1, dx_ref), rel_l2(dw1, dw_ref));
  EXPECT_NEAR(loss1, loss_ref, 0.02 * loss_ref);
  EXPECT_LT(rel_l2(dx1, dx_ref), 0.15);
  EXPECT_LT(rel_l2(dw1, dw_ref), 0.15);

  std::vector<float> dw64;  // chunk 64's accumulated dW, for the overwrite check below
  for (int chunk : {64, 96}) {  // 96 is rounded up to 128: whole 64 x 64 cast tiles
    const auto [loss, dx, dw] = one(chunk);
    EXPECT_NEAR(loss, loss1, 1e-3 * loss1) << chunk;
    EXPECT_LT(rel_l2(dx, dx_ref), 0.15) << chunk;
    EXPECT_LT(rel_l2(dw, dw_ref), 0.15) << chunk;
    if (chunk == 64) dw64 = dw;
  }
  // dw_overwrite over garbage (0.5 everywhere, far above |dW|): the accumulated run's dW to fp32 summation order.
  P.run(dc, 64, false, true);
  const auto dw_over = down<float>(P.dw_.get(), vh);
  EXPECT_LT(rel_l2(dw_over, std::vector<double>(dw64.begin(), dw64.end())), 1e-5);

  // Forward only: the same per-token losses, bit for bit, and no gradient written.
  const LmHeadCeScratch L = lm_head_ce_scratch(c.t, c.vocab, c.h, 64, true);
  const DeviceBuffer full = P.run(dc, 64);
  const auto want = down<float>(static_cast<const unsigned char*>(full.get()) + L.token_loss_offset, std::size_t(c.t));
  TB_CHECK(cudaMemset(P.dx_.get(), 0x7f, P.dx_.bytes()));
  const DeviceBuffer fwd = P.run(dc, 64, true);
  EXPECT_EQ(down<float>(static_cast<const unsigned char*>(fwd.get()) + L.token_loss_offset, std::size_t(c.t)), want);
  const auto dxb = down<std::uint16_t>(P.dx_.get(), th);
  EXPECT_EQ(dxb[0], 0x7f7f);
}

// fp8_gemms: each GEMM in FP8 or BF16. The per-token losses are the FP8 head's or the bf16 head's, bit for bit, as the
// forward GEMM is; a backward GEMM in the forward's precision gives that head's gradient bit for bit (none in FP8: the
// bf16 head exactly); one in the other precision a gradient equal to neither pure head's, within FP8 error of the
// exact head.
TEST_P(LmHeadFp8Gpu, EachGemmInFp8OrBf16) {
  SKIP_WITHOUT_GPU();
  const Case c = GetParam();
  DeviceContext dc(0);
  Problem P(c);
  const std::size_t th = std::size_t(c.t * c.h), vh = std::size_t(c.vocab * c.h);
  const auto [loss_ref, dx_ref, dw_ref] = P.exact();
  struct Out {
    std::vector<float> loss;  // per token
    std::vector<std::uint16_t> dx;
    std::vector<float> dw;
  };
  const int chunk = 64;  // several chunks, the same in both heads (whole 64-token tiles for the FP8 one)
  const auto one = [&](unsigned gemms, bool bf16_head = false) {
    const DeviceBuffer scr = P.run(dc, chunk, false, false, gemms, bf16_head);
    const LmHeadCeScratch L = lm_head_ce_scratch(c.t, c.vocab, c.h, chunk, !bf16_head);
    return Out{down<float>(static_cast<const unsigned char*>(scr.get()) + L.token_loss_offset, std::size_t(c.t)),
               down<std::uint16_t>(P.dx_.get(), th), down<float>(P.dw_.get(), vh)};
  };
  const Out bf16 = one(0, true), fp8 = one(kHeadAllGemms);
  ASSERT_NE(bf16.loss, fp8.loss);
  ASSERT_NE(bf16.dx, fp8.dx);
  for (unsigned g = 0; g <= kHeadAllGemms; ++g) {
    const Out o = one(g);
    const bool f8 = g & kHeadForward;
    const Out& same = f8 ? fp8 : bf16;
    EXPECT_EQ(o.loss, same.loss) << "fp8_gemms " << g;
    if (bool(g & kHeadDgrad) == f8) {
      EXPECT_EQ(o.dx, same.dx) << "fp8_gemms " << g;
    } else {
      EXPECT_NE(o.dx, bf16.dx) << g;
      EXPECT_NE(o.dx, fp8.dx) << g;
      EXPECT_LT(rel_l2(widen(o.dx), dx_ref), 0.15) << "fp8_gemms " << g;
    }
    if (bool(g & kHeadWgrad) == f8) {
      EXPECT_EQ(o.dw, same.dw) << "fp8_gemms " << g;
    } else {
      EXPECT_NE(o.dw, bf16.dw) << g;
      EXPECT_NE(o.dw, fp8.dw) << g;
      EXPECT_LT(rel_l2(o.dw, dw_ref), 0.15) << "fp8_gemms " << g;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, LmHeadFp8Gpu,
                         testing::Values(Case{256, 1024, 128, 1.0f},  // the vector cast for the gradients
                                         Case{192, 960, 64, 1.0f},    // ... warps idle in the last block
                                         Case{192, 1008, 64, 0.5f},   // V not a multiple of 64: 32 x 32 tiles
                                         Case{256, 1024, 128, 1.0f, tb::DType::e4m3},  // all-E4M3
                                         Case{256, 1024, 128, 1.0f, tb::DType::e5m2, true}),  // stochastic rounding
                         [](const testing::TestParamInfo<Case>& i) {
                           return "t" + std::to_string(i.param.t) + "_V" + std::to_string(i.param.vocab) + "_h" +
                                  std::to_string(i.param.h) + "_" + std::string(tb::dtype_name(i.param.grad)) +
                                  (i.param.stochastic ? "_stochastic" : "");
                         });

// bf16 weight gradients (dw of type bf16): both heads' dW within bf16 rounding of the fp32 dW of the same call, one
// chunk written (overwrite: 2^-8 |ref|, the rounding, + 2^-16 max |ref|, fp32 sums in another order) and two chunks
// accumulated (the first chunk's sum rounded too: + 2^-8 max |ref|) per element,
// and not all bit-equal to the fp32 values (they are rounded). Negative: the first chunk's dW alone (one of two) fails.
TEST(LmHeadBf16Grads, WithinBf16RoundingOfTheFp32Gradients) {
  SKIP_WITHOUT_GPU();
  DeviceContext dc(0);
  Problem P(Case{64, 512, 64, 1.0f});
  const std::int64_t V = P.c.vocab, h = P.c.h, t = P.c.t;
  DeviceBuffer dw16(0, std::size_t(V * h) * 2);
  for (const bool bf16_head : {true, false}) {
    for (const int chunk : {int(t), int(t / 2)}) {
      SCOPED_TRACE(std::string(bf16_head ? "bf16 head" : "FP8 head") + ", chunk " + std::to_string(chunk));
      P.run(dc, chunk, false, true, kHeadAllGemms, bf16_head);
      const std::vector<float> ref = down<float>(P.dw_.get(), std::size_t(V * h));
      const LmHeadCeScratch L = lm_head_ce_scratch(t, V, h, chunk, !bf16_head);
      DeviceBuffer scratch(0, L.bytes);
      const TensorView<bf16> dx(P.dx_.as<bf16>(), {t, h});
      const TensorView<bf16> dw(dw16.as<bf16>(), {V, h});
      if (bf16_head)
        lm_head_cross_entropy(dc, dx, dw, {P.x_.as<bf16>(), {t, h}}, {P.w_.as<bf16>(), {V, h}},
                              P.tg_.as<std::int32_t>(), chunk, 1.0f, P.loss_.as<float>(), {scratch.get(), L.bytes},
                              true);
      else
        lm_head_cross_entropy_fp8(dc, dx, dw, {P.x_.as<bf16>(), {t, h}}, P.head(), V, P.tg_.as<std::int32_t>(), chunk,
                                  1.0f, P.loss_.as<float>(), {scratch.get(), L.bytes}, true);
      dc.synchronize();
      const std::vector<float> got = widen(down<std::uint16_t>(dw16.get(), std::size_t(V * h)));
      double top = 0;  // the largest |dW|: a bound of the first chunk's partial sums, rounded once more
      for (float r : ref) top = std::max(top, std::fabs(double(r)));
      const double abs_tol = chunk < t ? 0x1p-8 * top : 0x1p-16 * top;
      std::int64_t bad = 0, equal = 0;
      for (std::size_t i = 0; i < ref.size(); ++i) {
        bad += !(std::fabs(double(got[i]) - ref[i]) <= 0x1p-8 * std::fabs(ref[i]) + abs_tol);
        equal += got[i] == ref[i];
      }
      EXPECT_EQ(bad, 0) << "of " << ref.size() << ", largest |dW| " << top;
      EXPECT_LT(equal, std::int64_t(ref.size()) / 2) << "dW is not rounded";
      if (chunk < t && bf16_head) {  // negative: the first chunk's part alone is far from the whole
        const TensorView<bf16> dx_half(P.dx_.as<bf16>(), {t / 2, h});
        lm_head_cross_entropy(dc, dx_half, dw, {P.x_.as<bf16>(), {t / 2, h}}, {P.w_.as<bf16>(), {V, h}},
                              P.tg_.as<std::int32_t>(), chunk, 1.0f, P.loss_.as<float>(), {scratch.get(), L.bytes},
                              true);
        dc.synchronize();
        const std::vector<float> half = widen(down<std::uint16_t>(dw16.get(), std::size_t(V * h)));
        std::int64_t off = 0;
        for (std::size_t i = 0; i < ref.size(); ++i)
          off += !(std::fabs(double(half[i]) - ref[i]) <= 0x1p-8 * std::fabs(ref[i]) + abs_tol);
        EXPECT_GT(off, std::int64_t(ref.size()) / 10) << "the check cannot tell half the gradient from all of it";
      }
    }
  }
}

TEST(LmHeadFp8GpuChecks, BadArgumentsThrowBeforeRunning) {
  SKIP_WITHOUT_GPU();
  DeviceContext dc(0);
  Problem P(Case{64, 1024, 64, 1.0f});
  const LmHeadCeScratch L = lm_head_ce_scratch(64, 1024, 64, 64, true);
  DeviceBuffer scratch(0, L.bytes);
  const TensorView<float> dw(P.dw_.as<float>(), {1024, 64});
  const auto call = [&](std::int64_t t, LmHeadFp8 f, std::size_t bytes) {
    lm_head_cross_entropy_fp8(dc, {P.dx_.as<bf16>(), {t, 64}}, dw, {P.x_.as<bf16>(), {t, 64}}, f, 1024,
                              P.tg_.as<std::int32_t>(), 64, 1.0f, P.loss_.as<float>(), {scratch.get(), bytes});
  };
  EXPECT_THROW(call(40, P.head(), L.bytes), tb::Error);  // tokens not a multiple of 16
  LmHeadFp8 no_w = P.head();
  no_w.wqt = nullptr;
  EXPECT_THROW(call(64, no_w, L.bytes), tb::Error);
  LmHeadFp8 bf16_grad = P.head();
  bf16_grad.grad = tb::DType::bf16;
  EXPECT_THROW(call(64, bf16_grad, L.bytes), tb::Error);
  EXPECT_THROW(call(64, P.head(), L.bytes - 256), tb::Error);  // scratch too small
  LmHeadFp8 no_bf16_w = P.head(kHeadDgrad);
  no_bf16_w.w_bf16 = nullptr;  // the forward and wgrad in BF16 need W in bf16
  EXPECT_THROW(call(64, no_bf16_w, L.bytes), tb::Error);
  EXPECT_THROW(call(64, P.head(8), L.bytes), tb::Error);  // not a set of LmHeadGemm bits
  EXPECT_NO_THROW(call(64, P.head(kHeadDgrad), L.bytes));
  EXPECT_NO_THROW(call(64, P.head(), L.bytes));
}

}  // namespace
