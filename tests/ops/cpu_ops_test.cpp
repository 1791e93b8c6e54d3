// Tests ops/cpu (the CPU reference ops): every backward against central finite differences in double
// (L = sum(out * R) for a random R, so dL/dout = R), forwards against small hand-computed cases and
// properties (softmax rows sum to 1, one token attends to itself, rope keeps norms, Llama 3.1 scaling per
// band), GQA / MHA / MQA, layernorm1p, the chunked LM head + cross-entropy equal to the unchunked one for
// several chunk sizes, float against double, and bad shapes raising tb::Error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <numbers>
#include <random>
#include <vector>

#include "core/error.h"
#include "ops/cpu/activation.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/cross_entropy.h"
#include "ops/cpu/embedding.h"
#include "ops/cpu/linear.h"
#include "ops/cpu/norm.h"
#include "ops/cpu/rope.h"

namespace {

using namespace tb::ops::cpu;
using tb::TensorView;
using Vec = std::vector<double>;

// Uniform in [-scale, scale]: random, never all zeros.
Vec rnd(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(-scale, scale);
  Vec v(n);
  for (double& x : v) x = u(g);
  return v;
}

template <class T>
TensorView<T> view(std::vector<T>& v, std::initializer_list<std::int64_t> shape) {
  return TensorView<T>(v.data(), shape);
}
template <class T>
TensorView<const T> cview(const std::vector<T>& v, std::initializer_list<std::int64_t> shape) {
  return TensorView<const T>(v.data(), shape);
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Checks g = dL/dx against (L(x + h e_i) - L(x - h e_i)) / 2h for every i (x is perturbed in place).
void check_grad(Vec& x, const Vec& g, const std::function<double()>& loss, const char* what) {
  ASSERT_EQ(x.size(), g.size()) << what;
  const double h = 1e-6;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double lp = loss();
    x[i] = saved - h;
    const double lm = loss();
    x[i] = saved;
    const double num = (lp - lm) / (2 * h);
    EXPECT_NEAR(g[i], num, 1e-6 * std::max(std::abs(g[i]), std::abs(num)) + 1e-8) << what << "[" << i << "]";
  }
}

// ---- embedding ----

TEST(CpuOps, EmbeddingForwardPicksRowsAndBackwardScatterAdds) {
  const int V = 5, d = 3;
  Vec E = rnd(V * d, 1), R = rnd(4 * d, 2), y(4 * d);
  const std::vector<std::int32_t> tok = {3, 0, 3, 4};  // token 3 twice
  embedding_forward(view(y, {4, d}), cview(E, {V, d}), tok);
  for (int t = 0; t < 4; ++t)
    for (int i = 0; i < d; ++i) EXPECT_EQ(y[t * d + i], E[tok[t] * d + i]);
  Vec dE = rnd(V * d, 3), dE0 = dE;  // accumulates onto what is there
  embedding_backward(view(dE, {V, d}), cview(R, {4, d}), tok);
  for (int i = 0; i < d; ++i) {
    EXPECT_DOUBLE_EQ(dE[3 * d + i] - dE0[3 * d + i], R[0 * d + i] + R[2 * d + i]);
    EXPECT_DOUBLE_EQ(dE[1 * d + i], dE0[1 * d + i]);  // token 1 unused
  }
  Vec g(V * d, 0.0);
  embedding_backward(view(g, {V, d}), cview(R, {4, d}), tok);
  check_grad(E, g, [&] { embedding_forward(view(y, {4, d}), cview(E, {V, d}), tok); return dot(y, R); }, "dE");
  const std::vector<std::int32_t> bad = {0, 5};
  EXPECT_THROW(embedding_forward(view(y, {2, d}), cview(E, {V, d}), bad), tb::Error);
}

TEST(CpuOps, PositionEmbeddingGradient) {
  const int batch = 2, seq = 3, max_seq = 4, d = 2;
  Vec P = rnd(max_seq * d, 4), x = rnd(batch * seq * d, 5), R = rnd(batch * seq * d, 6), y;
  auto loss = [&] {
    y = x;
    position_embedding_add(view(y, {batch * seq, d}), cview(P, {max_seq, d}), seq);
    return dot(y, R);
  };
  loss();
  EXPECT_DOUBLE_EQ(y[(seq + 2) * d + 1], x[(seq + 2) * d + 1] + P[2 * d + 1]);  // batch 1, position 2
  Vec g(P.size(), 0.0);
  position_embedding_backward(view(g, {max_seq, d}), cview(R, {batch * seq, d}), seq);
  EXPECT_EQ(g[3 * d], 0.0);  // position 3 is beyond seq
  check_grad(P, g, loss, "dP");
}

// ---- norms ----

TEST(CpuOps, NormForwardKnownValues) {
  Vec x = {3, 4}, w = {1, 1}, y(2), mean(1), rstd(1);
  norm_forward(NormKind::rmsnorm, view(y, {1, 2}), TensorView<double>{}, view(rstd, {1}), cview(x, {1, 2}),
               cview(w, {2}), {}, 0.0);
  const double rms = std::sqrt((9.0 + 16.0) / 2);
  EXPECT_NEAR(y[0], 3 / rms, 1e-15);
  EXPECT_NEAR(y[1], 4 / rms, 1e-15);
  EXPECT_NEAR(rstd[0], 1 / rms, 1e-15);

  Vec x3 = {1, 2, 3}, w3 = {2, 2, 2}, b3 = {0.5, 0.5, 0.5}, y3(3);
  norm_forward(NormKind::layernorm, view(y3, {1, 3}), view(mean, {1}), view(rstd, {1}), cview(x3, {1, 3}),
               cview(w3, {3}), cview(b3, {3}), 0.0);
  const double s = std::sqrt(2.0 / 3.0);  // population std of 1, 2, 3
  EXPECT_NEAR(mean[0], 2.0, 1e-15);
  EXPECT_NEAR(y3[0], -1 / s * 2 + 0.5, 1e-14);
  EXPECT_NEAR(y3[1], 0.5, 1e-14);
  EXPECT_NEAR(y3[2], 1 / s * 2 + 0.5, 1e-14);

  // layernorm1p with stored weight w - 1 = 1 is layernorm with weight 2.
  Vec w1p = {1, 1, 1}, y1p(3);
  norm_forward(NormKind::layernorm1p, view(y1p, {1, 3}), view(mean, {1}), view(rstd, {1}), cview(x3, {1, 3}),
               cview(w1p, {3}), cview(b3, {3}), 0.0);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(y1p[i], y3[i], 1e-14);
}

class NormGrad : public ::testing::TestWithParam<NormKind> {};

TEST_P(NormGrad, MatchesFiniteDifferences) {
  const NormKind kind = GetParam();
  const bool bias = kind != NormKind::rmsnorm;
  const int rows = 3, dim = 5;
  Vec x = rnd(rows * dim, 10, 2.0), w = rnd(dim, 11), b = rnd(dim, 12), R = rnd(rows * dim, 13);
  Vec y(rows * dim), mean(rows), rstd(rows);
  auto fwd = [&] {
    norm_forward(kind, view(y, {rows, dim}), view(mean, {rows}), view(rstd, {rows}), cview(x, {rows, dim}),
                 cview(w, {dim}), bias ? cview(b, {dim}) : TensorView<const double>{}, 1e-5);
    return dot(y, R);
  };
  fwd();
  Vec dx(rows * dim), dw = rnd(dim, 14), db = rnd(dim, 15);
  const Vec dw0 = dw, db0 = db;  // parameter grads accumulate
  norm_backward(kind, view(dx, {rows, dim}), view(dw, {dim}), bias ? view(db, {dim}) : TensorView<double>{},
                cview(R, {rows, dim}), cview(x, {rows, dim}), cview(w, {dim}), cview(mean, {rows}),
                cview(rstd, {rows}));
  for (int i = 0; i < dim; ++i) dw[i] -= dw0[i], db[i] -= db0[i];
  check_grad(x, dx, fwd, "dx");
  check_grad(w, dw, fwd, "dw");
  if (bias) check_grad(b, db, fwd, "db");
}

TEST_P(NormGrad, FusedResidualForm) {
  // r = x + residual_in, y = norm(r); L = sum(y * R1) + sum(r * R2): R2 is the gradient arriving through
  // the residual stream (dr_next), and dr is the gradient of both x and residual_in.
  const NormKind kind = GetParam();
  const bool bias = kind != NormKind::rmsnorm;
  const int rows = 4, dim = 6;
  Vec x = rnd(rows * dim, 20), res = rnd(rows * dim, 21), w = rnd(dim, 22), b = rnd(dim, 23);
  Vec R1 = rnd(rows * dim, 24), R2 = rnd(rows * dim, 25), y(rows * dim), r(rows * dim), mean(rows), rstd(rows);
  auto bview = [&] { return bias ? cview(b, {dim}) : TensorView<const double>{}; };
  auto fwd = [&] {
    add_norm_forward(kind, view(y, {rows, dim}), view(r, {rows, dim}), view(mean, {rows}), view(rstd, {rows}),
                     cview(x, {rows, dim}), cview(res, {rows, dim}), cview(w, {dim}), bview(), 1e-5);
    return dot(y, R1) + dot(r, R2);
  };
  fwd();
  for (int i = 0; i < rows * dim; ++i) EXPECT_DOUBLE_EQ(r[i], x[i] + res[i]);
  Vec dr(rows * dim), dw(dim, 0.0), db(dim, 0.0);
  add_norm_backward(kind, view(dr, {rows, dim}), view(dw, {dim}), bias ? view(db, {dim}) : TensorView<double>{},
                    cview(R1, {rows, dim}), cview(R2, {rows, dim}), cview(r, {rows, dim}), cview(w, {dim}),
                    cview(mean, {rows}), cview(rstd, {rows}));
  check_grad(x, dr, fwd, "dx");
  check_grad(res, dr, fwd, "dresidual_in");
  check_grad(w, dw, fwd, "dw");
  if (bias) check_grad(b, db, fwd, "db");
}

INSTANTIATE_TEST_SUITE_P(Kinds, NormGrad,
                         ::testing::Values(NormKind::rmsnorm, NormKind::layernorm, NormKind::layernorm1p));

TEST(CpuOps, RmsnormRejectsABias) {
  Vec x = rnd(4, 1), w = rnd(2, 2), b = rnd(2, 3), y(4), rstd(2);
  EXPECT_THROW(norm_forward(NormKind::rmsnorm, view(y, {2, 2}), TensorView<double>{}, view(rstd, {2}),
                            cview(x, {2, 2}), cview(w, {2}), cview(b, {2}), 1e-5),
               tb::Error);
  EXPECT_THROW(norm_forward(NormKind::rmsnorm, view(y, {2, 2}), TensorView<double>{}, view(rstd, {2}),
                            cview(x, {2, 2}), cview(b, {1}), {}, 1e-5),
               tb::Error);  // w of the wrong width
}

// ---- rope ----

TEST(CpuOps, RopeFrequenciesAndLlama31Scaling) {
  const int d = 128;
  const double theta = 500000.0;
  const auto plain = rope_inv_freq(d, theta);
  ASSERT_EQ(plain.size(), 64u);
  EXPECT_DOUBLE_EQ(plain[0], 1.0);
  EXPECT_NEAR(plain[10], std::pow(theta, -20.0 / d), 1e-18);
  const RopeScaling s;  // factor 8, low 1, high 4, original 8192
  const auto scaled = rope_inv_freq(d, theta, &s);
  int high = 0, low = 0, mid = 0;
  for (int i = 0; i < 64; ++i) {
    const double wavelen = 2 * std::numbers::pi / plain[i];
    if (wavelen < 8192.0 / 4) {  // high frequency: unchanged
      EXPECT_DOUBLE_EQ(scaled[i], plain[i]) << i;
      ++high;
    } else if (wavelen > 8192.0 / 1) {  // low frequency: divided by the factor
      EXPECT_DOUBLE_EQ(scaled[i], plain[i] / 8) << i;
      ++low;
    } else {  // between: interpolated, strictly between the two
      const double smooth = (8192.0 / wavelen - 1) / (4 - 1);
      EXPECT_NEAR(scaled[i], (1 - smooth) * plain[i] / 8 + smooth * plain[i], 1e-15) << i;
      EXPECT_GT(scaled[i], plain[i] / 8);
      EXPECT_LT(scaled[i], plain[i]);
      ++mid;
    }
  }
  EXPECT_GT(high, 0);
  EXPECT_GT(low, 0);
  EXPECT_GT(mid, 0);
  EXPECT_THROW(rope_inv_freq(7, theta), tb::Error);
}

TEST(CpuOps, RopeRotatesPairsKeepsNormsAndInvertsItself) {
  const int b = 2, s = 5, h = 3, d = 8;
  const auto f = rope_inv_freq(d, 10000.0);
  const Vec x0 = rnd(b * s * h * d, 30);
  Vec x = x0;
  rope_forward(view(x, {b, s, h, d}), f);
  for (int bi = 0; bi < b; ++bi)
    for (int p = 0; p < s; ++p)
      for (int hi = 0; hi < h; ++hi) {
        const int base = ((bi * s + p) * h + hi) * d;
        for (int i = 0; i < d / 2; ++i) {
          const double a = p * f[i], x1 = x0[base + i], x2 = x0[base + i + d / 2];
          EXPECT_NEAR(x[base + i], x1 * std::cos(a) - x2 * std::sin(a), 1e-14);
          EXPECT_NEAR(x[base + i + d / 2], x2 * std::cos(a) + x1 * std::sin(a), 1e-14);
          EXPECT_NEAR(std::hypot(x[base + i], x[base + i + d / 2]), std::hypot(x1, x2), 1e-14);
          if (p == 0) {
            EXPECT_EQ(x[base + i], x1);  // position 0: no rotation
          }
        }
      }
  rope_backward(view(x, {b, s, h, d}), f);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], x0[i], 1e-14);
}

