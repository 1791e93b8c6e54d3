// ops/cpu/moe.cpp: the MoE routing and dispatch reference (ops/cpu/moe.h has the formulas).
#include "ops/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

namespace tb::ops::cpu {
namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

template <class T>
double row_lse(const T* z, std::int64_t e) {
  double m = z[0];
  for (std::int64_t i = 1; i < e; ++i) m = std::max(m, double(z[i]));
  double sum = 0;
  for (std::int64_t i = 0; i < e; ++i) sum += std::exp(double(z[i]) - m);
  return m + std::log(sum);
}

template <class T>
void require_rows(const TensorView<T>& v, std::int64_t n, std::int64_t e, const char* what) {
  TB_REQUIRE(
      v.rank() == 2 && v.size(0) == n && v.size(1) == e && v.stride(0) == e,
      std::string("moe: ") + what + " must be a contiguous [" + std::to_string(n) + ", " + std::to_string(e) + "]");
}

}  // namespace

template <class T>
void router_scores(Score score, TensorView<T> s, In<T> logits) {
  const std::int64_t n = logits.size(0), e = logits.size(1);
  require_rows(s, n, e, "scores");
  require_rows(logits, n, e, "logits");
  for (std::int64_t t = 0; t < n; ++t) {
    const T* z = logits.data() + t * e;
    T* out = s.data() + t * e;
    if (score == Score::sigmoid) {
      for (std::int64_t i = 0; i < e; ++i) out[i] = T(sigmoid(double(z[i])));
      continue;
    }
    const double lse = row_lse(z, e);
    for (std::int64_t i = 0; i < e; ++i) out[i] = T(std::exp(double(z[i]) - lse));
  }
}

template <class T>
void router_probs(Score score, TensorView<T> p, In<T> s) {
  const std::int64_t n = s.size(0), e = s.size(1);
  require_rows(p, n, e, "probs");
  for (std::int64_t t = 0; t < n; ++t) {
    const T* in = s.data() + t * e;
    double sum = 1.0;
    if (score == Score::sigmoid) sum = std::accumulate(in, in + e, 0.0);
    for (std::int64_t i = 0; i < e; ++i) p.data()[t * e + i] = T(double(in[i]) / sum);
  }
}

template <class T>
void route(Routes<T>& r, In<T> s, const RouteOptions& o, std::span<const std::int64_t> global_ids) {
  const std::int64_t n = s.size(0), e = s.size(1), k = o.k;
  TB_REQUIRE(k >= 1 && k <= e, "moe: top_k=" + std::to_string(k) + " must be in [1, " + std::to_string(e) + "]");
  TB_REQUIRE(!o.balanced || std::int64_t(global_ids.size()) == n,
             "moe: balanced routing needs the global index of each of the " + std::to_string(n) + " tokens");
  TB_REQUIRE(o.bias.empty() || std::int64_t(o.bias.size()) == e,
             "moe: the expert bias needs one value per expert (" + std::to_string(e) + ")");
  auto key = [&](const T* row, std::int32_t a) { return double(row[a]) + (o.bias.empty() ? 0.0 : o.bias[a]); };
  r.n = int(n), r.k = int(k), r.experts = int(e);
  r.expert.resize(std::size_t(n * k)), r.chosen.resize(std::size_t(n * k)), r.weight.resize(std::size_t(n * k));
  std::vector<std::int32_t> order(static_cast<std::size_t>(e));
  for (std::int64_t t = 0; t < n; ++t) {
    const T* row = s.data() + t * e;
    std::int32_t* ch = r.chosen.data() + t * k;
    if (o.balanced) {
      for (std::int64_t j = 0; j < k; ++j) ch[j] = std::int32_t((global_ids[std::size_t(t)] * k + j) % e);
    } else {
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](std::int32_t a, std::int32_t b) {
        const double ka = key(row, a), kb = key(row, b);
        return ka > kb || (ka == kb && a < b);
      });
      std::copy_n(order.begin(), k, ch);
    }
    double sum = 0;
    for (std::int64_t j = 0; j < k; ++j) sum += double(row[ch[j]]);
    const double denom = o.normalize ? sum : 1.0;
    for (std::int64_t j = 0; j < k; ++j) r.weight[std::size_t(t * k + j)] = T(o.scale * double(row[ch[j]]) / denom);
  }
  r.expert = r.chosen;
}

void update_expert_bias(std::span<double> b, std::span<const double> c, double rate) {
  TB_REQUIRE(b.size() == c.size() && !c.empty(), "moe: the expert bias and the counts need one value per expert");
  const double mean = std::accumulate(c.begin(), c.end(), 0.0) / double(c.size());
  for (std::size_t i = 0; i < b.size(); ++i) b[i] += rate * double((c[i] < mean) - (c[i] > mean));
}

