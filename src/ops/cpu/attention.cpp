// ops/cpu/attention.cpp: causal GQA attention forward (saves logsumexp) and backward (recomputes P), for queries
// at any absolute positions against a key sequence (the plain forms: query i at position i of the same sequence), or
// within the segments of packed rows; one implementation over the keys each query sees.
// Formulas in attention.h; dot products and softmax in double.
#include "ops/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

namespace tb::ops::cpu {
namespace {

struct Dims {
  std::int64_t b, sq, sk, heads, kv_heads, d, dv, group;
};

// Shapes of q [b, sq, H, d], k [b, sk, KV, d] and v [b, sk, KV, dv]; q_pos: sq positions in [0, sk).
template <class T>
Dims check(const TensorView<T>& q, const TensorView<T>& k, const TensorView<T>& v,
           std::span<const std::int64_t> q_pos, const char* what) {
  const std::string w(what);
  TB_REQUIRE(q.rank() == 4, w + ": q must be [batch, seq, heads, head_dim], got " + q.shape_str());
  TB_REQUIRE(k.rank() == 4, w + ": k must be [batch, seq, kv_heads, head_dim], got " + k.shape_str());
  TB_REQUIRE(v.rank() == 4, w + ": v must be [batch, seq, kv_heads, v_head_dim], got " + v.shape_str());
  Dims d{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3), v.size(3), 0};
  TB_REQUIRE(d.kv_heads >= 1 && d.heads % d.kv_heads == 0,
             w + ": kv heads (k " + k.shape_str() + ") must divide the query heads (q " + q.shape_str() + ")");
  d.group = d.heads / d.kv_heads;
  require_shape(k, {d.b, d.sk, d.kv_heads, d.d}, w + ": k");
  require_shape(v, {d.b, d.sk, d.kv_heads, d.dv}, w + ": v");
  TB_REQUIRE(std::int64_t(q_pos.size()) == d.sq, w + ": " + std::to_string(q_pos.size()) +
                                                     " query positions for q " + q.shape_str());
  for (std::size_t i = 0; i < q_pos.size(); ++i)
    TB_REQUIRE(q_pos[i] >= 0 && q_pos[i] < d.sk, w + ": query " + std::to_string(i) + " at position " +
                                                     std::to_string(q_pos[i]) + " is outside the " +
                                                     std::to_string(d.sk) + " keys");
  return d;
}

// Positions 0, 1, ..., n-1 (the plain forms' queries).
std::vector<std::int64_t> iota(std::int64_t n) {
  std::vector<std::int64_t> p(static_cast<std::size_t>(n));
  std::iota(p.begin(), p.end(), std::int64_t(0));
  return p;
}

// The keys query i of row b sees: [first, last].
struct Visible {
  std::int64_t first, last;
};

// s_row[j] = S[i,j] = q_i . k_j / sqrt(d) for the visible j, for one (batch, head h, query i).
template <class T>
void scores(std::vector<double>& s_row, const TensorView<const T>& q, const TensorView<const T>& k, std::int64_t b,
            std::int64_t h, std::int64_t kvh, std::int64_t i, Visible vis, std::int64_t d, double scale) {
  for (std::int64_t j = vis.first; j <= vis.last; ++j) {
    double dot = 0;
    for (std::int64_t c = 0; c < d; ++c) dot += double(q(b, i, h, c)) * double(k(b, j, kvh, c));
    s_row[std::size_t(j)] = dot * scale;
  }
}

// The forward with the keys each query sees given by visible(b, i).
template <class T, class Range>
void forward_impl(TensorView<T> o, TensorView<T> lse, In<T> q, In<T> k, In<T> v, const Dims& n, Range visible) {
  require_shape(o, {n.b, n.sq, n.heads, n.dv}, "attention_forward: o");
  require_shape(lse, {n.b, n.heads, n.sq}, "attention_forward: lse");
  const double scale = 1.0 / std::sqrt(double(n.d));
  std::vector<double> s_row(std::size_t(n.sk)), acc(std::size_t(n.dv));
  for (std::int64_t b = 0; b < n.b; ++b)
    for (std::int64_t h = 0; h < n.heads; ++h) {
      const std::int64_t kvh = h / n.group;
      for (std::int64_t i = 0; i < n.sq; ++i) {
        const Visible vis = visible(b, i);
        scores(s_row, q, k, b, h, kvh, i, vis, n.d, scale);
        double mx = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = vis.first; j <= vis.last; ++j) mx = std::max(mx, s_row[std::size_t(j)]);
        double sum = 0;
        for (std::int64_t j = vis.first; j <= vis.last; ++j) sum += std::exp(s_row[std::size_t(j)] - mx);
        const double l = mx + std::log(sum);
        lse(b, h, i) = T(l);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (std::int64_t j = vis.first; j <= vis.last; ++j) {
          const double p = std::exp(s_row[std::size_t(j)] - l);
          for (std::int64_t c = 0; c < n.dv; ++c) acc[std::size_t(c)] += p * double(v(b, j, kvh, c));
        }
        for (std::int64_t c = 0; c < n.dv; ++c) o(b, i, h, c) = T(acc[std::size_t(c)]);
      }
    }
}

