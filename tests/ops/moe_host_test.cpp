// Tests ops/cpu/moe.h (MoE routing and dispatch, CPU reference) on random inputs, n = 37 tokens, E = 8, k = 3:
//   - top-k routing against a sort of each row's scores; weights normalised to `scale` (or the raw scores); with an
//     expert bias, the choice by s + b and the weights by s; the bias update;
//   - balanced routing: every expert gets n k / E pairs, a token's k experts distinct;
//   - capacity: no expert over it, each expert's kept pairs weigh at least its dropped ones, the dropped count;
//   - dispatch, permute and unpermute against a direct sum over the kept pairs; the permute / unpermute backward
//     as adjoints (<permute(x), g> = <x, permute'(g)>) and dweight against its definition;
//   - the routing chain logits -> scores -> weights, probabilities and z-loss: its backward against central finite
//     differences in double, for softmax and sigmoid scores, normalised or not, scale 2.5;
//   - float against double.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.h"
#include "ops/cpu/moe.h"

namespace {

using namespace tb::ops::cpu;
using tb::TensorView;
using Vec = std::vector<double>;

constexpr int kN = 37, kE = 8, kK = 3;

Vec random_vec(std::size_t n, std::uint64_t seed, double lo = -2, double hi = 2) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  Vec v(n);
  for (double& x : v) x = u(g);
  return v;
}

TensorView<double> view(Vec& v, std::int64_t rows, std::int64_t cols) {
  return TensorView<double>(v.data(), {rows, cols});
}
TensorView<const double> cview(const Vec& v, std::int64_t rows, std::int64_t cols) {
  return TensorView<const double>(v.data(), {rows, cols});
}

Vec scores_of(const Vec& logits, Score sc) {
  Vec s(logits.size());
  router_scores<double>(sc, view(s, kN, kE), cview(logits, kN, kE));
  return s;
}

TEST(MoeRoute, TopKIsTheKLargestScores) {
  const Vec s = scores_of(random_vec(kN * kE, 1), Score::softmax);
  for (bool normalize : {true, false}) {
    RouteOptions o{.k = kK, .score = Score::softmax, .normalize = normalize, .scale = 2.5};
    Routes<double> r;
    route<double>(r, cview(s, kN, kE), o, {});
    for (int t = 0; t < kN; ++t) {
      std::vector<int> order(kE);
      std::iota(order.begin(), order.end(), 0);
      std::ranges::sort(order, [&](int a, int b) { return s[t * kE + a] > s[t * kE + b]; });
      double chosen_sum = 0;
      for (int j = 0; j < kK; ++j) chosen_sum += s[t * kE + order[j]];
      std::vector<int> got(r.expert.begin() + t * kK, r.expert.begin() + (t + 1) * kK);
      std::vector<int> want(order.begin(), order.begin() + kK);
      std::ranges::sort(got), std::ranges::sort(want);
      EXPECT_EQ(got, want) << "token " << t;
      double wsum = 0;
      for (int j = 0; j < kK; ++j) {
        const int e = r.expert[t * kK + j];
        const double want_w = 2.5 * s[t * kE + e] / (normalize ? chosen_sum : 1.0);
        EXPECT_NEAR(r.weight[t * kK + j], want_w, 1e-15) << "token " << t;
        wsum += r.weight[t * kK + j];
      }
      if (normalize) {
        EXPECT_NEAR(wsum, 2.5, 1e-14);
      }
    }
  }
}