template <class T>
std::int64_t drop_over_capacity(Routes<T>& r, std::int64_t capacity) {
  TB_REQUIRE(capacity >= 0, "moe: capacity must not be negative");
  std::vector<std::vector<std::int64_t>> per(std::size_t(r.experts));
  for (std::int64_t p = 0; p < std::int64_t(r.expert.size()); ++p)
    if (r.expert[std::size_t(p)] >= 0) per[std::size_t(r.expert[std::size_t(p)])].push_back(p);
  std::int64_t dropped = 0;
  for (auto& pairs : per) {
    if (std::int64_t(pairs.size()) <= capacity) continue;
    std::stable_sort(pairs.begin(), pairs.end(), [&](std::int64_t a, std::int64_t b) {
      return r.weight[std::size_t(a)] > r.weight[std::size_t(b)];
    });
    for (std::size_t i = std::size_t(capacity); i < pairs.size(); ++i) {
      r.expert[std::size_t(pairs[i])] = -1;
      r.weight[std::size_t(pairs[i])] = T(0);
      ++dropped;
    }
  }
  return dropped;
}

template <class T>
Dispatch make_dispatch(const Routes<T>& r) {
  Dispatch d;
  d.offsets.assign(std::size_t(r.experts + 1), 0);
  for (std::int32_t e : r.expert)
    if (e >= 0) ++d.offsets[std::size_t(e + 1)];
  for (int e = 0; e < r.experts; ++e) d.offsets[std::size_t(e + 1)] += d.offsets[std::size_t(e)];
  d.pair.resize(std::size_t(d.offsets.back()));
  std::vector<std::int64_t> next(d.offsets.begin(), d.offsets.end() - 1);
  for (std::int64_t p = 0; p < std::int64_t(r.expert.size()); ++p)
    if (const std::int32_t e = r.expert[std::size_t(p)]; e >= 0) d.pair[std::size_t(next[std::size_t(e)]++)] = p;
  return d;
}

template <class T>
std::vector<std::int64_t> tokens_per_expert(const Routes<T>& r) {
  std::vector<std::int64_t> c(std::size_t(r.experts), 0);
  for (std::int32_t e : r.chosen) ++c[std::size_t(e)];
  return c;
}

template <class T>
void permute(TensorView<T> xp, In<T> x, const Dispatch& d, int k) {
  const std::int64_t dm = x.size(1);
  require_rows(xp, d.rows(), dm, "permuted tokens");
  for (std::int64_t r = 0; r < d.rows(); ++r) {
    const T* src = x.data() + (d.pair[std::size_t(r)] / k) * x.stride(0);
    std::copy_n(src, dm, xp.data() + r * dm);
  }
}

template <class T>
void permute_backward(TensorView<T> dx, In<T> dxp, const Dispatch& d, int k) {
  const std::int64_t dm = dx.size(1);
  require_rows(dxp, d.rows(), dm, "permuted gradients");
  for (std::int64_t r = 0; r < d.rows(); ++r) {
    T* dst = dx.data() + (d.pair[std::size_t(r)] / k) * dx.stride(0);
    const T* src = dxp.data() + r * dm;
    for (std::int64_t i = 0; i < dm; ++i) dst[i] += src[i];
  }
}

template <class T>
void unpermute(TensorView<T> y, In<T> o, const Dispatch& d, const Routes<T>& r) {
  const std::int64_t dm = y.size(1);
  require_rows(o, d.rows(), dm, "expert outputs");
  for (std::int64_t row = 0; row < d.rows(); ++row) {
    const std::int64_t p = d.pair[std::size_t(row)];
    const double w = double(r.weight[std::size_t(p)]);
    T* dst = y.data() + (p / r.k) * y.stride(0);
    const T* src = o.data() + row * dm;
    for (std::int64_t i = 0; i < dm; ++i) dst[i] = T(double(dst[i]) + w * double(src[i]));
  }
}

template <class T>
void unpermute_backward(TensorView<T> dop, std::span<T> dweight, In<T> dy, In<T> o, const Dispatch& d,
                        const Routes<T>& r) {
  const std::int64_t dm = dy.size(1);
  require_rows(dop, d.rows(), dm, "expert output gradients");
  TB_REQUIRE(dweight.size() == r.weight.size(), "moe: dweight must hold n·k values");
  std::fill(dweight.begin(), dweight.end(), T(0));
  for (std::int64_t row = 0; row < d.rows(); ++row) {
    const std::int64_t p = d.pair[std::size_t(row)];
    const double w = double(r.weight[std::size_t(p)]);
    const T* g = dy.data() + (p / r.k) * dy.stride(0);
    const T* out = o.data() + row * dm;
    T* dst = dop.data() + row * dm;
    double dot = 0;
    for (std::int64_t i = 0; i < dm; ++i) dst[i] = T(w * double(g[i])), dot += double(g[i]) * double(out[i]);
    dweight[std::size_t(p)] = T(dot);
  }
}