template <class T, class Range>
void backward_impl(TensorView<T> dq, TensorView<T> dk, TensorView<T> dv, In<T> dout, In<T> q, In<T> k, In<T> v,
                   In<T> o, In<T> lse, const Dims& n, Range visible) {
  require_shape(dout, {n.b, n.sq, n.heads, n.dv}, "attention_backward: dout");
  require_shape(o, {n.b, n.sq, n.heads, n.dv}, "attention_backward: o");
  require_shape(lse, {n.b, n.heads, n.sq}, "attention_backward: lse");
  require_shape(dq, {n.b, n.sq, n.heads, n.d}, "attention_backward: dq");
  require_shape(dk, {n.b, n.sk, n.kv_heads, n.d}, "attention_backward: dk");
  require_shape(dv, {n.b, n.sk, n.kv_heads, n.dv}, "attention_backward: dv");
  const double scale = 1.0 / std::sqrt(double(n.d));
  // dk and dv sum over the query heads of a group: accumulate in double, then write.
  std::vector<double> dk_acc(std::size_t(n.sk * n.kv_heads * n.d)), dv_acc(std::size_t(n.sk * n.kv_heads * n.dv));
  auto kv_at = [&](std::int64_t j, std::int64_t kvh, std::int64_t c, std::int64_t width) {
    return std::size_t((j * n.kv_heads + kvh) * width + c);
  };
  std::vector<double> s_row(std::size_t(n.sk)), dq_acc(std::size_t(n.d));
  for (std::int64_t b = 0; b < n.b; ++b) {
    std::fill(dk_acc.begin(), dk_acc.end(), 0.0);
    std::fill(dv_acc.begin(), dv_acc.end(), 0.0);
    for (std::int64_t h = 0; h < n.heads; ++h) {
      const std::int64_t kvh = h / n.group;
      for (std::int64_t i = 0; i < n.sq; ++i) {
        const Visible vis = visible(b, i);
        scores(s_row, q, k, b, h, kvh, i, vis, n.d, scale);
        double big_d = 0;  // D_i = do_i . o_i
        for (std::int64_t c = 0; c < n.dv; ++c) big_d += double(dout(b, i, h, c)) * double(o(b, i, h, c));
        std::fill(dq_acc.begin(), dq_acc.end(), 0.0);
        for (std::int64_t j = vis.first; j <= vis.last; ++j) {
          const double p = std::exp(s_row[std::size_t(j)] - double(lse(b, h, i)));
          double dp = 0;
          for (std::int64_t c = 0; c < n.dv; ++c) {
            dp += double(dout(b, i, h, c)) * double(v(b, j, kvh, c));
            dv_acc[kv_at(j, kvh, c, n.dv)] += p * double(dout(b, i, h, c));
          }
          const double ds = p * (dp - big_d) * scale;
          for (std::int64_t c = 0; c < n.d; ++c) {
            dq_acc[std::size_t(c)] += ds * double(k(b, j, kvh, c));
            dk_acc[kv_at(j, kvh, c, n.d)] += ds * double(q(b, i, h, c));
          }
        }
        for (std::int64_t c = 0; c < n.d; ++c) dq(b, i, h, c) = T(dq_acc[std::size_t(c)]);
      }
    }
    for (std::int64_t j = 0; j < n.sk; ++j)
      for (std::int64_t kvh = 0; kvh < n.kv_heads; ++kvh) {
        for (std::int64_t c = 0; c < n.d; ++c) dk(b, j, kvh, c) = T(dk_acc[kv_at(j, kvh, c, n.d)]);
        for (std::int64_t c = 0; c < n.dv; ++c) dv(b, j, kvh, c) = T(dv_acc[kv_at(j, kvh, c, n.dv)]);
      }
  }
}

// Causal by absolute position: query i at q_pos[i] sees keys [0, q_pos[i]].
struct AtPositions {
  std::span<const std::int64_t> q_pos;
  Visible operator()(std::int64_t, std::int64_t i) const { return {0, q_pos[std::size_t(i)]}; }
};

// Packed rows: query i of row b sees its segment's keys up to itself, [i - position, i].
struct InSegment {
  std::span<const std::int64_t> positions;
  std::int64_t seq;
  Visible operator()(std::int64_t b, std::int64_t i) const { return {i - positions[std::size_t(b * seq + i)], i}; }
};