TEST(CpuOps, RopeGradientOnAStridedView) {
  // Q inside a fused [tokens, q | k] buffer: the view's row stride is wider than heads * head_dim.
  const int b = 1, s = 4, h = 2, d = 4, width = 3 * h * d;
  const auto f = rope_inv_freq(d, 10.0);
  Vec buf = rnd(b * s * width, 31), R = rnd(buf.size(), 32), y;
  auto strided = [&](Vec& v) {
    return TensorView<double>(v.data(), tb::Shape{b, s, h, d}, tb::Shape{s * width, width, d, 1}, 4);
  };
  auto loss = [&] {
    y = buf;
    rope_forward(strided(y), f);
    return dot(y, R);
  };
  loss();
  Vec g = R;  // d(sum(rope(x) R))/dx = rope^-1(R) on the rotated part, R elsewhere
  rope_backward(strided(g), f);
  check_grad(buf, g, loss, "drope");
}

// ---- attention ----

TEST(CpuOps, AttentionOneTokenReturnsV) {
  const int b = 2, H = 4, KV = 2, d = 3;
  Vec q = rnd(b * H * d, 40), k = rnd(b * KV * d, 41), v = rnd(b * KV * d, 42), o(b * H * d), lse(b * H);
  attention_forward(view(o, {b, 1, H, d}), view(lse, {b, H, 1}), cview(q, {b, 1, H, d}), cview(k, {b, 1, KV, d}),
                    cview(v, {b, 1, KV, d}));
  for (int bi = 0; bi < b; ++bi)
    for (int h = 0; h < H; ++h) {
      for (int c = 0; c < d; ++c) EXPECT_DOUBLE_EQ(o[(bi * H + h) * d + c], v[(bi * KV + h / 2) * d + c]);
      double qk = 0;  // with one key, lse = its score
      for (int c = 0; c < d; ++c) qk += q[(bi * H + h) * d + c] * k[(bi * KV + h / 2) * d + c];
      EXPECT_NEAR(lse[bi * H + h], qk / std::sqrt(double(d)), 1e-15);
    }
}

