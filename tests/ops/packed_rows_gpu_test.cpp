// packed_rows_gpu_test: packed rows (core/packing.h) on one GPU against the CPU references in double, on the same
// bf16 inputs:
//   - the segment tables (ops/cuda/segments.h) from padded offsets: lengths, and the qkv, o and lse offsets;
//   - RoPE at per-token positions (ops/cuda/rope.h) against ops/cpu/rope.h's _at forms row by row, forward and back;
//   - cuDNN's ragged (THD) attention with its padding-causal mask (ops/cuda/attention.h, segments > 0) against
//     ops/cpu/attention.h's packed forms, forward (o, lse token-major) and backward (dq, dk, dv into the fused dqkv),
//     GQA, MHA and MQA, unused capacity (empty segments) included, the deterministic backward too; tolerances of the
//     unpacked attention test (relative L2 1e-2, max abs 3e-2 of the largest, lse 1e-3); outputs pre-filled with NaN.
//     The check can fail: the plain causal attention over whole rows must fail it. A cuDNN older than 9.6 must be
//     refused naming its version (run only there). And against each document's own attention, unpacked: every
//     segment at the start of a row of its own, the plain causal cuDNN attention over those rows, forward and
//     backward (both bf16 on the GPU, the same tolerances);
//   - the LM head's loss weights (ops/cuda/cross_entropy.h) against ops/cpu/cross_entropy.h with the same weights: a
//     zero weight's row (with an invalid target) adds nothing and gets a zero gradient.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench/sysinfo.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/packing.h"
#include "core/tensor.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/cross_entropy.h"
#include "ops/cpu/rope.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/context.h"
#include "ops/cuda/cross_entropy.h"
#include "ops/cuda/cudnn.h"
#include "ops/cuda/fill.h"
#include "ops/cuda/rope.h"
#include "ops/cuda/segments.h"
#include "../support/attention_check.h"

