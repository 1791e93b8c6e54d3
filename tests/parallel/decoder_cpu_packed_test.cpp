// decoder_cpu_packed_test: packed sequences on the CPU reference (core/packing.h, ops/cpu/attention.h's packed forms,
// the decoder's MicroBatch::docs and loss weights), in double:
//   - the packing helpers: segment offsets (a row's padding as a segment), positions, slices of rows, and the documents
//     that do not fit (longer than the row, zero tokens, counts that disagree) raising with the row and document;
//   - packed attention equals each segment's plain causal attention run alone, forward and backward, with GQA;
//   - weighted cross-entropy: the weighted sum of the per-row losses, gradients scaled per row, weight 0 rows zero;
//   - the decoder (llama: RoPE, GQA; gpt: learned positions, tied embeddings; mla: multi-head latent attention) on a
//     packed batch with a loss mask equals the decoder run on each document alone, loss and every gradient (the
//     padding, weighted 0, adds nothing);
//   - finite differences of the whole tiny model on packed data with loss weights;
//   - bad packed documents and loss weights raise, leaving nothing in flight.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/error.h"
#include "core/packing.h"
#include "model/decoder_cpu.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/cross_entropy.h"
#include "parallel/decoder_cpu_parallel.h"
#include "tiny_models.h"