TEST(CpuOps, AttentionIsCausalAndAveragesForEqualScores) {
  const int s = 4, H = 2, KV = 1, d = 2;
  Vec q(s * H * d, 0.0), k = rnd(s * KV * d, 43), v = rnd(s * KV * d, 44), o(s * H * d), lse(H * s);
  // q = 0: every visible key scores 0, so o_i = mean(v_0..v_i) and lse_i = log(i + 1).
  attention_forward(view(o, {1, s, H, d}), view(lse, {1, H, s}), cview(q, {1, s, H, d}), cview(k, {1, s, KV, d}),
                    cview(v, {1, s, KV, d}));
  for (int i = 0; i < s; ++i)
    for (int h = 0; h < H; ++h) {
      EXPECT_NEAR(lse[h * s + i], std::log(i + 1.0), 1e-15);
      for (int c = 0; c < d; ++c) {
        double mean = 0;
        for (int j = 0; j <= i; ++j) mean += v[j * d + c] / (i + 1);
        EXPECT_NEAR(o[(i * H + h) * d + c], mean, 1e-15);
      }
    }
  // Changing the last key/value changes only the last query's output.
  q = rnd(q.size(), 45);
  Vec o1(o.size()), o2(o.size());
  attention_forward(view(o1, {1, s, H, d}), view(lse, {1, H, s}), cview(q, {1, s, H, d}), cview(k, {1, s, KV, d}),
                    cview(v, {1, s, KV, d}));
  k[(s - 1) * d] += 1.0, v[(s - 1) * d] += 1.0;
  attention_forward(view(o2, {1, s, H, d}), view(lse, {1, H, s}), cview(q, {1, s, H, d}), cview(k, {1, s, KV, d}),
                    cview(v, {1, s, KV, d}));
  for (int i = 0; i < (s - 1) * H * d; ++i) EXPECT_EQ(o1[i], o2[i]) << i;
  EXPECT_NE(o1[(s - 1) * H * d], o2[(s - 1) * H * d]);
}