// The expert bias (aux-loss-free balancing) moves the choice, not the weights: the k largest s + b, weighted by s.
TEST(MoeRoute, ExpertBiasChoosesBySumAndWeighsByScore) {
  const Vec s = scores_of(random_vec(kN * kE, 3), Score::sigmoid);
  const Vec bias = random_vec(kE, 4, -0.3, 0.3);
  RouteOptions o{.k = kK, .score = Score::sigmoid, .normalize = true, .scale = 2.5};
  o.bias = bias;
  Routes<double> r, plain;
  route<double>(r, cview(s, kN, kE), o, {});
  o.bias = {};
  route<double>(plain, cview(s, kN, kE), o, {});
  EXPECT_NE(r.expert, plain.expert) << "a bias of +-0.3 changes no choice: the test tests nothing";
  for (int t = 0; t < kN; ++t) {
    std::vector<int> order(kE);
    std::iota(order.begin(), order.end(), 0);
    std::ranges::sort(order, [&](int a, int b) { return s[t * kE + a] + bias[a] > s[t * kE + b] + bias[b]; });
    std::vector<int> got(r.expert.begin() + t * kK, r.expert.begin() + (t + 1) * kK);
    std::vector<int> want(order.begin(), order.begin() + kK);
    std::ranges::sort(got), std::ranges::sort(want);
    EXPECT_EQ(got, want) << "token " << t;
    double chosen = 0;
    for (int e : want) chosen += s[t * kE + e];
    for (int j = 0; j < kK; ++j)
      EXPECT_NEAR(r.weight[t * kK + j], 2.5 * s[t * kE + r.expert[t * kK + j]] / chosen, 1e-15) << "token " << t;
  }
}

TEST(MoeRoute, ExpertBiasUpdateStepsTowardTheMeanLoad) {
  std::vector<double> b = {0.5, 0, 0, -0.25}, c = {3, 1, 2, 2};  // mean 2
  update_expert_bias(b, c, 0.001);
  EXPECT_EQ(b, (std::vector<double>{0.5 - 0.001, 0.001, 0, -0.25}));
  EXPECT_THROW(update_expert_bias(b, std::vector<double>{1, 2}, 0.001), tb::Error);
}

TEST(MoeRoute, BalancedGivesEveryExpertTheSameCount) {
  const int n = 40;  // n k divisible by E
  Vec s = random_vec(n * kE, 2, 0, 1);
  std::vector<std::int64_t> ids(n);
  std::iota(ids.begin(), ids.end(), 100);
  Routes<double> r;
  route<double>(r, cview(s, n, kE), RouteOptions{.k = kK, .balanced = true}, ids);
  for (std::int64_t c : tokens_per_expert(r)) EXPECT_EQ(c, n * kK / kE);
  for (int t = 0; t < n; ++t) {
    std::vector<int> e(r.expert.begin() + t * kK, r.expert.begin() + (t + 1) * kK);
    std::ranges::sort(e);
    EXPECT_EQ(std::ranges::adjacent_find(e), e.end()) << "token " << t << " has an expert twice";
  }
}

TEST(MoeRoute, CapacityKeepsTheHeaviestPairs) {
  const Vec s = scores_of(random_vec(kN * kE, 3, -3, 3), Score::softmax);
  Routes<double> r;
  route<double>(r, cview(s, kN, kE), RouteOptions{.k = kK}, {});
  const std::vector<std::int64_t> before = tokens_per_expert(r);
  const Routes<double> all = r;
  const std::int64_t capacity = 10;
  std::int64_t want_dropped = 0;
  for (std::int64_t c : before) want_dropped += std::max<std::int64_t>(0, c - capacity);
  ASSERT_GT(want_dropped, 0) << "no expert over capacity: lower it";
  EXPECT_EQ(drop_over_capacity(r, capacity), want_dropped);
  EXPECT_EQ(tokens_per_expert(r), before);  // counted before dropping
  for (int e = 0; e < kE; ++e) {
    double min_kept = 1e30, max_dropped = -1;
    int kept = 0;
    for (int i = 0; i < kN * kK; ++i) {
      if (all.expert[i] != e) continue;
      if (r.expert[i] == e)
        ++kept, min_kept = std::min(min_kept, r.weight[i]);
      else
        EXPECT_EQ(r.weight[i], 0.0), max_dropped = std::max(max_dropped, all.weight[i]);
    }
    EXPECT_LE(kept, capacity) << "expert " << e;
    EXPECT_GE(min_kept, max_dropped) << "expert " << e;
  }
}