namespace {

using tb::DType;
using tb::TensorView;
using namespace tb::ops;
using namespace tb::testing_support;

#define SKIP_WITHOUT_GPU() \
  if (tb::bench::visible_gpu_count() == 0) GTEST_SKIP() << tb::bench::no_gpu_reason()

constexpr double kRelL2 = 1e-2, kMaxAbsFrac = 3e-2, kLse = 1e-3;

template <class T>
std::vector<T> download(const void* dev, std::size_t n, cudaStream_t st) {
  std::vector<T> h(n);
  TB_CHECK(cudaMemcpyAsync(h.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost, st));
  TB_CHECK(cudaStreamSynchronize(st));
  return h;
}

std::vector<double> download_bf16(const void* dev, std::size_t n, cudaStream_t st) {
  const std::vector<std::uint16_t> bits = download<std::uint16_t>(dev, n, st);
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = tb::bf16_to_float(bits[i]);
  return out;
}

template <class T>
DeviceBuffer upload(const DeviceContext& dc, const std::vector<T>& h) {
  DeviceBuffer d(dc.device(), std::max<std::size_t>(h.size(), 1) * sizeof(T));
  TB_CHECK(cudaMemcpyAsync(d.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice, dc.stream()));
  TB_CHECK(cudaStreamSynchronize(dc.stream()));
  return d;
}

std::string show(const Err& e) {
  return "rel_l2 " + std::to_string(e.rel_l2) + ", max_abs " + std::to_string(e.max_abs) + " (max |ref| " +
         std::to_string(e.max_ref) + "), non-finite " + std::to_string(e.nonfinite);
}
bool close(const Err& e) { return e.nonfinite == 0 && e.rel_l2 < kRelL2 && e.max_abs <= kMaxAbsFrac * e.max_ref; }

// Rows of `seq` tokens with these documents; the offsets padded with `spare` empty segments.
struct Rows {
  std::vector<std::int32_t> lengths, per_row, offsets, padded, positions;
  int batch, seq;
  std::int64_t capacity;
  Rows(std::vector<std::int32_t> l, std::vector<std::int32_t> r, int s, int spare)
      : lengths(std::move(l)), per_row(std::move(r)), batch(int(per_row.size())), seq(s) {
    offsets = tb::segment_offsets({lengths, per_row}, seq);
    positions = tb::segment_positions(offsets);
    capacity = std::int64_t(offsets.size()) - 1 + spare;
    padded = offsets;
    padded.resize(std::size_t(capacity + 1), offsets.back());
  }
  std::vector<std::int64_t> positions64() const { return {positions.begin(), positions.end()}; }
};

TEST(PackedRowsGpu, SegmentTablesFromPaddedOffsets) {
  SKIP_WITHOUT_GPU();
  DeviceContext dc(0);
  const Rows r({5, 3, 7, 2}, {2, 2}, 10, 3);  // row 0: 5, 3 + 2 padding; row 1: 7, 2 + 1 padding; 3 empty
  const DeviceBuffer cu = upload(dc, r.padded);
  DeviceBuffer buf(dc.device(), segment_table_bytes(r.capacity));
  fill_segment_tables(buf.get(), cu.as<std::int32_t>(), r.capacity, 48, 32, 4, dc.stream());
  const PackedSegments t = segment_tables(buf.get(), r.capacity);
  const auto len = download<std::int32_t>(t.seq_len, std::size_t(r.capacity), dc.stream());
  const auto qkv = download<std::int64_t>(t.qkv_offset, std::size_t(r.capacity + 1), dc.stream());
  const auto o = download<std::int64_t>(t.o_offset, std::size_t(r.capacity + 1), dc.stream());
  const auto st = download<std::int64_t>(t.stats_offset, std::size_t(r.capacity + 1), dc.stream());
  EXPECT_EQ(len, (std::vector<std::int32_t>{5, 3, 2, 7, 2, 1, 0, 0, 0}));
  for (std::size_t k = 0; k <= std::size_t(r.capacity); ++k) {
    EXPECT_EQ(qkv[k], std::int64_t(r.padded[k]) * 48);
    EXPECT_EQ(o[k], std::int64_t(r.padded[k]) * 32);
    EXPECT_EQ(st[k], std::int64_t(r.padded[k]) * 4);
  }
}

TEST(PackedRowsGpu, RopeAtEachTokensPosition) {
  SKIP_WITHOUT_GPU();
  DeviceContext dc(0);
  const Rows r({40, 30, 50, 40}, {2, 2}, 96, 0);  // row 1: 90 tokens and 6 of padding
  const std::int64_t b = 2, s = 96, heads = 3, d = 64, n = b * s * heads * d;
  const std::vector<double> inv = tb::ops::cpu::rope_inv_freq(int(d), 500000.0);
  DeviceBuffer x(dc.device(), std::size_t(n) * 2), f(dc.device(), inv.size() * 4);
  fill_uniform(x.get(), DType::bf16, std::size_t(n), 7, -1.f, 1.f, dc.stream());
  upload_rope_inv_freq(TensorView<float>(f.as<float>(), {std::int64_t(inv.size())}), inv, dc.stream());
  const DeviceBuffer pos = upload(dc, r.positions);
  std::vector<double> want = download_bf16(x.get(), std::size_t(n), dc.stream());
  const std::vector<std::int64_t> p64 = r.positions64();
  for (std::int64_t row = 0; row < b; ++row)
    tb::ops::cpu::rope_forward_at<double>(TensorView<double>(want.data() + row * s * heads * d, {1, s, heads, d}), inv,
                                          std::span(p64).subspan(std::size_t(row * s), std::size_t(s)));
  const TensorView<__nv_bfloat16> view(x.as<__nv_bfloat16>(), {b, s, heads, d});
  rope_forward(view, TensorView<const float>(f.as<float>(), {d / 2}), dc.stream(), 0, pos.as<std::int32_t>());
  const std::vector<double> got = download_bf16(x.get(), std::size_t(n), dc.stream());
  double err = 0;
  for (std::int64_t i = 0; i < n; ++i) err = std::max(err, std::abs(got[std::size_t(i)] - want[std::size_t(i)]));
  EXPECT_LT(err, 2e-2);  // bf16 rounding of values below 1.5, angles in fp32
  // Not the row positions: tokens after the first document rotate by other angles.
  rope_backward(view, TensorView<const float>(f.as<float>(), {d / 2}), dc.stream(), 0, pos.as<std::int32_t>());
  rope_forward(view, TensorView<const float>(f.as<float>(), {d / 2}), dc.stream());
  const std::vector<double> rows = download_bf16(x.get(), std::size_t(n), dc.stream());
  double diff = 0;
  for (std::int64_t i = 0; i < n; ++i) diff = std::max(diff, std::abs(rows[std::size_t(i)] - want[std::size_t(i)]));
  EXPECT_GT(diff, 0.1);
}

// ---- ragged attention ----------------------------------------------------------------------------------------------

struct PackedCase {
  std::int64_t heads, kv_heads, d;
  bool deterministic;
  const char* name;
};

class PackedAttentionGpu : public testing::TestWithParam<PackedCase> {};

// Row 0: documents of 100, 60 and 96 tokens (full); row 1: 30 and 150, then 76 of padding; 4 unused segments.
Rows test_rows() { return Rows({100, 60, 96, 30, 150}, {3, 2}, 256, 4); }

// The packed attention of case c over rows r on random qkv and dout (the outputs pre-filled with NaN), forward then
// backward, synchronized.
struct PackedRun {
  AttentionShape s;
  std::size_t n_qkv, n_o, n_lse;
  DeviceBuffer qkv, dqkv, o, dout, lse;
  PackedRun(DeviceContext& dc, CudnnAttention& attn, const PackedCase& c, const Rows& r, std::uint64_t seed)
      : s(packed_shape(c, r)),
        n_qkv(fused_qkv_elements(s)),
        n_o(std::size_t(r.batch * r.seq * c.heads * c.d)),
        n_lse(std::size_t(r.batch * r.seq * c.heads)),
        qkv(dc.device(), n_qkv * 2),
        dqkv(dc.device(), n_qkv * 2),
        o(dc.device(), n_o * 2),
        dout(dc.device(), n_o * 2),
        lse(dc.device(), n_lse * 4) {
    DeviceBuffer tables(dc.device(), segment_table_bytes(s.segments));
    fill_uniform(qkv.get(), DType::bf16, n_qkv, seed, -2.f, 2.f, dc.stream());
    fill_uniform(dout.get(), DType::bf16, n_o, seed + 1, -1.f, 1.f, dc.stream());
    for (DeviceBuffer* out : {&o, &lse, &dqkv}) TB_CHECK(cudaMemsetAsync(out->get(), 0xff, out->bytes(), dc.stream()));
    const DeviceBuffer cu = upload(dc, r.padded);
    fill_segment_tables(tables.get(), cu.as<std::int32_t>(), s.segments, (c.heads + 2 * c.kv_heads) * c.d,
                        c.heads * c.d, c.heads, dc.stream());
    const PackedSegments seg = segment_tables(tables.get(), s.segments);
    const QkvPointers in = split_fused_qkv(qkv.get(), s), grad = split_fused_qkv(dqkv.get(), s);
    attn.forward(s, {in.q, in.k, in.v, o.get(), lse.as<float>(), seg}, dc.stream());
    attn.backward(s, {in.q, in.k, in.v, o.get(), dout.get(), lse.as<float>(), grad.q, grad.k, grad.v, seg},
                  dc.stream());
    dc.synchronize();
  }
  static AttentionShape packed_shape(const PackedCase& c, const Rows& r) {
    AttentionShape s = fused_qkv_attention(r.batch, r.seq, c.heads, c.kv_heads, c.d, c.deterministic);
    s.segments = r.capacity;
    return s;
  }
};

TEST_P(PackedAttentionGpu, MatchesThePackedCpuReference) {
  SKIP_WITHOUT_GPU();
  const PackedCase& c = GetParam();
  DeviceContext dc(0);
  CudnnAttention attn(0);
  const Rows r = test_rows();
  if (int(cudnnGetVersion()) < kCudnnPackedVersion) {
    try {
      attn.plan(PackedRun::packed_shape(c, r));
      ADD_FAILURE() << "a packed shape planned on cuDNN " << cudnn_version();
    } catch (const tb::Error& e) {
      EXPECT_NE(std::string(e.what()).find("cuDNN >= 9.6.0"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(cudnn_version()), std::string::npos) << e.what();
    }
    GTEST_SKIP() << "cuDNN " << cudnn_version() << " is older than 9.6: packed shapes are refused (checked)";
  }
  const PackedRun run(dc, attn, c, r, 301);
  const AttentionShape& s = run.s;
  const std::size_t n_qkv = run.n_qkv, n_o = run.n_o, n_lse = run.n_lse;
  const DeviceBuffer &qkv = run.qkv, &dqkv = run.dqkv, &o = run.o, &dout = run.dout, &lse = run.lse;
  SCOPED_TRACE(attn.plan(s).describe());

  AttentionHostCheck h(s);
  h.qkv = download_bf16(qkv.get(), n_qkv, dc.stream());
  h.o = download_bf16(o.get(), n_o, dc.stream());
  h.dout = download_bf16(dout.get(), n_o, dc.stream());
  h.dqkv = download_bf16(dqkv.get(), n_qkv, dc.stream());
  const std::vector<float> lse_tok = download<float>(lse.get(), n_lse, dc.stream());  // [b s, H]
  h.lse.assign(n_lse, 0.0);
  for (std::int64_t t = 0; t < r.batch * r.seq; ++t)
    for (std::int64_t hh = 0; hh < c.heads; ++hh)
      h.lse[std::size_t(((t / r.seq) * c.heads + hh) * r.seq + t % r.seq)] = lse_tok[std::size_t(t * c.heads + hh)];
  const std::vector<std::int64_t> pos = r.positions64();
  h.o_ref.assign(n_o, 0.0), h.lse_ref.assign(n_lse, 0.0), h.dqkv_ref.assign(n_qkv, 0.0);
  tb::ops::cpu::attention_forward_packed<double>(h.out(h.o_ref), h.stats(h.lse_ref), h.q(h.qkv), h.k(h.qkv),
                                                 h.v(h.qkv), pos);
  tb::ops::cpu::attention_backward_packed<double>(h.q(h.dqkv_ref), h.k(h.dqkv_ref), h.v(h.dqkv_ref), h.out(h.dout),
                                                  h.q(h.qkv), h.k(h.qkv), h.v(h.qkv), h.out(h.o), h.stats(h.lse_ref),
                                                  pos);
  const Err eo = compare(h.out(h.o), h.out(h.o_ref)), else_ = compare(h.stats(h.lse), h.stats(h.lse_ref));
  const Err dq = compare(h.q(h.dqkv), h.q(h.dqkv_ref)), dk = compare(h.k(h.dqkv), h.k(h.dqkv_ref)),
            dv = compare(h.v(h.dqkv), h.v(h.dqkv_ref));
  EXPECT_TRUE(close(eo)) << "o: " << show(eo);
  EXPECT_EQ(else_.nonfinite, 0);
  EXPECT_LT(else_.max_abs, kLse) << "lse: " << show(else_);
  EXPECT_TRUE(close(dq)) << "dq: " << show(dq);
  EXPECT_TRUE(close(dk)) << "dk: " << show(dk);
  EXPECT_TRUE(close(dv)) << "dv: " << show(dv);
  // The check can fail: causal attention over whole rows (across documents) is not this.
  h.reference_forward();
  EXPECT_FALSE(close(compare(h.out(h.o), h.out(h.o_ref)))) << "the GPU's o equals the unpacked reference";
}

// Packed attention equals each document's own attention, unpacked, on the GPU: every segment (a document, or a row's
// padding) copied to the start of a row of its own, random tokens after it, and the plain causal attention run over
// those rows. Causal from the top left, the first L outputs of such a row are the segment's attention alone; with
// dout zero past L (those queries then add nothing to dk, dv), the first L rows of dq, dk, dv are its gradients. Both
// sides are cuDNN in bf16: the tolerances above.
TEST_P(PackedAttentionGpu, EqualsEachDocumentUnpacked) {
  SKIP_WITHOUT_GPU();
  if (int(cudnnGetVersion()) < kCudnnPackedVersion) GTEST_SKIP() << "cuDNN " << cudnn_version() << " is older than 9.6";
  const PackedCase& c = GetParam();
  DeviceContext dc(0);
  CudnnAttention attn(0);
  const Rows r = test_rows();
  const PackedRun run(dc, attn, c, r, 311);
  const std::int64_t width = (c.heads + 2 * c.kv_heads) * c.d, ow = c.heads * c.d;
  const std::size_t n_qkv = run.n_qkv, n_o = run.n_o;

  // The segments as rows of their own: K rows of s tokens.
  const std::int64_t K = std::int64_t(r.offsets.size()) - 1, S = r.seq;
  const AttentionShape u = fused_qkv_attention(K, S, c.heads, c.kv_heads, c.d, c.deterministic);
  const std::vector<std::uint16_t> qkv_bits = download<std::uint16_t>(run.qkv.get(), n_qkv, dc.stream()),
                                   dout_bits = download<std::uint16_t>(run.dout.get(), n_o, dc.stream());
  std::vector<std::uint16_t> qkv_u(std::size_t(K * S * width)), dout_u(std::size_t(K * S * ow), 0);
  std::uint64_t state = 313;
  for (std::uint16_t& x : qkv_u) {  // the tokens after each segment: random, as its own
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    x = tb::float_to_bf16(float(double(state >> 11) * 0x1.0p-53 * 4.0 - 2.0));
  }
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t t = r.offsets[std::size_t(k)]; t < r.offsets[std::size_t(k + 1)]; ++t) {
      const std::int64_t at = k * S + t - r.offsets[std::size_t(k)];
      std::copy_n(qkv_bits.begin() + t * width, width, qkv_u.begin() + at * width);
      std::copy_n(dout_bits.begin() + t * ow, ow, dout_u.begin() + at * ow);
    }
  const DeviceBuffer d_qkv_u = upload(dc, qkv_u), d_dout_u = upload(dc, dout_u);
  DeviceBuffer o_u(dc.device(), dout_u.size() * 2), dqkv_u(dc.device(), qkv_u.size() * 2),
      lse_u(dc.device(), std::size_t(K * c.heads * S) * 4);
  const QkvPointers uin = split_fused_qkv(d_qkv_u.get(), u), ugrad = split_fused_qkv(dqkv_u.get(), u);
  attn.forward(u, {uin.q, uin.k, uin.v, o_u.get(), lse_u.as<float>()}, dc.stream());
  attn.backward(u, {uin.q, uin.k, uin.v, o_u.get(), d_dout_u.get(), lse_u.as<float>(), ugrad.q, ugrad.k, ugrad.v},
                dc.stream());
  dc.synchronize();

  // Each segment's tokens side by side: packed (got) and unpacked (ref).
  const std::vector<double> o_p = download_bf16(run.o.get(), n_o, dc.stream()),
                            o_r = download_bf16(o_u.get(), dout_u.size(), dc.stream()),
                            g_p = download_bf16(run.dqkv.get(), n_qkv, dc.stream()),
                            g_r = download_bf16(dqkv_u.get(), qkv_u.size(), dc.stream());
  const std::vector<float> l_p = download<float>(run.lse.get(), run.n_lse, dc.stream()),
                           l_r = download<float>(lse_u.get(), std::size_t(K * c.heads * S), dc.stream());
  std::vector<double> og, orf, lg, lr, qg, qr, kvg, kvr;
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t t = r.offsets[std::size_t(k)]; t < r.offsets[std::size_t(k + 1)]; ++t) {
      const std::int64_t i = t - r.offsets[std::size_t(k)], at = k * S + i;
      og.insert(og.end(), o_p.begin() + t * ow, o_p.begin() + (t + 1) * ow);
      orf.insert(orf.end(), o_r.begin() + at * ow, o_r.begin() + (at + 1) * ow);
      qg.insert(qg.end(), g_p.begin() + t * width, g_p.begin() + t * width + ow);
      qr.insert(qr.end(), g_r.begin() + at * width, g_r.begin() + at * width + ow);
      kvg.insert(kvg.end(), g_p.begin() + t * width + ow, g_p.begin() + (t + 1) * width);
      kvr.insert(kvr.end(), g_r.begin() + at * width + ow, g_r.begin() + (at + 1) * width);
      for (std::int64_t h = 0; h < c.heads; ++h)
        lg.push_back(l_p[std::size_t(t * c.heads + h)]), lr.push_back(l_r[std::size_t((k * c.heads + h) * S + i)]);
    }
  const auto flat = [](std::vector<double>& v) { return TensorView<double>(v.data(), {1, 1, std::int64_t(v.size())}); };
  const Err eo = compare(flat(og), flat(orf)), el = compare(flat(lg), flat(lr)), eq = compare(flat(qg), flat(qr)),
            ekv = compare(flat(kvg), flat(kvr));
  EXPECT_TRUE(close(eo)) << "o: " << show(eo);
  EXPECT_EQ(el.nonfinite, 0);
  EXPECT_LT(el.max_abs, kLse) << "lse: " << show(el);
  EXPECT_TRUE(close(eq)) << "dq: " << show(eq);
  EXPECT_TRUE(close(ekv)) << "dk, dv: " << show(ekv);
}