struct AttnCase {
  int heads, kv_heads, v_dim;  // v_dim: v's head width (d but for multi-head latent attention)
};
class AttentionGrad : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionGrad, MatchesFiniteDifferences) {
  const int b = 2, s = 5, d = 4, H = GetParam().heads, KV = GetParam().kv_heads, dv = GetParam().v_dim;
  Vec q = rnd(b * s * H * d, 50), k = rnd(b * s * KV * d, 51), v = rnd(b * s * KV * dv, 52);
  Vec R = rnd(b * s * H * dv, 53), o(R.size()), lse(b * H * s);
  auto fwd = [&] {
    attention_forward(view(o, {b, s, H, dv}), view(lse, {b, H, s}), cview(q, {b, s, H, d}), cview(k, {b, s, KV, d}),
                      cview(v, {b, s, KV, dv}));
    return dot(o, R);
  };
  fwd();
  Vec dq(q.size()), dk(k.size()), dvv(v.size());
  attention_backward(view(dq, {b, s, H, d}), view(dk, {b, s, KV, d}), view(dvv, {b, s, KV, dv}),
                     cview(R, {b, s, H, dv}), cview(q, {b, s, H, d}), cview(k, {b, s, KV, d}),
                     cview(v, {b, s, KV, dv}), cview(o, {b, s, H, dv}), cview(lse, {b, H, s}));
  check_grad(q, dq, fwd, "dq");
  check_grad(k, dk, fwd, "dk");
  check_grad(v, dvv, fwd, "dv");
}

