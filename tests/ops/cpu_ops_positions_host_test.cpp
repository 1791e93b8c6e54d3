// Tests the CPU reference ops the sharded decoder adds (parallel/decoder_cpu_parallel.h) against the existing
// ops on the full sequence, in double:
//   - attention_forward_at / attention_backward_at: queries at positions {every position} equal the plain op
//     bit for bit; queries at the positions of one context-parallel rank (chunks r and 2cp-1-r) against all keys
//     give the full op's rows at those positions, and the dK, dV of the cp ranks sum to the full op's;
//   - rope_forward_at / rope_backward_at at non-contiguous positions equal the plain rope's rows there;
//   - position_embedding_add_at / _backward_at at rows' positions equal the plain (t mod seq) form;
//   - bad positions raise tb::Error.
#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <random>
#include <vector>

#include "core/error.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/embedding.h"
#include "ops/cpu/rope.h"

namespace {

using namespace tb::ops::cpu;
using tb::TensorView;
using Vec = std::vector<double>;
using Pos = std::vector<std::int64_t>;

Vec rnd(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  Vec v(n);
  for (double& x : v) x = u(g);
  return v;
}

TensorView<double> view(Vec& v, std::initializer_list<std::int64_t> shape) {
  return TensorView<double>(v.data(), shape);
}
TensorView<const double> cview(const Vec& v, std::initializer_list<std::int64_t> shape) {
  return TensorView<const double>(v.data(), shape);
}

// Chunks r and 2cp-1-r of seq / 2cp positions (what a context-parallel rank holds).
Pos cp_chunks(int cp, int r, int seq) {
  const int c = seq / (2 * cp);
  Pos p;
  for (int chunk : {r, 2 * cp - 1 - r})
    for (int j = 0; j < c; ++j) p.push_back(chunk * c + j);
  return p;
}

// Rows `pos` of dimension 1 of a [b, s, h, d] tensor, as a [b, pos.size(), h, d] tensor.
Vec take(const Vec& x, std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d, const Pos& pos) {
  Vec out;
  for (std::int64_t bi = 0; bi < b; ++bi)
    for (std::int64_t p : pos)
      for (std::int64_t i = 0; i < h * d; ++i) out.push_back(x[std::size_t(((bi * s + p) * h) * d + i)]);
  return out;
}

// lse [b, H, s] restricted to positions pos: [b, H, pos.size()].
Vec take_lse(const Vec& lse, std::int64_t b, std::int64_t heads, std::int64_t s, const Pos& pos) {
  Vec out;
  for (std::int64_t bi = 0; bi < b; ++bi)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t p : pos) out.push_back(lse[std::size_t((bi * heads + h) * s + p)]);
  return out;
}

void expect_near(const Vec& got, const Vec& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << what << " at " << i;
}

struct AttnCase {
  std::int64_t b = 2, s = 8, H = 4, KV = 2, d = 4;
  Vec q, k, v, dout;
  AttnCase() : q(rnd(std::size_t(b * s * H * d), 1)), k(rnd(std::size_t(b * s * KV * d), 2)),
               v(rnd(std::size_t(b * s * KV * d), 3)), dout(rnd(std::size_t(b * s * H * d), 4)) {}
};

TEST(AttentionAt, AllPositionsEqualThePlainOpExactly) {
  AttnCase c;
  Pos all(std::size_t(c.s));
  for (std::int64_t i = 0; i < c.s; ++i) all[std::size_t(i)] = i;
  Vec o1(c.q.size()), o2(c.q.size()), l1(std::size_t(c.b * c.H * c.s)), l2(l1.size());
  attention_forward(view(o1, {c.b, c.s, c.H, c.d}), view(l1, {c.b, c.H, c.s}), cview(c.q, {c.b, c.s, c.H, c.d}),
                    cview(c.k, {c.b, c.s, c.KV, c.d}), cview(c.v, {c.b, c.s, c.KV, c.d}));
  attention_forward_at(view(o2, {c.b, c.s, c.H, c.d}), view(l2, {c.b, c.H, c.s}), cview(c.q, {c.b, c.s, c.H, c.d}),
                       cview(c.k, {c.b, c.s, c.KV, c.d}), cview(c.v, {c.b, c.s, c.KV, c.d}), all);
  EXPECT_EQ(o1, o2);
  EXPECT_EQ(l1, l2);
}