namespace tb::parallel {
namespace {

namespace cpu = tb::ops::cpu;

std::vector<double> random_values(std::size_t n, std::uint64_t seed, double lo = -1, double hi = 1) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = u(g);
  return v;
}

double max_abs_diff(std::span<const double> a, std::span<const double> b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// ---- core/packing.h ----------------------------------------------------------------------------------------------

TEST(Packing, SegmentsArePaddedRowsAndPositionsRestart) {
  const std::vector<std::int32_t> lengths{3, 2, 5, 1, 1}, per_row{2, 1, 0, 2};
  const Documents docs{lengths, per_row};
  const std::vector<std::int32_t> off = segment_offsets(docs, 5);
  // row 0: 3, 2 (full); row 1: 5; row 2: padding only; row 3: 1, 1, then 3 of padding
  EXPECT_EQ(off, (std::vector<std::int32_t>{0, 3, 5, 10, 15, 16, 17, 20}));
  const std::vector<std::int32_t> pos = segment_positions(off);
  EXPECT_EQ(pos, (std::vector<std::int32_t>{0, 1, 2, 0, 1, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 0, 0, 1, 2}));
  const Documents tail = docs.slice(2, 2);
  EXPECT_EQ(std::vector<std::int32_t>(tail.lengths.begin(), tail.lengths.end()), (std::vector<std::int32_t>{1, 1}));
  EXPECT_EQ(segment_offsets(tail, 5), (std::vector<std::int32_t>{0, 5, 6, 7, 10}));
  EXPECT_FALSE(Documents{}.packed());
}

TEST(Packing, DocumentsThatDoNotFitRaise) {
  const auto raises = [](std::vector<std::int32_t> lengths, std::vector<std::int32_t> per_row, int seq,
                         const std::string& needle) {
    try {
      segment_offsets({lengths, per_row}, seq);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  raises({3, 9}, {1, 1}, 8, "document 0 of row 1 has 9 tokens");  // longer than the sequence
  raises({4, 5}, {2}, 8, "document 1 of row 0 has 5 tokens");      // the row's documents overflow it
  raises({4, 0}, {2}, 8, "document 1 of row 0 has 0 tokens");
  raises({4}, {2}, 8, "row 0 counts 2 documents");
  raises({4, 4}, {1}, 8, "2 lengths for the 1 documents");
}

// ---- packed attention ------------------------------------------------------------------------------------------

// q [1, s, H, d], k, v [1, s, G, d] views of rows [from, from + len) of a [b s, *] buffer.
TensorView<double> rows_view(std::vector<double>& buf, std::int64_t from, std::int64_t len, std::int64_t heads,
                             std::int64_t d) {
  return TensorView<double>(buf.data() + from * heads * d, {1, len, heads, d});
}

TEST(PackedAttention, EqualsEachSegmentAloneForwardAndBackward) {
  const std::int64_t b = 2, s = 9, H = 4, G = 2, d = 4;
  const std::vector<std::int32_t> lengths{4, 3, 2, 2, 6}, per_row{3, 2};  // row 0 full; row 1: 2, 6, then 1 of padding
  const std::vector<std::int32_t> off = segment_offsets({lengths, per_row}, int(s));
  std::vector<std::int64_t> pos;
  for (std::int32_t p : segment_positions(off)) pos.push_back(p);
  const std::size_t nq = std::size_t(b * s * H * d), nk = std::size_t(b * s * G * d);
  std::vector<double> q = random_values(nq, 1), k = random_values(nk, 2), v = random_values(nk, 3);
  std::vector<double> dout = random_values(nq, 4);
  std::vector<double> o(nq), lse(std::size_t(b * H * s)), dq(nq), dk(nk), dv(nk);
  const auto view = [&](std::vector<double>& x, std::int64_t heads) { return TensorView<double>(x.data(), {b, s, heads, d}); };
  cpu::attention_forward_packed<double>(view(o, H), TensorView<double>(lse.data(), {b, H, s}), view(q, H), view(k, G),
                                        view(v, G), pos);
  cpu::attention_backward_packed<double>(view(dq, H), view(dk, G), view(dv, G), view(dout, H), view(q, H), view(k, G),
                                         view(v, G), view(o, H), TensorView<double>(lse.data(), {b, H, s}), pos);
  // Each segment alone: plain causal attention on its rows.
  std::vector<double> o1(nq), dq1(nq), dk1(nk), dv1(nk), lse1(lse.size());
  for (std::size_t kseg = 0; kseg + 1 < off.size(); ++kseg) {
    const std::int64_t from = off[kseg], len = off[kseg + 1] - off[kseg], row = from / s, at = from % s;
    std::vector<double> l(std::size_t(H * len));
    const TensorView<double> lv(l.data(), {1, H, len});
    cpu::attention_forward<double>(rows_view(o1, from, len, H, d), lv, rows_view(q, from, len, H, d),
                                   rows_view(k, from, len, G, d), rows_view(v, from, len, G, d));
    cpu::attention_backward<double>(rows_view(dq1, from, len, H, d), rows_view(dk1, from, len, G, d),
                                    rows_view(dv1, from, len, G, d), rows_view(dout, from, len, H, d),
                                    rows_view(q, from, len, H, d), rows_view(k, from, len, G, d),
                                    rows_view(v, from, len, G, d), rows_view(o1, from, len, H, d), lv);
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < len; ++i) lse1[std::size_t((row * H + h) * s + at + i)] = l[std::size_t(h * len + i)];
  }
  EXPECT_LE(max_abs_diff(o, o1), 1e-13);
  EXPECT_LE(max_abs_diff(lse, lse1), 1e-13);
  EXPECT_LE(max_abs_diff(dq, dq1), 1e-13);
  EXPECT_LE(max_abs_diff(dk, dk1), 1e-13);
  EXPECT_LE(max_abs_diff(dv, dv1), 1e-13);
  // Not the plain causal attention over the whole rows (which would see across documents).
  std::vector<double> o_plain(nq), lse_plain(lse.size());
  cpu::attention_forward<double>(view(o_plain, H), TensorView<double>(lse_plain.data(), {b, H, s}), view(q, H),
                                 view(k, G), view(v, G));
  EXPECT_GT(max_abs_diff(o, o_plain), 1e-3);
}

TEST(PackedAttention, PositionsOutsideASegmentRaise) {
  std::vector<double> x(2 * 4 * 4, 0.5), o(x.size()), lse(8);
  const TensorView<double> v(x.data(), {1, 4, 2, 4});
  std::vector<std::int64_t> pos{0, 1, 3, 0};  // 3 does not continue the segment
  EXPECT_THROW(cpu::attention_forward_packed<double>(TensorView<double>(o.data(), {1, 4, 2, 4}),
                                                     TensorView<double>(lse.data(), {1, 2, 4}), v, v, v, pos),
               Error);
  pos = {0, 1, 0};  // too few
  EXPECT_THROW(cpu::attention_forward_packed<double>(TensorView<double>(o.data(), {1, 4, 2, 4}),
                                                     TensorView<double>(lse.data(), {1, 2, 4}), v, v, v, pos),
               Error);
}

// ---- weighted cross-entropy ------------------------------------------------------------------------------------

TEST(WeightedCrossEntropy, IsTheWeightedSumOfRowLosses) {
  const std::int64_t t = 5, V = 7;
  std::vector<double> logits = random_values(std::size_t(t * V), 8, -3, 3);
  const std::vector<std::int32_t> targets{1, 6, 0, 3, 3};
  const std::vector<double> w{0.25, 0.0, 0.5, 0.0, 0.25};
  std::vector<double> d(logits.size()), d1(logits.size());
  const TensorView<double> lv(logits.data(), {t, V});
  const double loss = cpu::cross_entropy<double>(TensorView<double>(d.data(), {t, V}), lv, targets, 2.0, w);
  double want = 0;
  for (std::int64_t r = 0; r < t; ++r) {
    const TensorView<double> row(logits.data() + r * V, {1, V});
    const double lr = cpu::cross_entropy<double>(TensorView<double>(d1.data() + r * V, {1, V}), row,
                                                 std::span(targets).subspan(std::size_t(r), 1), 2.0 * w[std::size_t(r)]);
    want += w[std::size_t(r)] * lr;
  }
  EXPECT_NEAR(loss, want, 1e-14);
  EXPECT_LE(max_abs_diff(d, d1), 1e-15);
  for (std::int64_t c = 0; c < V; ++c) EXPECT_EQ(d[std::size_t(V + c)], 0.0);  // weight 0: no gradient
  EXPECT_THROW(cpu::cross_entropy<double>({}, lv, targets, 1.0, std::span(w).subspan(0, 4)), Error);
}

// ---- the decoder ------------------------------------------------------------------------------------------------

// Two rows of 16: row 0 holds documents of 5 and 7 tokens and 4 of padding, row 1 documents of 3, 9 and 4.
struct PackedData {
  std::vector<std::int32_t> lengths{5, 7, 3, 9, 4}, per_row{2, 3};
  testing::Tokens t;
  std::vector<double> weights;  // the loss mask (each document's first two targets are its prompt; the padding, and
                                // each document's last target) over the counted targets
};

PackedData packed_data(const model::ModelConfig& cfg) {
  PackedData p;
  p.t = testing::random_tokens(2, cfg.seq, cfg.vocab, 21);
  p.weights.assign(p.t.tokens.size(), 0.0);
  std::size_t d = 0;
  double counted = 0;
  for (int r = 0; r < 2; ++r) {
    std::size_t at = std::size_t(r * cfg.seq);
    for (int i = 0; i < p.per_row[std::size_t(r)]; ++i, ++d) {
      const auto len = std::size_t(p.lengths[d]);
      for (std::size_t j = 2; j + 1 < len; ++j) p.weights[at + j] = 1, ++counted;
      at += len;
    }
  }
  for (double& w : p.weights) w /= counted;
  return p;
}

class Packed : public ::testing::TestWithParam<std::string> {};

TEST_P(Packed, DecoderOnAPackedBatchEqualsEachDocumentAlone) {
  const model::ModelConfig cfg = testing::tiny(GetParam(), 2);
  const PackedData p = packed_data(cfg);
  model::CpuDecoder<double> packed(cfg, 3), alone(cfg, 3);
  for (auto* m : {&packed, &alone}) {
    std::mt19937_64 g(5);
    std::uniform_real_distribution<double> u(-0.1, 0.1);
    for (double& x : m->params()) x += u(g);
  }
  packed.set_lm_head_chunk(7);
  const double grad_scale = 0.5;
  packed.zero_grads();
  const double loss = packed.forward_backward({p.t.tokens, p.t.targets, 2, cfg.seq, {p.lengths, p.per_row}, p.weights},
                                              grad_scale);
  EXPECT_NEAR(packed.forward({p.t.tokens, p.t.targets, 2, cfg.seq, {p.lengths, p.per_row}, p.weights}), loss, 1e-15);
  // Each document alone (a batch of one row of its length), with its weights; the padding is not run.
  alone.zero_grads();
  double sum = 0;
  std::size_t d = 0;
  for (int r = 0; r < 2; ++r) {
    std::size_t from = std::size_t(r * cfg.seq);
    for (int i = 0; i < p.per_row[std::size_t(r)]; ++i, ++d) {
      const auto len = std::size_t(p.lengths[d]);
      const auto sub = [&](const std::vector<std::int32_t>& v) { return std::span(v).subspan(from, len); };
      sum += alone.forward_backward(
          {sub(p.t.tokens), sub(p.t.targets), 1, int(len), {}, std::span(p.weights).subspan(from, len)}, grad_scale);
      from += len;
    }
  }
  EXPECT_EQ(d, p.lengths.size());
  EXPECT_NEAR(loss, sum, 1e-13 * std::abs(loss));
  const std::vector<double> zero(packed.grads().size(), 0.0);
  const double scale = max_abs_diff(packed.grads(), zero);
  EXPECT_GT(scale, 0);
  EXPECT_LE(max_abs_diff(packed.grads(), alone.grads()), 1e-12 * scale);
  // The mask matters: the unweighted mean of the same packed batch differs.
  EXPECT_GT(std::abs(packed.forward({p.t.tokens, p.t.targets, 2, cfg.seq, {p.lengths, p.per_row}}) - loss), 1e-3);
}

TEST_P(Packed, GradientMatchesFiniteDifferences) {
  model::ModelConfig cfg = testing::tiny(GetParam(), 2);
  const PackedData p = packed_data(cfg);
  model::CpuDecoder<double> m(cfg, 9);
  std::mt19937_64 g(13);
  std::uniform_real_distribution<double> u(-0.3, 0.3);
  for (double& x : m.params()) x += u(g);
  const MicroBatch b{p.t.tokens, p.t.targets, 2, cfg.seq, {p.lengths, p.per_row}, p.weights};
  m.zero_grads();
  m.forward_backward(b);
  const std::vector<double> grad(m.grads().begin(), m.grads().end());
  const double h = 1e-6;
  int checked = 0;
  for (const auto& s : m.layout()) {
    std::uniform_int_distribution<std::size_t> pick(0, s.size - 1);
    for (int k = 0; k < 8; ++k, ++checked) {
      const std::size_t i = s.offset + pick(g);
      double& x = m.params()[i];
      const double saved = x;
      x = saved + h;
      const double lp = m.forward(b);
      x = saved - h;
      const double lm = m.forward(b);
      x = saved;
      const double num = (lp - lm) / (2 * h);
      EXPECT_LE(std::abs(grad[i] - num), 1e-5 * std::max(std::abs(grad[i]), std::abs(num)) + 1e-9)
          << s.name << "[" << i - s.offset << "]: analytic " << grad[i] << " numeric " << num;
    }
  }
  EXPECT_GE(checked, 80);
}

INSTANTIATE_TEST_SUITE_P(Families, Packed, ::testing::Values("llama", "gpt", "mla"));

TEST(PackedDecoder, BadInputsRaise) {
  const model::ModelConfig cfg = testing::tiny("llama", 1);
  const PackedData p = packed_data(cfg);
  auto self = comm::make_self_communicator();
  ShardedCpuDecoder<double> dec(cfg, {*self, *self});
  dec.init(1);
  const std::vector<std::int32_t> too_long{17}, one{1};
  EXPECT_THROW(dec.forward(0, {p.t.tokens, p.t.targets, 2, cfg.seq, {too_long, one}}), Error);  // 1 row for 2
  const std::vector<std::int32_t> per_row{1, 0};
  EXPECT_THROW(dec.forward(0, {p.t.tokens, p.t.targets, 2, cfg.seq, {too_long, per_row}}), Error);  // 17 > 16
  std::vector<double> w = p.weights;
  w[3] = -1;
  EXPECT_THROW(dec.forward(0, {p.t.tokens, p.t.targets, 2, cfg.seq, {}, w}), Error);
  w.pop_back();
  EXPECT_THROW(dec.forward(0, {p.t.tokens, p.t.targets, 2, cfg.seq, {}, w}), Error);
  EXPECT_EQ(dec.in_flight(), 0u);
}

}  // namespace
}  // namespace tb::parallel