template <class T>
void weights_backward(TensorView<T> ds, In<T> s, const Routes<T>& r, std::span<const T> dweight,
                      const RouteOptions& o) {
  const std::int64_t n = r.n, e = r.experts, k = r.k;
  require_rows(ds, n, e, "score gradients");
  std::fill(ds.data(), ds.data() + n * e, T(0));
  for (std::int64_t t = 0; t < n; ++t) {
    const T* row = s.data() + t * e;
    const std::int32_t* ch = r.chosen.data() + t * k;
    const T* dw = dweight.data() + t * k;
    T* out = ds.data() + t * e;
    if (!o.normalize) {
      for (std::int64_t j = 0; j < k; ++j) out[ch[j]] = T(double(out[ch[j]]) + o.scale * double(dw[j]));
      continue;
    }
    double sum = 0, dot = 0;
    for (std::int64_t j = 0; j < k; ++j) sum += double(row[ch[j]]);
    for (std::int64_t j = 0; j < k; ++j) dot += double(dw[j]) * double(row[ch[j]]);
    for (std::int64_t j = 0; j < k; ++j)
      out[ch[j]] = T(double(out[ch[j]]) + o.scale * (double(dw[j]) - dot / sum) / sum);
  }
}

template <class T>
void probs_backward(Score score, TensorView<T> ds, In<T> s, In<T> dp) {
  const std::int64_t n = s.size(0), e = s.size(1);
  for (std::int64_t t = 0; t < n; ++t) {
    const T* in = s.data() + t * e;
    const T* g = dp.data() + t * e;
    T* out = ds.data() + t * e;
    if (score == Score::softmax) {
      for (std::int64_t i = 0; i < e; ++i) out[i] = T(double(out[i]) + double(g[i]));
      continue;
    }
    const double sum = std::accumulate(in, in + e, 0.0);
    double dot = 0;
    for (std::int64_t i = 0; i < e; ++i) dot += double(g[i]) * double(in[i]) / sum;
    for (std::int64_t i = 0; i < e; ++i) out[i] = T(double(out[i]) + (double(g[i]) - dot) / sum);
  }
}

template <class T>
void scores_backward(Score score, TensorView<T> dlogits, In<T> s, In<T> ds) {
  const std::int64_t n = s.size(0), e = s.size(1);
  require_rows(dlogits, n, e, "logit gradients");
  for (std::int64_t t = 0; t < n; ++t) {
    const T* in = s.data() + t * e;
    const T* g = ds.data() + t * e;
    T* out = dlogits.data() + t * e;
    if (score == Score::sigmoid) {
      for (std::int64_t i = 0; i < e; ++i) out[i] = T(double(g[i]) * double(in[i]) * (1.0 - double(in[i])));
      continue;
    }
    double dot = 0;
    for (std::int64_t i = 0; i < e; ++i) dot += double(g[i]) * double(in[i]);
    for (std::int64_t i = 0; i < e; ++i) out[i] = T(double(in[i]) * (double(g[i]) - dot));
  }
}

template <class T>
double z_loss(In<T> logits) {
  const std::int64_t n = logits.size(0), e = logits.size(1);
  double sum = 0;
  for (std::int64_t t = 0; t < n; ++t) {
    const double lse = row_lse(logits.data() + t * e, e);
    sum += lse * lse;
  }
  return sum;
}

template <class T>
void z_loss_backward(TensorView<T> dlogits, In<T> logits, double coeff) {
  const std::int64_t n = logits.size(0), e = logits.size(1);
  for (std::int64_t t = 0; t < n; ++t) {
    const T* z = logits.data() + t * e;
    const double lse = row_lse(z, e);
    T* out = dlogits.data() + t * e;
    for (std::int64_t i = 0; i < e; ++i) out[i] = T(double(out[i]) + coeff * 2.0 * lse * std::exp(double(z[i]) - lse));
  }
}

#define TB_INSTANTIATE(T)                                                                                             \
  template void router_scores<T>(Score, TensorView<T>, In<T>);                                                        \
  template void router_probs<T>(Score, TensorView<T>, In<T>);                                                         \
  template void route<T>(Routes<T>&, In<T>, const RouteOptions&, std::span<const std::int64_t>);                      \
  template std::int64_t drop_over_capacity<T>(Routes<T>&, std::int64_t);                                              \
  template Dispatch make_dispatch<T>(const Routes<T>&);                                                               \
  template std::vector<std::int64_t> tokens_per_expert<T>(const Routes<T>&);                                          \
  template void permute<T>(TensorView<T>, In<T>, const Dispatch&, int);                                               \
  template void permute_backward<T>(TensorView<T>, In<T>, const Dispatch&, int);                                      \
  template void unpermute<T>(TensorView<T>, In<T>, const Dispatch&, const Routes<T>&);                                \
  template void unpermute_backward<T>(TensorView<T>, std::span<T>, In<T>, In<T>, const Dispatch&, const Routes<T>&);  \
  template void weights_backward<T>(TensorView<T>, In<T>, const Routes<T>&, std::span<const T>, const RouteOptions&); \
  template void probs_backward<T>(Score, TensorView<T>, In<T>, In<T>);                                                \
  template void scores_backward<T>(Score, TensorView<T>, In<T>, In<T>);                                               \
  template double z_loss<T>(In<T>);                                                                                   \
  template void z_loss_backward<T>(TensorView<T>, In<T>, double);
TB_INSTANTIATE(float)
TB_INSTANTIATE(double)
#undef TB_INSTANTIATE

}  // namespace tb::ops::cpu