TEST(MoeDispatch, PermuteAndUnpermuteMatchTheDirectSum) {
  const int d = 5;
  const Vec s = scores_of(random_vec(kN * kE, 4), Score::softmax);
  Routes<double> r;
  route<double>(r, cview(s, kN, kE), RouteOptions{.k = kK}, {});
  drop_over_capacity(r, 12);
  const Dispatch D = make_dispatch(r);
  ASSERT_EQ(D.offsets.size(), std::size_t(kE + 1));
  ASSERT_LT(D.rows(), kN * kK);  // some pairs dropped
  const Vec x = random_vec(kN * d, 5);
  Vec xp(std::size_t(D.rows() * d));
  permute<double>(view(xp, D.rows(), d), cview(x, kN, d), D, kK);
  for (int e = 0; e < kE; ++e)
    for (std::int64_t row = D.offsets[e]; row < D.offsets[e + 1]; ++row) {
      const std::int64_t p = D.pair[std::size_t(row)];
      EXPECT_EQ(r.expert[std::size_t(p)], e);
      if (row > D.offsets[e]) {
        EXPECT_LT(D.pair[std::size_t(row - 1)], p);  // token order within an expert
      }
      for (int c = 0; c < d; ++c) EXPECT_EQ(xp[row * d + c], x[p / kK * d + c]);
    }
  // o[row] = xp[row] * (1 + expert): y[t] = sum over t's kept pairs of w (1 + e) x[t]
  Vec o(xp.size());
  for (int e = 0; e < kE; ++e)
    for (std::int64_t row = D.offsets[e]; row < D.offsets[e + 1]; ++row)
      for (int c = 0; c < d; ++c) o[row * d + c] = xp[row * d + c] * (1 + e);
  Vec y(std::size_t(kN * d), 0.0);
  unpermute<double>(view(y, kN, d), cview(o, D.rows(), d), D, r);
  for (int t = 0; t < kN; ++t) {
    double f = 0;
    for (int j = 0; j < kK; ++j)
      if (r.expert[t * kK + j] >= 0) f += r.weight[t * kK + j] * (1 + r.expert[t * kK + j]);
    for (int c = 0; c < d; ++c) EXPECT_NEAR(y[t * d + c], f * x[t * d + c], 1e-14);
  }
  // adjoints: <permute(x), g> = <x, permute'(g)>;  <unpermute(o), dy> = <o, do>;  dw = dy[t] . o[row]
  const Vec g = random_vec(xp.size(), 6), dy = random_vec(y.size(), 7);
  Vec dx(x.size(), 0.0), dop(o.size()), dw(r.weight.size());
  permute_backward<double>(view(dx, kN, d), cview(g, D.rows(), d), D, kK);
  unpermute_backward<double>(view(dop, D.rows(), d), dw, cview(dy, kN, d), cview(o, D.rows(), d), D, r);
  auto dot = [](const Vec& a, const Vec& b) { return std::inner_product(a.begin(), a.end(), b.begin(), 0.0); };
  EXPECT_NEAR(dot(xp, g), dot(x, dx), 1e-12 * std::abs(dot(xp, g)));
  EXPECT_NEAR(dot(y, dy), dot(o, dop), 1e-12 * std::abs(dot(y, dy)));
  for (std::int64_t row = 0; row < D.rows(); ++row) {
    const std::int64_t p = D.pair[std::size_t(row)];
    double want = 0;
    for (int c = 0; c < d; ++c) want += dy[p / kK * d + c] * o[row * d + c];
    EXPECT_NEAR(dw[std::size_t(p)], want, 1e-13);
  }
  for (int i = 0; i < kN * kK; ++i)
    if (r.expert[i] < 0) {
      EXPECT_EQ(dw[i], 0.0);
    }
}