INSTANTIATE_TEST_SUITE_P(Heads, AttentionGrad,
                         ::testing::Values(AttnCase{2, 2, 4} /* MHA */, AttnCase{4, 2, 4} /* GQA */,
                                           AttnCase{3, 1, 4} /* MQA */, AttnCase{2, 2, 6} /* MLA: v wider */,
                                           AttnCase{3, 3, 2} /* MLA: v narrower, as DeepSeek's 192 / 128 */),
                         [](const auto& tp) {
                           return "h" + std::to_string(tp.param.heads) + "kv" + std::to_string(tp.param.kv_heads) +
                                  "dv" + std::to_string(tp.param.v_dim);
                         });

TEST(CpuOps, AttentionRejectsKvHeadsNotDividingHeads) {
  Vec q = rnd(3 * 2, 1), k = rnd(2 * 2, 2), o(6), lse(3);
  EXPECT_THROW(attention_forward(view(o, {1, 1, 3, 2}), view(lse, {1, 3, 1}), cview(q, {1, 1, 3, 2}),
                                 cview(k, {1, 1, 2, 2}), cview(k, {1, 1, 2, 2})),
               tb::Error);
}

// ---- activations ----

TEST(CpuOps, ActivationKnownValues) {
  Vec x = {1.0, -2.0, 3.0}, y(3);
  gelu_forward(view(y, {1, 3}), cview(x, {1, 3}));
  const double c = std::sqrt(2 / std::numbers::pi);
  for (int i = 0; i < 3; ++i)
    EXPECT_NEAR(y[i], 0.5 * x[i] * (1 + std::tanh(c * (x[i] + 0.044715 * x[i] * x[i] * x[i]))), 1e-15);
  EXPECT_NEAR(y[0], 0.8411919906082768, 1e-12);  // GELU-tanh(1), as torch gelu(approximate="tanh")
  sqrelu_forward(view(y, {1, 3}), cview(x, {1, 3}));
  EXPECT_EQ(y[0], 1.0);
  EXPECT_EQ(y[1], 0.0);
  EXPECT_EQ(y[2], 9.0);
  Vec gu = {1.0, -2.0, 2.0, 0.5}, s(2);  // [gate 1, gate -2 | up 2, up 0.5]
  swiglu_forward(view(s, {1, 2}), cview(gu, {1, 4}));
  EXPECT_NEAR(s[0], 1.0 / (1 + std::exp(-1.0)) * 2.0, 1e-15);
  EXPECT_NEAR(s[1], -2.0 / (1 + std::exp(2.0)) * 0.5, 1e-15);
  EXPECT_THROW(swiglu_forward(view(s, {1, 2}), cview(x, {1, 3})), tb::Error);  // odd width
}