INSTANTIATE_TEST_SUITE_P(Shapes, PackedAttentionGpu,
                         testing::Values(PackedCase{8, 2, 128, false, "gqa_H8_G2_d128"},
                                         PackedCase{4, 4, 64, false, "mha_H4_G4_d64"},
                                         PackedCase{8, 1, 128, false, "mqa_H8_G1_d128"},
                                         PackedCase{8, 2, 128, true, "gqa_deterministic"}),
                         [](const testing::TestParamInfo<PackedCase>& c) { return std::string(c.param.name); });

// ---- the LM head's loss weights ------------------------------------------------------------------------------------

TEST(PackedRowsGpu, LmHeadLossWeightsMatchTheCpuReference) {
  SKIP_WITHOUT_GPU();
  DeviceContext dc(0);
  const std::int64_t t = 37, V = 1000, h = 64;
  DeviceBuffer x(dc.device(), std::size_t(t * h) * 2), w(dc.device(), std::size_t(V * h) * 2),
      dx(dc.device(), std::size_t(t * h) * 2), dw(dc.device(), std::size_t(V * h) * 4), loss(dc.device(), 4);
  fill_uniform(x.get(), DType::bf16, std::size_t(t * h), 11, -1.f, 1.f, dc.stream());
  fill_uniform(w.get(), DType::bf16, std::size_t(V * h), 12, -0.2f, 0.2f, dc.stream());
  TB_CHECK(cudaMemsetAsync(dw.get(), 0, dw.bytes(), dc.stream()));
  std::vector<std::int32_t> targets(static_cast<std::size_t>(t));
  std::vector<float> weights(static_cast<std::size_t>(t));
  for (std::int64_t i = 0; i < t; ++i) {
    targets[std::size_t(i)] = std::int32_t((i * 37 + 5) % V);
    weights[std::size_t(i)] = i % 3 == 0 ? 0.f : 0.03125f * float(1 + i % 5);
  }
  targets[3] = -1;  // weight 0: an invalid target adds nothing
  const DeviceBuffer d_targets = upload(dc, targets), d_weights = upload(dc, weights);
  const LmHeadCeScratch layout = lm_head_ce_scratch(t, V, h, 16);
  DeviceBuffer scratch(dc.device(), layout.bytes);
  const float grad_scale = 0.5f;
  lm_head_cross_entropy<float>(dc, {dx.as<__nv_bfloat16>(), {t, h}}, {dw.as<float>(), {V, h}},
                               {x.as<__nv_bfloat16>(), {t, h}}, {w.as<__nv_bfloat16>(), {V, h}},
                               d_targets.as<std::int32_t>(), 16, grad_scale, loss.as<float>(),
                               {scratch.get(), scratch.bytes()}, false, d_weights.as<float>());
  dc.synchronize();
  const std::vector<double> xh = download_bf16(x.get(), std::size_t(t * h), dc.stream()),
                            wh = download_bf16(w.get(), std::size_t(V * h), dc.stream()),
                            dxg = download_bf16(dx.get(), std::size_t(t * h), dc.stream());
  const std::vector<float> dwg = download<float>(dw.get(), std::size_t(V * h), dc.stream());
  const float lossg = download<float>(loss.get(), 1, dc.stream())[0];
  std::vector<std::int32_t> ref_targets = targets;
  ref_targets[3] = 0;  // the CPU reference checks every target; weight 0 makes it irrelevant
  const std::vector<double> wd(weights.begin(), weights.end());
  std::vector<double> dxr(std::size_t(t * h)), dwr(std::size_t(V * h), 0.0);
  const double lossr = tb::ops::cpu::lm_head_cross_entropy<double>(
      TensorView<double>(dxr.data(), {t, h}), TensorView<double>(dwr.data(), {V, h}),
      TensorView<const double>(xh.data(), {t, h}), TensorView<const double>(wh.data(), {V, h}), ref_targets, 16,
      grad_scale, wd);
  EXPECT_NEAR(lossg / lossr, 1.0, 1e-3);
  const auto rel = [](const auto& got, const std::vector<double>& ref) {
    double num = 0, den = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) num += std::pow(double(got[i]) - ref[i], 2), den += ref[i] * ref[i];
    return std::sqrt(num / den);
  };
  EXPECT_LT(rel(dxg, dxr), 1e-2);
  EXPECT_LT(rel(dwg, dwr), 1e-2);
  for (std::int64_t c = 0; c < h; ++c) EXPECT_EQ(dxg[std::size_t(3 * h + c)], 0.0) << "a zero weight's row";
  // Without weights it is the mean, a different number.
  const DeviceBuffer valid_targets = upload(dc, ref_targets);
  lm_head_cross_entropy<float>(dc, {}, {}, {x.as<__nv_bfloat16>(), {t, h}}, {w.as<__nv_bfloat16>(), {V, h}},
                               valid_targets.as<std::int32_t>(), 16, grad_scale, loss.as<float>(),
                               {scratch.get(), scratch.bytes()});
  dc.synchronize();
  EXPECT_GT(std::abs(download<float>(loss.get(), 1, dc.stream())[0] - lossg), 1e-3);
}

}  // namespace
