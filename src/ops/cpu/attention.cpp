// ops/cpu/attention.cpp: causal GQA attention forward (saves logsumexp) and backward (recomputes P).
// Formulas in attention.h; dot products and softmax in double.
#include "ops/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace tb::ops::cpu {
namespace {

struct Dims {
  std::int64_t b, s, heads, kv_heads, d, group;
};

template <class T>
Dims check(const TensorView<T>& q, const TensorView<T>& k, const TensorView<T>& v, const char* what) {
  const std::string w(what);
  TB_REQUIRE(q.rank() == 4, w + ": q must be [batch, seq, heads, head_dim], got " + q.shape_str());
  Dims d{q.size(0), q.size(1), q.size(2), k.rank() == 4 ? k.size(2) : 0, q.size(3), 0};
  TB_REQUIRE(d.kv_heads >= 1 && d.heads % d.kv_heads == 0,
             w + ": kv heads (k " + k.shape_str() + ") must divide the query heads (q " + q.shape_str() + ")");
  d.group = d.heads / d.kv_heads;
  require_shape(k, {d.b, d.s, d.kv_heads, d.d}, w + ": k");
  require_shape(v, {d.b, d.s, d.kv_heads, d.d}, w + ": v");
  return d;
}

// s_row[j] = S[i,j] = q_i . k_j / sqrt(d) for j <= i, for one (batch, head h, query i).
template <class T>
void scores(std::vector<double>& s_row, const TensorView<const T>& q, const TensorView<const T>& k, std::int64_t b,
            std::int64_t h, std::int64_t kvh, std::int64_t i, std::int64_t d, double scale) {
  for (std::int64_t j = 0; j <= i; ++j) {
    double dot = 0;
    for (std::int64_t c = 0; c < d; ++c) dot += double(q(b, i, h, c)) * double(k(b, j, kvh, c));
    s_row[std::size_t(j)] = dot * scale;
  }
}

}  // namespace

template <class T>
void attention_forward(TensorView<T> o, TensorView<T> lse, In<T> q, In<T> k, In<T> v) {
  const Dims n = check(q, k, v, "attention_forward");
  require_shape(o, {n.b, n.s, n.heads, n.d}, "attention_forward: o");
  require_shape(lse, {n.b, n.heads, n.s}, "attention_forward: lse");
  const double scale = 1.0 / std::sqrt(double(n.d));
  std::vector<double> s_row(std::size_t(n.s)), acc(std::size_t(n.d));
  for (std::int64_t b = 0; b < n.b; ++b)
    for (std::int64_t h = 0; h < n.heads; ++h) {
      const std::int64_t kvh = h / n.group;
      for (std::int64_t i = 0; i < n.s; ++i) {
        scores(s_row, q, k, b, h, kvh, i, n.d, scale);
        double mx = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j <= i; ++j) mx = std::max(mx, s_row[std::size_t(j)]);
        double sum = 0;
        for (std::int64_t j = 0; j <= i; ++j) sum += std::exp(s_row[std::size_t(j)] - mx);
        const double l = mx + std::log(sum);
        lse(b, h, i) = T(l);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (std::int64_t j = 0; j <= i; ++j) {
          const double p = std::exp(s_row[std::size_t(j)] - l);
          for (std::int64_t c = 0; c < n.d; ++c) acc[std::size_t(c)] += p * double(v(b, j, kvh, c));
        }
        for (std::int64_t c = 0; c < n.d; ++c) o(b, i, h, c) = T(acc[std::size_t(c)]);
      }
    }
}

template <class T>
void attention_backward(TensorView<T> dq, TensorView<T> dk, TensorView<T> dv, In<T> dout, In<T> q, In<T> k,
                        In<T> v, In<T> o, In<T> lse) {
  const Dims n = check(q, k, v, "attention_backward");
  require_shape(dout, {n.b, n.s, n.heads, n.d}, "attention_backward: dout");
  require_shape(o, {n.b, n.s, n.heads, n.d}, "attention_backward: o");
  require_shape(lse, {n.b, n.heads, n.s}, "attention_backward: lse");
  require_shape(dq, {n.b, n.s, n.heads, n.d}, "attention_backward: dq");
  require_shape(dk, {n.b, n.s, n.kv_heads, n.d}, "attention_backward: dk");
  require_shape(dv, {n.b, n.s, n.kv_heads, n.d}, "attention_backward: dv");
  const double scale = 1.0 / std::sqrt(double(n.d));
  // dk and dv sum over the query heads of a group: accumulate in double, then write.
  std::vector<double> dk_acc(std::size_t(n.s * n.kv_heads * n.d)), dv_acc(dk_acc.size());
  auto kv_at = [&](std::int64_t j, std::int64_t kvh, std::int64_t c) {
    return std::size_t((j * n.kv_heads + kvh) * n.d + c);
  };
  std::vector<double> s_row(std::size_t(n.s)), dq_acc(std::size_t(n.d));
  for (std::int64_t b = 0; b < n.b; ++b) {
    std::fill(dk_acc.begin(), dk_acc.end(), 0.0);
    std::fill(dv_acc.begin(), dv_acc.end(), 0.0);
    for (std::int64_t h = 0; h < n.heads; ++h) {
      const std::int64_t kvh = h / n.group;
      for (std::int64_t i = 0; i < n.s; ++i) {
        scores(s_row, q, k, b, h, kvh, i, n.d, scale);
        double big_d = 0;  // D_i = do_i . o_i
        for (std::int64_t c = 0; c < n.d; ++c) big_d += double(dout(b, i, h, c)) * double(o(b, i, h, c));
        std::fill(dq_acc.begin(), dq_acc.end(), 0.0);
        for (std::int64_t j = 0; j <= i; ++j) {
          const double p = std::exp(s_row[std::size_t(j)] - double(lse(b, h, i)));
          double dp = 0;
          for (std::int64_t c = 0; c < n.d; ++c) {
            dp += double(dout(b, i, h, c)) * double(v(b, j, kvh, c));
            dv_acc[kv_at(j, kvh, c)] += p * double(dout(b, i, h, c));
          }
          const double ds = p * (dp - big_d) * scale;
          for (std::int64_t c = 0; c < n.d; ++c) {
            dq_acc[std::size_t(c)] += ds * double(k(b, j, kvh, c));
            dk_acc[kv_at(j, kvh, c)] += ds * double(q(b, i, h, c));
          }
        }
        for (std::int64_t c = 0; c < n.d; ++c) dq(b, i, h, c) = T(dq_acc[std::size_t(c)]);
      }
    }
    for (std::int64_t j = 0; j < n.s; ++j)
      for (std::int64_t kvh = 0; kvh < n.kv_heads; ++kvh)
        for (std::int64_t c = 0; c < n.d; ++c) {
          dk(b, j, kvh, c) = T(dk_acc[kv_at(j, kvh, c)]);
          dv(b, j, kvh, c) = T(dv_acc[kv_at(j, kvh, c)]);
        }
  }
}

template void attention_forward<float>(TensorView<float>, TensorView<float>, In<float>, In<float>, In<float>);
template void attention_forward<double>(TensorView<double>, TensorView<double>, In<double>, In<double>, In<double>);
template void attention_backward<float>(TensorView<float>, TensorView<float>, TensorView<float>, In<float>,
                                        In<float>, In<float>, In<float>, In<float>, In<float>);
template void attention_backward<double>(TensorView<double>, TensorView<double>, TensorView<double>, In<double>,
                                         In<double>, In<double>, In<double>, In<double>, In<double>);

}  // namespace tb::ops::cpu