TEST(CpuOps, ActivationGradients) {
  const int t = 3, f = 4;
  Vec x = rnd(t * f, 60, 3.0), R = rnd(t * f, 61), y(t * f), dx(t * f);
  auto g_fwd = [&] { gelu_forward(view(y, {t, f}), cview(x, {t, f})); return dot(y, R); };
  gelu_backward(view(dx, {t, f}), cview(R, {t, f}), cview(x, {t, f}));
  check_grad(x, dx, g_fwd, "gelu");
  auto s_fwd = [&] { sqrelu_forward(view(y, {t, f}), cview(x, {t, f})); return dot(y, R); };
  sqrelu_backward(view(dx, {t, f}), cview(R, {t, f}), cview(x, {t, f}));
  check_grad(x, dx, s_fwd, "sqrelu");
  Vec gu = rnd(t * 2 * f, 62, 3.0), dgu(gu.size());
  auto w_fwd = [&] { swiglu_forward(view(y, {t, f}), cview(gu, {t, 2 * f})); return dot(y, R); };
  swiglu_backward(view(dgu, {t, 2 * f}), cview(R, {t, f}), cview(gu, {t, 2 * f}));
  check_grad(gu, dgu, w_fwd, "swiglu");
}

// ---- linear ----

TEST(CpuOps, LinearForwardAndGradients) {
  Vec x1 = {1, 2}, w1 = {1, 0, 0, 1, 1, 1}, b1 = {0.5, 0, -1}, y1(3);  // W: [3, 2]
  linear_forward(view(y1, {1, 3}), cview(x1, {1, 2}), cview(w1, {3, 2}), cview(b1, {3}));
  EXPECT_EQ(y1, (Vec{1.5, 2, 2}));

  const int T = 3, K = 4, N = 5;
  Vec x = rnd(T * K, 70), w = rnd(N * K, 71), b = rnd(N, 72), R = rnd(T * N, 73), y(T * N);
  auto fwd = [&] {
    linear_forward(view(y, {T, N}), cview(x, {T, K}), cview(w, {N, K}), cview(b, {N}));
    return dot(y, R);
  };
  Vec dx(T * K), dw(N * K, 0.0), db(N, 0.0);
  linear_backward(view(dx, {T, K}), view(dw, {N, K}), view(db, {N}), cview(R, {T, N}), cview(x, {T, K}),
                  cview(w, {N, K}));
  check_grad(x, dx, fwd, "dx");
  check_grad(w, dw, fwd, "dW");
  check_grad(b, db, fwd, "db");
  // dW and db accumulate; dx is written.
  const Vec dw1 = dw, db1 = db, dx1 = dx;
  linear_backward(view(dx, {T, K}), view(dw, {N, K}), view(db, {N}), cview(R, {T, N}), cview(x, {T, K}),
                  cview(w, {N, K}));
  for (std::size_t i = 0; i < dw.size(); ++i) EXPECT_NEAR(dw[i], 2 * dw1[i], 1e-15);
  for (std::size_t i = 0; i < db.size(); ++i) EXPECT_NEAR(db[i], 2 * db1[i], 1e-15);
  EXPECT_EQ(dx, dx1);
  EXPECT_THROW(linear_forward(view(y, {T, N}), cview(x, {T, K}), cview(w, {K, N})), tb::Error);
}