// The dims of a packed call (q, k, v of the same rows) and its positions checked: [b·s], each in [0, i].
template <class T>
Dims check_packed(const TensorView<T>& q, const TensorView<T>& k, const TensorView<T>& v,
                  std::span<const std::int64_t> positions, const char* what) {
  const std::string w(what);
  TB_REQUIRE(q.rank() == 4 && k.rank() == 4 && q.size(1) == k.size(1),
             w + ": q " + q.shape_str() + " and k " + k.shape_str() + " must have the same seq (packed rows)");
  const Dims n = check(q, k, v, iota(q.size(1)), what);
  TB_REQUIRE(std::int64_t(positions.size()) == n.b * n.sq,
             w + ": " + std::to_string(positions.size()) + " token positions for q " + q.shape_str());
  for (std::int64_t t = 0; t < n.b * n.sq; ++t) {
    const std::int64_t p = positions[std::size_t(t)], i = t % n.sq;
    TB_REQUIRE(p >= 0 && p <= i && (i == 0 || p == 0 || positions[std::size_t(t - 1)] == p - 1),
               w + ": token " + std::to_string(i) + " of row " + std::to_string(t / n.sq) + " at position " +
                   std::to_string(p) + " does not continue a segment of its row (core/packing.h)");
  }
  return n;
}

}  // namespace

template <class T>
void attention_forward_at(TensorView<T> o, TensorView<T> lse, In<T> q, In<T> k, In<T> v,
                          std::span<const std::int64_t> q_pos) {
  forward_impl<T>(o, lse, q, k, v, check(q, k, v, q_pos, "attention_forward"), AtPositions{q_pos});
}

template <class T>
void attention_backward_at(TensorView<T> dq, TensorView<T> dk, TensorView<T> dv, In<T> dout, In<T> q, In<T> k,
                           In<T> v, In<T> o, In<T> lse, std::span<const std::int64_t> q_pos) {
  backward_impl<T>(dq, dk, dv, dout, q, k, v, o, lse, check(q, k, v, q_pos, "attention_backward"), AtPositions{q_pos});
}

template <class T>
void attention_forward_packed(TensorView<T> o, TensorView<T> lse, In<T> q, In<T> k, In<T> v,
                              std::span<const std::int64_t> positions) {
  const Dims n = check_packed(q, k, v, positions, "attention_forward (packed)");
  forward_impl<T>(o, lse, q, k, v, n, InSegment{positions, n.sq});
}

template <class T>
void attention_backward_packed(TensorView<T> dq, TensorView<T> dk, TensorView<T> dv, In<T> dout, In<T> q, In<T> k,
                               In<T> v, In<T> o, In<T> lse, std::span<const std::int64_t> positions) {
  const Dims n = check_packed(q, k, v, positions, "attention_backward (packed)");
  backward_impl<T>(dq, dk, dv, dout, q, k, v, o, lse, n, InSegment{positions, n.sq});
}

template <class T>
void attention_forward(TensorView<T> o, TensorView<T> lse, In<T> q, In<T> k, In<T> v) {
  TB_REQUIRE(q.rank() == 4 && k.rank() == 4 && q.size(1) == k.size(1),
             "attention_forward: q " + q.shape_str() + " and k " + k.shape_str() + " must have the same seq");
  attention_forward_at<T>(o, lse, q, k, v, iota(q.size(1)));
}

template <class T>
void attention_backward(TensorView<T> dq, TensorView<T> dk, TensorView<T> dv, In<T> dout, In<T> q, In<T> k,
                        In<T> v, In<T> o, In<T> lse) {
  TB_REQUIRE(q.rank() == 4 && k.rank() == 4 && q.size(1) == k.size(1),
             "attention_backward: q " + q.shape_str() + " and k " + k.shape_str() + " must have the same seq");
  attention_backward_at<T>(dq, dk, dv, dout, q, k, v, o, lse, iota(q.size(1)));
}

#define TB_INSTANTIATE(T)                                                                                      \
  template void attention_forward<T>(TensorView<T>, TensorView<T>, In<T>, In<T>, In<T>);                      \
  template void attention_backward<T>(TensorView<T>, TensorView<T>, TensorView<T>, In<T>, In<T>, In<T>, In<T>, \
                                      In<T>, In<T>);                                                           \
  template void attention_forward_at<T>(TensorView<T>, TensorView<T>, In<T>, In<T>, In<T>,                    \
                                        std::span<const std::int64_t>);                                        \
  template void attention_backward_at<T>(TensorView<T>, TensorView<T>, TensorView<T>, In<T>, In<T>, In<T>,    \
                                         In<T>, In<T>, In<T>, std::span<const std::int64_t>);              \
  template void attention_forward_packed<T>(TensorView<T>, TensorView<T>, In<T>, In<T>, In<T>,                \
                                            std::span<const std::int64_t>);                                    \
  template void attention_backward_packed<T>(TensorView<T>, TensorView<T>, TensorView<T>, In<T>, In<T>, In<T>, \
                                             In<T>, In<T>, In<T>, std::span<const std::int64_t>);
TB_INSTANTIATE(float)
TB_INSTANTIATE(double)
#undef TB_INSTANTIATE

}  // namespace tb::ops::cpu