// L(logits) = sum_tj c_tj w_tj + sum_ti R_ti p_ti + zc · sum_t lse_t², the routing held fixed.
struct Chain {
  Score score;
  RouteOptions o;
  Vec c, R;
  double zc = 0.3;
  std::vector<std::int32_t> fixed;  // the chosen experts at the unperturbed logits

  double loss(const Vec& logits) const {
    const Vec s = scores_of(logits, score);
    Vec p(s.size());
    router_probs<double>(score, view(p, kN, kE), cview(s, kN, kE));
    Routes<double> r;
    route<double>(r, cview(s, kN, kE), o, {});
    EXPECT_EQ(r.expert, fixed) << "the finite-difference step changed the routing";
    double L = zc * z_loss<double>(cview(logits, kN, kE));
    for (std::size_t i = 0; i < r.weight.size(); ++i) L += c[i] * r.weight[i];
    for (std::size_t i = 0; i < p.size(); ++i) L += R[i] * p[i];
    return L;
  }
  Vec grad(const Vec& logits) const {
    const Vec s = scores_of(logits, score);
    Routes<double> r;
    route<double>(r, cview(s, kN, kE), o, {});
    Vec ds(s.size()), dl(s.size());
    weights_backward<double>(view(ds, kN, kE), cview(s, kN, kE), r, c, o);
    probs_backward<double>(score, view(ds, kN, kE), cview(s, kN, kE), cview(R, kN, kE));
    scores_backward<double>(score, view(dl, kN, kE), cview(s, kN, kE), cview(ds, kN, kE));
    z_loss_backward<double>(view(dl, kN, kE), cview(logits, kN, kE), zc);
    return dl;
  }
};

TEST(MoeRouterBackward, MatchesFiniteDifferences) {
  for (Score sc : {Score::softmax, Score::sigmoid})
    for (bool normalize : {true, false}) {
      Vec logits = random_vec(kN * kE, 8);
      Chain ch{sc,
               RouteOptions{.k = kK, .score = sc, .normalize = normalize, .scale = 2.5},
               random_vec(kN * kK, 9),
               random_vec(kN * kE, 10),
               0.3,
               {}};
      Routes<double> r;
      route<double>(r, cview(scores_of(logits, sc), kN, kE), ch.o, {});
      ch.fixed = r.expert;
      const Vec g = ch.grad(logits);
      const double h = 1e-6;
      double err = 0, scale = 0;
      for (std::size_t i = 0; i < logits.size(); ++i) {
        const double x0 = logits[i];
        logits[i] = x0 + h;
        const double up = ch.loss(logits);
        logits[i] = x0 - h;
        const double down = ch.loss(logits);
        logits[i] = x0;
        err = std::max(err, std::abs((up - down) / (2 * h) - g[i]));
        scale = std::max(scale, std::abs(g[i]));
      }
      EXPECT_LT(err, 1e-7 * scale) << (sc == Score::softmax ? "softmax" : "sigmoid") << " normalize " << normalize;
    }
}

TEST(MoeRoute, FloatMatchesDouble) {
  const Vec logits = random_vec(kN * kE, 11);
  std::vector<float> lf(logits.begin(), logits.end()), sf(lf.size());
  router_scores<float>(Score::sigmoid, TensorView<float>(sf.data(), {kN, kE}),
                       TensorView<const float>(lf.data(), {kN, kE}));
  const Vec s = scores_of(logits, Score::sigmoid);
  Routes<float> rf;
  Routes<double> rd;
  const RouteOptions o{.k = kK, .score = Score::sigmoid};
  route<float>(rf, TensorView<const float>(sf.data(), {kN, kE}), o, {});
  route<double>(rd, cview(s, kN, kE), o, {});
  EXPECT_EQ(rf.expert, rd.expert);
  for (std::size_t i = 0; i < rd.weight.size(); ++i) EXPECT_NEAR(rf.weight[i], rd.weight[i], 1e-6);
}

}  // namespace