// ---- cross-entropy ----

TEST(CpuOps, CrossEntropyValuesAndSoftmaxRows) {
  const int T = 3, V = 7;
  Vec uniform(T * V, 0.25);
  const std::vector<std::int32_t> tgt = {0, 6, 3};
  EXPECT_NEAR(cross_entropy<double>({}, cview(uniform, {T, V}), tgt), std::log(double(V)), 1e-14);
  Vec z = rnd(T * V, 80, 3.0), dz(T * V);
  const double scale = 0.5;
  const double loss = cross_entropy(view(dz, {T, V}), cview(z, {T, V}), tgt, scale);
  double expect = 0;
  for (int t = 0; t < T; ++t) {
    double sum = 0, psum = 0;
    for (int v = 0; v < V; ++v) sum += std::exp(z[t * V + v]);
    expect += std::log(sum) - z[t * V + tgt[t]];
    for (int v = 0; v < V; ++v) {
      const double p = dz[t * V + v] * T / scale + (v == tgt[t] ? 1 : 0);  // softmax back from dlogits
      EXPECT_NEAR(p, std::exp(z[t * V + v]) / sum, 1e-15);
      EXPECT_GT(p, 0);
      psum += p;
    }
    EXPECT_NEAR(psum, 1.0, 1e-14);
  }
  EXPECT_NEAR(loss, expect / T, 1e-14);
  for (double& g : dz) g /= scale;
  check_grad(z, dz, [&] { return cross_entropy<double>({}, cview(z, {T, V}), tgt); }, "dlogits");
  const std::vector<std::int32_t> bad = {0, 7, 1};
  EXPECT_THROW(cross_entropy<double>({}, cview(z, {T, V}), bad), tb::Error);
}

TEST(CpuOps, LmHeadCrossEntropyChunkedEqualsUnchunked) {
  const int T = 10, H = 6, V = 11;
  const double scale = 0.75;
  Vec x = rnd(T * H, 90), w = rnd(V * H, 91);
  std::vector<std::int32_t> tgt(T);
  for (int t = 0; t < T; ++t) tgt[t] = (t * 7 + 3) % V;
  // Unchunked: full logits, cross_entropy, then the linear backward.
  Vec logits(T * V), dlogits(T * V), dx_ref(T * H), dw_ref(V * H, 0.0);
  linear_forward(view(logits, {T, V}), cview(x, {T, H}), cview(w, {V, H}));
  const double loss_ref = cross_entropy(view(dlogits, {T, V}), cview(logits, {T, V}), tgt, scale);
  linear_backward(view(dx_ref, {T, H}), view(dw_ref, {V, H}), TensorView<double>{}, cview(dlogits, {T, V}),
                  cview(x, {T, H}), cview(w, {V, H}));
  for (int chunk : {1, 3, 4, 7, 10, 64}) {  // 3, 4, 7 do not divide 10
    Vec dx(T * H), dw(V * H, 0.0);
    const double loss = lm_head_cross_entropy(view(dx, {T, H}), view(dw, {V, H}), cview(x, {T, H}), cview(w, {V, H}),
                                              tgt, chunk, scale);
    EXPECT_NEAR(loss, loss_ref, 1e-14) << "chunk " << chunk;
    for (int i = 0; i < T * H; ++i) EXPECT_NEAR(dx[i], dx_ref[i], 1e-15) << "chunk " << chunk;
    for (int i = 0; i < V * H; ++i) EXPECT_NEAR(dw[i], dw_ref[i], 1e-15) << "chunk " << chunk;
    EXPECT_NEAR(lm_head_cross_entropy<double>({}, {}, cview(x, {T, H}), cview(w, {V, H}), tgt, chunk), loss_ref,
                1e-14);
  }
  // And against finite differences (grad_scale 1).
  Vec dx(T * H), dw(V * H, 0.0);
  lm_head_cross_entropy(view(dx, {T, H}), view(dw, {V, H}), cview(x, {T, H}), cview(w, {V, H}), tgt, 3);
  auto loss = [&] { return lm_head_cross_entropy<double>({}, {}, cview(x, {T, H}), cview(w, {V, H}), tgt, 3); };
  check_grad(x, dx, loss, "dx");
  check_grad(w, dw, loss, "dW");
  EXPECT_THROW(lm_head_cross_entropy(view(dx, {T, H}), view(dw, {V, H}), cview(x, {T, H}), cview(w, {V, H}), tgt, 0),
               tb::Error);
}

