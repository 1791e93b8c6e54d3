// packed_rows_gpu_test: packed rows (core/packing.h) on one GPU against the CPU references in double, on the same
// bf16 inputs:
//   - the segment tables (ops/cuda/segments.h) from padded offsets: lengths, and the qkv, o and lse offsets;
//   - RoPE at per-token positions (ops/cuda/rope.h) against ops/cpu/rope.h's _at forms row by row, forward and back;
//   - cuDNN's ragged (THD) attention with its padding-causal mask (ops/cuda/attention.h, segments > 0) against
//     ops/cpu/attention.h's packed forms, forward (o, lse token-major) and backward (dq, dk, dv into the fused dqkv),
//     GQA, MHA and MQA, unused capacity (empty segments) included, the deterministic backward too; tolerances of the
//     unpacked attention test (relative L2 1e-2, max abs 3e-2 of the largest, lse 1e-3); outputs pre-filled with NaN.
//     The check can fail: the plain causal attention over whole rows must fail it. A cuDNN older than 9.6 must be
//     refused naming its version (run only there);
//   - the LM head's loss weights (ops/cuda/cross_entropy.h) against ops/cpu/cross_entropy.h with the same weights: a
//     zero weight's row (with an invalid target) adds nothing and gets a zero gradient.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

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
  const Rows r({40, 30, 50, 60}, {2, 2}, 96, 0);
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

TEST_P(PackedAttentionGpu, MatchesThePackedCpuReference) {
  SKIP_WITHOUT_GPU();
  const PackedCase& c = GetParam();
  DeviceContext dc(0);
  CudnnAttention attn(0);
  // Row 0: documents of 100, 60 and 96 tokens (full); row 1: 30 and 150, then 76 of padding; 4 unused segments.
  const Rows r({100, 60, 96, 30, 150}, {3, 2}, 256, 4);
  AttentionShape s = fused_qkv_attention(r.batch, r.seq, c.heads, c.kv_heads, c.d, c.deterministic);
  s.segments = r.capacity;
  if (int(cudnnGetVersion()) < kCudnnPackedVersion) {
    try {
      attn.plan(s);
      ADD_FAILURE() << "a packed shape planned on cuDNN " << cudnn_version();
    } catch (const tb::Error& e) {
      EXPECT_NE(std::string(e.what()).find("cuDNN >= 9.6.0"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(cudnn_version()), std::string::npos) << e.what();
    }
    GTEST_SKIP() << "cuDNN " << cudnn_version() << " is older than 9.6: packed shapes are refused (checked)";
  }
  const std::size_t n_qkv = fused_qkv_elements(s), n_o = std::size_t(r.batch * r.seq * c.heads * c.d);
  const std::size_t n_lse = std::size_t(r.batch * r.seq * c.heads);
  DeviceBuffer qkv(dc.device(), n_qkv * 2), dqkv(dc.device(), n_qkv * 2), o(dc.device(), n_o * 2),
      dout(dc.device(), n_o * 2), lse(dc.device(), n_lse * 4), tables(dc.device(), segment_table_bytes(s.segments));
  fill_uniform(qkv.get(), DType::bf16, n_qkv, 301, -2.f, 2.f, dc.stream());
  fill_uniform(dout.get(), DType::bf16, n_o, 302, -1.f, 1.f, dc.stream());
  for (DeviceBuffer* out : {&o, &lse, &dqkv}) TB_CHECK(cudaMemsetAsync(out->get(), 0xff, out->bytes(), dc.stream()));
  const DeviceBuffer cu = upload(dc, r.padded);
  const std::int64_t width = (c.heads + 2 * c.kv_heads) * c.d;
  fill_segment_tables(tables.get(), cu.as<std::int32_t>(), s.segments, width, c.heads * c.d, c.heads, dc.stream());
  const PackedSegments seg = segment_tables(tables.get(), s.segments);
  const QkvPointers in = split_fused_qkv(qkv.get(), s), grad = split_fused_qkv(dqkv.get(), s);
  attn.forward(s, {in.q, in.k, in.v, o.get(), lse.as<float>(), seg}, dc.stream());
  attn.backward(s, {in.q, in.k, in.v, o.get(), dout.get(), lse.as<float>(), grad.q, grad.k, grad.v, seg},
                dc.stream());
  dc.synchronize();
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