// Two cp ranks' queries (positions {0,1,6,7} and {2,3,4,5} of 8) against all keys: the full op's rows, and
// their dK, dV sum to the full op's.
TEST(AttentionAt, ContextParallelChunksMatchTheFullSequence) {
  AttnCase c;
  const Vec zero_q(c.q.size(), 0.0);
  Vec o(c.q.size()), lse(std::size_t(c.b * c.H * c.s)), dq(c.q.size()), dk(c.k.size()), dv(c.v.size());
  attention_forward(view(o, {c.b, c.s, c.H, c.d}), view(lse, {c.b, c.H, c.s}), cview(c.q, {c.b, c.s, c.H, c.d}),
                    cview(c.k, {c.b, c.s, c.KV, c.d}), cview(c.v, {c.b, c.s, c.KV, c.d}));
  attention_backward(view(dq, {c.b, c.s, c.H, c.d}), view(dk, {c.b, c.s, c.KV, c.d}), view(dv, {c.b, c.s, c.KV, c.d}),
                     cview(c.dout, {c.b, c.s, c.H, c.d}), cview(c.q, {c.b, c.s, c.H, c.d}),
                     cview(c.k, {c.b, c.s, c.KV, c.d}), cview(c.v, {c.b, c.s, c.KV, c.d}),
                     cview(o, {c.b, c.s, c.H, c.d}), cview(lse, {c.b, c.H, c.s}));
  const int cp = 2;
  Vec dk_sum(c.k.size(), 0.0), dv_sum(c.v.size(), 0.0);
  for (int r = 0; r < cp; ++r) {
    const Pos pos = cp_chunks(cp, r, int(c.s));
    const std::int64_t sq = std::int64_t(pos.size());
    Vec q = take(c.q, c.b, c.s, c.H, c.d, pos), dout = take(c.dout, c.b, c.s, c.H, c.d, pos);
    Vec o_r(q.size()), lse_r(std::size_t(c.b * c.H * sq)), dq_r(q.size()), dk_r(c.k.size(), 9.0), dv_r(c.v.size(), 9.0);
    attention_forward_at(view(o_r, {c.b, sq, c.H, c.d}), view(lse_r, {c.b, c.H, sq}), cview(q, {c.b, sq, c.H, c.d}),
                         cview(c.k, {c.b, c.s, c.KV, c.d}), cview(c.v, {c.b, c.s, c.KV, c.d}), pos);
    expect_near(o_r, take(o, c.b, c.s, c.H, c.d, pos), 1e-14, "o");
    expect_near(lse_r, take_lse(lse, c.b, c.H, c.s, pos), 1e-14, "lse");
    attention_backward_at(view(dq_r, {c.b, sq, c.H, c.d}), view(dk_r, {c.b, c.s, c.KV, c.d}),
                          view(dv_r, {c.b, c.s, c.KV, c.d}), cview(dout, {c.b, sq, c.H, c.d}),
                          cview(q, {c.b, sq, c.H, c.d}), cview(c.k, {c.b, c.s, c.KV, c.d}),
                          cview(c.v, {c.b, c.s, c.KV, c.d}), cview(o_r, {c.b, sq, c.H, c.d}),
                          cview(lse_r, {c.b, c.H, sq}), pos);
    expect_near(dq_r, take(dq, c.b, c.s, c.H, c.d, pos), 1e-13, "dq");
    for (std::size_t i = 0; i < dk_sum.size(); ++i) dk_sum[i] += dk_r[i], dv_sum[i] += dv_r[i];
  }
  expect_near(dk_sum, dk, 1e-13, "dk summed over cp ranks");
  expect_near(dv_sum, dv, 1e-13, "dv summed over cp ranks");
}

TEST(AttentionAt, QueryPositionsOutsideTheKeysRaise) {
  AttnCase c;
  Vec o(std::size_t(c.b * 1 * c.H * c.d)), lse(std::size_t(c.b * c.H));
  const Pos bad = {c.s};
  EXPECT_THROW(attention_forward_at(view(o, {c.b, 1, c.H, c.d}), view(lse, {c.b, c.H, 1}),
                                    cview(c.q, {c.b, 1, c.H, c.d}), cview(c.k, {c.b, c.s, c.KV, c.d}),
                                    cview(c.v, {c.b, c.s, c.KV, c.d}), bad),
               tb::Error);
  const Pos two = {0, 1};
  EXPECT_THROW(attention_forward_at(view(o, {c.b, 1, c.H, c.d}), view(lse, {c.b, c.H, 1}),
                                    cview(c.q, {c.b, 1, c.H, c.d}), cview(c.k, {c.b, c.s, c.KV, c.d}),
                                    cview(c.v, {c.b, c.s, c.KV, c.d}), two),
               tb::Error);
}

TEST(RopeAt, NonContiguousPositionsEqualThePlainRopeThere) {
  const std::int64_t b = 2, s = 12, h = 3, d = 6;
  const std::vector<double> inv = rope_inv_freq(int(d), 10000.0);
  const Vec x = rnd(std::size_t(b * s * h * d), 5);
  Vec full = x;
  rope_forward(view(full, {b, s, h, d}), inv);
  const Pos pos = cp_chunks(3, 1, int(s));  // {2, 3, 8, 9}
  Vec part = take(x, b, s, h, d, pos);
  const std::int64_t sq = std::int64_t(pos.size());
  rope_forward_at(view(part, {b, sq, h, d}), inv, pos);
  expect_near(part, take(full, b, s, h, d, pos), 1e-15, "rope_forward_at");
  rope_backward_at(view(part, {b, sq, h, d}), inv, pos);  // the inverse rotation
  expect_near(part, take(x, b, s, h, d, pos), 1e-15, "rope_backward_at");
  EXPECT_THROW(rope_forward_at(view(part, {b, sq, h, d}), inv, Pos{0, 1}), tb::Error);
}

TEST(PositionEmbeddingAt, RowPositionsEqualThePlainForm) {
  const std::int64_t seq = 5, rows = 10, d = 3;  // two sequences of 5
  const Vec table = rnd(std::size_t(7 * d), 6), y0 = rnd(std::size_t(rows * d), 7), dy = rnd(y0.size(), 8);
  Pos pos;
  for (std::int64_t t = 0; t < rows; ++t) pos.push_back(t % seq);
  Vec y1 = y0, y2 = y0, dt1(table.size(), 0.5), dt2(table.size(), 0.5);
  position_embedding_add(view(y1, {rows, d}), cview(table, {7, d}), int(seq));
  position_embedding_add_at(view(y2, {rows, d}), cview(table, {7, d}), pos);
  EXPECT_EQ(y1, y2);
  position_embedding_backward(view(dt1, {7, d}), cview(dy, {rows, d}), int(seq));
  position_embedding_backward_at(view(dt2, {7, d}), cview(dy, {rows, d}), pos);
  EXPECT_EQ(dt1, dt2);
  pos[3] = 7;
  EXPECT_THROW(position_embedding_add_at(view(y2, {rows, d}), cview(table, {7, d}), pos), tb::Error);
}

}  // namespace