// ---- float against double ----

std::vector<float> to_float(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }

void expect_close(const std::vector<float>& f, const Vec& d, double tol, const char* what) {
  ASSERT_EQ(f.size(), d.size());
  for (std::size_t i = 0; i < d.size(); ++i)
    EXPECT_NEAR(f[i], d[i], tol * (1 + std::abs(d[i]))) << what << "[" << i << "]";
}

TEST(CpuOps, FloatAgreesWithDouble) {
  const int b = 1, s = 6, H = 4, KV = 2, d = 8, dim = H * d, T = b * s, V = 13;
  const Vec x = rnd(T * dim, 100), w = rnd(dim, 101), bias = rnd(dim, 102), k = rnd(T * KV * d, 103);
  const Vec v = rnd(T * KV * d, 104), wl = rnd(V * dim, 105);
  const std::vector<std::int32_t> tgt = {1, 5, 12, 0, 7, 7};
  const auto f = rope_inv_freq(d, 10000.0);
  // In T: layernorm -> rope (as q) -> attention -> LM head + CE, then the backward of the last two.
  auto pipeline = [&](auto zero, const auto& xx, const auto& ww, const auto& bb, const auto& kk, const auto& vv,
                      const auto& wlm, auto& out_o, auto& out_dx, auto& out_dq) {
    using T_ = decltype(zero);
    using Vt = std::vector<T_>;
    Vt y(T * dim), mean(T), rstd(T), lse(H * s), dk(kk.size()), dv(vv.size());
    norm_forward(NormKind::layernorm, view(y, {T, dim}), view(mean, {T}), view(rstd, {T}), cview(xx, {T, dim}),
                 cview(ww, {dim}), cview(bb, {dim}), 1e-5);
    rope_forward(view(y, {b, s, H, d}), f);
    out_o.assign(T * dim, 0);
    attention_forward(view(out_o, {b, s, H, d}), view(lse, {b, H, s}), cview(y, {b, s, H, d}), cview(kk, {b, s, KV, d}),
                      cview(vv, {b, s, KV, d}));
    Vt dw(wlm.size(), 0);
    out_dx.assign(T * dim, 0);
    const double loss = lm_head_cross_entropy(view(out_dx, {T, dim}), view(dw, {V, dim}), cview(out_o, {T, dim}),
                                              cview(wlm, {V, dim}), tgt, 4);
    out_dq.assign(T * dim, 0);
    attention_backward(view(out_dq, {b, s, H, d}), view(dk, {b, s, KV, d}), view(dv, {b, s, KV, d}),
                       cview(out_dx, {b, s, H, d}), cview(y, {b, s, H, d}), cview(kk, {b, s, KV, d}),
                       cview(vv, {b, s, KV, d}), cview(out_o, {b, s, H, d}), cview(lse, {b, H, s}));
    return loss;
  };
  Vec o_d, dx_d, dq_d;
  std::vector<float> o_f, dx_f, dq_f;
  const double loss_d = pipeline(0.0, x, w, bias, k, v, wl, o_d, dx_d, dq_d);
  const double loss_f = pipeline(0.0f, to_float(x), to_float(w), to_float(bias), to_float(k), to_float(v),
                                 to_float(wl), o_f, dx_f, dq_f);
  EXPECT_NEAR(loss_f, loss_d, 1e-5 * loss_d);
  expect_close(o_f, o_d, 1e-5, "o");
  expect_close(dx_f, dx_d, 1e-5, "dx");
  expect_close(dq_f, dq_d, 1e-5, "dq");
}

}  // namespace
