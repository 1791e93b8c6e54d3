// Tests ops/cuda/attention (cuDNN fused causal GQA attention through cudnn-frontend) against the CPU
// reference ops/cpu/attention in double, on the same bf16 inputs:
//   q, k, v are read in place from one fused QKV buffer [b*s, (H+2G)*d] and dq, dk, dv are written into one
//   fused dQKV buffer (outputs pre-filled with NaN, so anything left unwritten fails), for GQA, MHA, MQA
//   and an odd sequence length; relative L2 error of o, dq, dk, dv < 1e-2, max abs error < 3e-2 of the
//   largest reference value, lse within 1e-3. The reference backward reads the GPU's o (cuDNN's backward
//   uses it for D = rowsum(dO * O)) and its own lse.
//   The check can fail: K and V swapped in the forward, and dk compared with the reference dv, must fail it.
// Longer keys (kv_seq > seq, context parallel): the queries are the last seq of kv_seq positions (bottom-right
//   causal diagonal); o, lse, dq, dk, dv against the CPU reference's _at forms at query positions kv_seq - seq + i,
//   with q, k, v in separate contiguous buffers and in the model's layout (q from a fused QKV buffer, k and v from
//   a [b, kv_seq, 2G, d] buffer); the top-left reference (query i at position i) must fail the same check.
// Multi-head latent attention's widths (q, k 192; v, o 128) in its layer's layout against the reference.
// Also: a deterministic backward is bit-reproducible, plans are cached per shape, bad shapes are refused
// with config errors, the FLOP formulas, and a timing-free smoke run at Llama 3.1 8B shapes (b=1, s=8192,
// H=32, G=8, d=128): forward + backward finite everywhere, a few rows of o and lse checked against a
// direct double computation.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench/sysinfo.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/cpu/attention.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/context.h"
#include "ops/cuda/cudnn.h"
#include "ops/cuda/fill.h"
#include "../support/attention_check.h"
#include "../support/config_error.h"

namespace {

using tb::DType;
using tb::Shape;
using tb::TensorView;
using namespace tb::ops;
using namespace tb::testing_support;

#define SKIP_WITHOUT_GPU() \
  if (tb::bench::visible_gpu_count() == 0) GTEST_SKIP() << tb::bench::no_gpu_reason()

constexpr double kRelL2 = 1e-2;     // bf16 storage, fp32 accumulation, P and dS rounded to bf16 in the MMAs
constexpr double kMaxAbsFrac = 3e-2;  // max |err| as a fraction of max |ref| (a few bf16 ulps of the largest)
constexpr double kLse = 1e-3;

std::vector<double> download_bf16(const void* dev, std::size_t n, cudaStream_t stream) {
  std::vector<std::uint16_t> bits(n);
  TB_CHECK(cudaMemcpyAsync(bits.data(), dev, n * sizeof(std::uint16_t), cudaMemcpyDeviceToHost, stream));
  TB_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = tb::bf16_to_float(bits[i]);
  return out;
}

std::vector<double> download_f32(const float* dev, std::size_t n, cudaStream_t stream) {
  std::vector<float> f(n);
  TB_CHECK(cudaMemcpyAsync(f.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
  TB_CHECK(cudaStreamSynchronize(stream));
  return {f.begin(), f.end()};
}

std::string show(const Err& e) {
  return "rel_l2 " + std::to_string(e.rel_l2) + ", max_abs " + std::to_string(e.max_abs) + " (max |ref| " +
         std::to_string(e.max_ref) + "), non-finite " + std::to_string(e.nonfinite);
}

bool close(const Err& e) { return e.nonfinite == 0 && e.rel_l2 < kRelL2 && e.max_abs <= kMaxAbsFrac * e.max_ref; }

// The five results of one forward and backward against the reference: o, dq, dk, dv close; lse within kLse.
void expect_close(const Err& o, const Err& lse, const Err& dq, const Err& dk, const Err& dv) {
  EXPECT_TRUE(close(o)) << "o: " << show(o);
  EXPECT_EQ(lse.nonfinite, 0);
  EXPECT_LT(lse.max_abs, kLse) << "lse: " << show(lse);
  EXPECT_TRUE(close(dq)) << "dq: " << show(dq);
  EXPECT_TRUE(close(dk)) << "dk: " << show(dk);
  EXPECT_TRUE(close(dv)) << "dv: " << show(dv);
}

// One attention problem on the device: the fused QKV input, dout, and the outputs (NaN until written).
struct Problem {
  AttentionShape s;
  DeviceBuffer qkv, o, lse, dout, dqkv;
  QkvPointers in, grad;

  Problem(const DeviceContext& dc, const AttentionShape& shape)
      : s(shape),
        qkv(dc.device(), fused_qkv_elements(s) * 2),
        o(dc.device(), std::size_t(s.batch * s.seq * s.heads * s.head_dim) * 2),
        lse(dc.device(), std::size_t(s.batch * s.heads * s.seq) * sizeof(float)),
        dout(dc.device(), o.bytes()),
        dqkv(dc.device(), qkv.bytes()) {
    // Scores q.k/sqrt(d) with q, k uniform in [-2, 2] have std ~1.3: softmax rows neither flat nor one-hot.
    fill_uniform(qkv.get(), DType::bf16, fused_qkv_elements(s), 101, -2.0f, 2.0f, dc.stream());
    fill_uniform(dout.get(), DType::bf16, o.bytes() / 2, 102, -1.0f, 1.0f, dc.stream());
    TB_CHECK(cudaMemsetAsync(o.get(), 0xff, o.bytes(), dc.stream()));
    TB_CHECK(cudaMemsetAsync(lse.get(), 0xff, lse.bytes(), dc.stream()));
    TB_CHECK(cudaMemsetAsync(dqkv.get(), 0xff, dqkv.bytes(), dc.stream()));
    in = split_fused_qkv(qkv.get(), s);
    grad = split_fused_qkv(dqkv.get(), s);
  }
  AttentionForwardArgs forward_args() const { return {in.q, in.k, in.v, o.get(), lse.as<float>()}; }
  AttentionBackwardArgs backward_args() const {
    return {in.q, in.k, in.v, o.get(), dout.get(), lse.as<float>(), grad.q, grad.k, grad.v};
  }
};

// The same problem on the host in double: inputs, GPU outputs, reference outputs.
struct HostCheck : AttentionHostCheck {
  HostCheck(const Problem& p, cudaStream_t stream) : AttentionHostCheck(p.s) {
    qkv = download_bf16(p.qkv.get(), fused_qkv_elements(s), stream);
    o = download_bf16(p.o.get(), p.o.bytes() / 2, stream);
    lse = download_f32(p.lse.as<float>(), p.lse.bytes() / sizeof(float), stream);
    dout = download_bf16(p.dout.get(), p.dout.bytes() / 2, stream);
    dqkv = download_bf16(p.dqkv.get(), fused_qkv_elements(s), stream);
  }
};

struct Case {
  std::int64_t b, s, heads, kv_heads, d;
  const char* name;
};

class AttentionGpu : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    dc_ = std::make_unique<DeviceContext>(0);
    attn_ = std::make_unique<CudnnAttention>(0);
    const Case& c = GetParam();
    shape_ = fused_qkv_attention(c.b, c.s, c.heads, c.kv_heads, c.d);
  }
  std::unique_ptr<DeviceContext> dc_;
  std::unique_ptr<CudnnAttention> attn_;
  AttentionShape shape_;
};

TEST_P(AttentionGpu, ForwardAndBackwardMatchTheCpuReference) {
  Problem p(*dc_, shape_);
  attn_->forward(shape_, p.forward_args(), dc_->stream());
  attn_->backward(shape_, p.backward_args(), dc_->stream());
  dc_->synchronize();
  SCOPED_TRACE(attn_->plan(shape_).describe());

  HostCheck h(p, dc_->stream());
  h.reference();
  const Err o = compare(h.out(h.o), h.out(h.o_ref));
  const Err lse = compare(h.stats(h.lse), h.stats(h.lse_ref));
  const Err dq = compare(h.q(h.dqkv), h.q(h.dqkv_ref));
  const Err dk = compare(h.k(h.dqkv), h.k(h.dqkv_ref));
  const Err dv = compare(h.v(h.dqkv), h.v(h.dqkv_ref));
  expect_close(o, lse, dq, dk, dv);

  // The check can fail: dk is not dv.
  EXPECT_FALSE(close(compare(h.k(h.dqkv), h.v(h.dqkv_ref))));
}

// K and V swapped (a wrong view into the fused buffer) must fail the same check.
TEST_P(AttentionGpu, SwappedKeysAndValuesFailTheCheck) {
  Problem p(*dc_, shape_);
  AttentionForwardArgs a = p.forward_args();
  std::swap(a.k, a.v);
  attn_->forward(shape_, a, dc_->stream());
  dc_->synchronize();

  HostCheck h(p, dc_->stream());
  h.reference_forward();
  const Err o = compare(h.out(h.o), h.out(h.o_ref));
  EXPECT_EQ(o.nonfinite, 0);
  EXPECT_FALSE(close(o)) << "o with K and V swapped: " << show(o);
  EXPECT_GT(o.rel_l2, 0.1);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionGpu,
                         testing::Values(Case{2, 128, 8, 2, 64, "gqa_b2_s128_H8_G2_d64"},
                                         Case{1, 256, 4, 4, 128, "mha_b1_s256_H4_G4_d128"},
                                         Case{2, 128, 8, 1, 128, "mqa_b2_s128_H8_G1_d128"},
                                         Case{1, 200, 4, 1, 64, "mqa_odd_seq_b1_s200_H4_G1_d64"}),
                         [](const testing::TestParamInfo<Case>& c) { return std::string(c.param.name); });

// ---- longer keys (kv_seq >= seq): the queries are the last seq of kv_seq positions ----------------------

enum class KvLayout {
  separate,  // q [b, s, H, d]; k, v [b, n, G, d], each contiguous (one buffer: k, then v)
  model,     // q from a fused QKV buffer [b, s, (H + 2G) d]; k, v from one [b, n, 2G, d] buffer (k at column 0,
             // v at column G d), as context parallel gathers them
};

struct KvCase {
  std::int64_t b, s, n, heads, kv_heads, d;
  KvLayout layout;
  const char* name;
};

// Strides and element offsets of q, k, v inside their buffers (the gradients use the same layout).
struct KvGeometry {
  AttentionShape s;
  std::int64_t q_row, kv_row, k_off, v_off;
  std::size_t q_elems, kv_elems, o_elems, lse_elems;

  explicit KvGeometry(const KvCase& c) {
    s.batch = c.b;
    s.seq = c.s;
    s.kv_seq = c.n;
    s.heads = c.heads;
    s.kv_heads = c.kv_heads;
    s.head_dim = c.d;
    const bool model = c.layout == KvLayout::model;
    q_row = model ? (c.heads + 2 * c.kv_heads) * c.d : c.heads * c.d;
    kv_row = model ? 2 * c.kv_heads * c.d : c.kv_heads * c.d;
    k_off = 0;
    v_off = model ? c.kv_heads * c.d : c.b * c.n * c.kv_heads * c.d;
    s.q = HeadStrides{c.s * q_row, q_row, c.d};
    s.k = s.v = HeadStrides{c.n * kv_row, kv_row, c.d};
    s.o = HeadStrides{c.s * c.heads * c.d, c.heads * c.d, c.d};
    q_elems = std::size_t(c.b * c.s * q_row);
    kv_elems = std::size_t(model ? c.b * c.n * kv_row : 2 * c.b * c.n * kv_row);
    o_elems = std::size_t(c.b * c.s * c.heads * c.d);
    lse_elems = std::size_t(c.b * c.heads * c.s);
  }
  TensorView<double> q(std::vector<double>& buf) const {
    return TensorView<double>(buf.data(), Shape{s.batch, s.seq, s.heads, s.head_dim},
                              Shape{s.q.batch, s.q.seq, s.q.head, 1}, 4);
  }
  TensorView<double> kv(std::vector<double>& buf, std::int64_t off) const {
    return TensorView<double>(buf.data() + off, Shape{s.batch, s.keys(), s.kv_heads, s.head_dim},
                              Shape{s.k.batch, s.k.seq, s.k.head, 1}, 4);
  }
  TensorView<double> k(std::vector<double>& buf) const { return kv(buf, k_off); }
  TensorView<double> v(std::vector<double>& buf) const { return kv(buf, v_off); }
  TensorView<double> out(std::vector<double>& buf) const { return heads_view(buf, 0, s, s.heads, s.o); }
  TensorView<double> stats(std::vector<double>& buf) const {
    return TensorView<double>(buf.data(), {s.batch, s.heads, s.seq});
  }
  // Query i at position first + i.
  std::vector<std::int64_t> positions(std::int64_t first) const {
    std::vector<std::int64_t> p(std::size_t(s.seq));
    for (std::int64_t i = 0; i < s.seq; ++i) p[std::size_t(i)] = first + i;
    return p;
  }
};

class AttentionGpuKv : public testing::TestWithParam<KvCase> {
 protected:
  void SetUp() override { SKIP_WITHOUT_GPU(); }
};

TEST_P(AttentionGpuKv, QueriesAtTheEndMatchTheCpuReferenceAtTheirPositions) {
  const KvCase& c = GetParam();
  const KvGeometry g(c);
  const AttentionShape& s = g.s;
  DeviceContext dc(0);
  CudnnAttention attn(0);
  SCOPED_TRACE(attn.plan(s).describe());

  // Fresh random inputs (scores with std ~1.3, as in Problem); outputs NaN until written.
  DeviceBuffer q(dc.device(), g.q_elems * 2), kv(dc.device(), g.kv_elems * 2), o(dc.device(), g.o_elems * 2),
      lse(dc.device(), g.lse_elems * sizeof(float)), dout(dc.device(), g.o_elems * 2),
      dq(dc.device(), g.q_elems * 2), dkv(dc.device(), g.kv_elems * 2);
  fill_uniform(q.get(), DType::bf16, g.q_elems, 201, -2.0f, 2.0f, dc.stream());
  fill_uniform(kv.get(), DType::bf16, g.kv_elems, 202, -2.0f, 2.0f, dc.stream());
  fill_uniform(dout.get(), DType::bf16, g.o_elems, 203, -1.0f, 1.0f, dc.stream());
  for (DeviceBuffer* b : {&o, &lse, &dq, &dkv}) TB_CHECK(cudaMemsetAsync(b->get(), 0xff, b->bytes(), dc.stream()));
  auto* kv_base = static_cast<unsigned char*>(kv.get());
  auto* dkv_base = static_cast<unsigned char*>(dkv.get());
  const std::size_t k_at = std::size_t(g.k_off) * 2, v_at = std::size_t(g.v_off) * 2;

  attn.forward(s, {q.get(), kv_base + k_at, kv_base + v_at, o.get(), lse.as<float>()}, dc.stream());
  attn.backward(s,
                {q.get(), kv_base + k_at, kv_base + v_at, o.get(), dout.get(), lse.as<float>(), dq.get(),
                 dkv_base + k_at, dkv_base + v_at},
                dc.stream());
  dc.synchronize();

  std::vector<double> hq = download_bf16(q.get(), g.q_elems, dc.stream());
  std::vector<double> hkv = download_bf16(kv.get(), g.kv_elems, dc.stream());
  std::vector<double> ho = download_bf16(o.get(), g.o_elems, dc.stream());
  std::vector<double> hlse = download_f32(lse.as<float>(), g.lse_elems, dc.stream());
  std::vector<double> hdout = download_bf16(dout.get(), g.o_elems, dc.stream());
  std::vector<double> hdq = download_bf16(dq.get(), g.q_elems, dc.stream());
  std::vector<double> hdkv = download_bf16(dkv.get(), g.kv_elems, dc.stream());

  const std::vector<std::int64_t> pos = g.positions(s.keys() - s.seq);
  std::vector<double> o_ref(g.o_elems, 0.0), lse_ref(g.lse_elems, 0.0), dq_ref(g.q_elems, 0.0),
      dkv_ref(g.kv_elems, 0.0);
  tb::ops::cpu::attention_forward_at<double>(g.out(o_ref), g.stats(lse_ref), g.q(hq), g.k(hkv), g.v(hkv), pos);
  // As in HostCheck::reference: the GPU's o (cuDNN's D = rowsum(dO * O)), the reference lse.
  tb::ops::cpu::attention_backward_at<double>(g.q(dq_ref), g.k(dkv_ref), g.v(dkv_ref), g.out(hdout), g.q(hq),
                                              g.k(hkv), g.v(hkv), g.out(ho), g.stats(lse_ref), pos);

  const Err eo = compare(g.out(ho), g.out(o_ref));
  const Err el = compare(g.stats(hlse), g.stats(lse_ref));
  const Err edq = compare(g.q(hdq), g.q(dq_ref));
  const Err edk = compare(g.k(hdkv), g.k(dkv_ref));
  const Err edv = compare(g.v(hdkv), g.v(dkv_ref));
  expect_close(eo, el, edq, edk, edv);

  // The check can fail: dk is not dv; with kv_seq > seq, the top-left mask (query i at position i) gives
  // another o.
  EXPECT_FALSE(close(compare(g.k(hdkv), g.v(dkv_ref))));
  if (s.keys() > s.seq) {
    std::vector<double> o_tl(g.o_elems, 0.0), lse_tl(g.lse_elems, 0.0);
    tb::ops::cpu::attention_forward_at<double>(g.out(o_tl), g.stats(lse_tl), g.q(hq), g.k(hkv), g.v(hkv),
                                               g.positions(0));
    const Err tl = compare(g.out(ho), g.out(o_tl));
    EXPECT_FALSE(close(tl)) << "o matches the top-left-causal reference: " << show(tl);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionGpuKv,
    testing::Values(KvCase{1, 128, 256, 8, 2, 64, KvLayout::separate, "b1_s128_kv256_H8_G2_d64"},
                    KvCase{2, 64, 256, 8, 2, 128, KvLayout::separate, "b2_s64_kv256_H8_G2_d128"},
                    KvCase{1, 256, 256, 8, 2, 64, KvLayout::separate, "b1_s256_kv256_H8_G2_d64"},
                    KvCase{1, 128, 256, 8, 2, 128, KvLayout::model, "model_b1_s128_kv256_H8_G2_d128"},
                    KvCase{2, 64, 256, 8, 2, 64, KvLayout::model, "model_b2_s64_kv256_H8_G2_d64"},
                    KvCase{1, 128, 512, 32, 8, 128, KvLayout::model, "model_b1_s128_kv512_H32_G8_d128"}),
    [](const testing::TestParamInfo<KvCase>& c) { return std::string(c.param.name); });

// ---- multi-head latent attention: q and k 192 wide, v and o 128 (DeepSeek-V3's widths) ----------------------------
// In the MLA layer's layout (model/attention_mla_cuda.h): q [b s, H 192] and k [b s, H 192] in buffers of their own,
// v inside the kv_up output [b s, H (128 + 128)] at column 128 of each head, o [b s, H 128]; dv is written through v's
// strides into a buffer of the kv_up layout whose k_nope columns cuDNN leaves alone.
TEST(AttentionGpuMla, Qk192V128MatchTheCpuReference) {
  SKIP_WITHOUT_GPU();
  const std::int64_t b = 2, sq = 128, H = 4, d = 192, dn = 128, dv = 128;
  AttentionShape s;
  s.batch = b, s.seq = sq, s.heads = s.kv_heads = H, s.head_dim = d, s.v_head_dim = dv;
  s.q = s.k = HeadStrides{sq * H * d, H * d, d};
  s.v = HeadStrides{sq * H * (dn + dv), H * (dn + dv), dn + dv};
  s.o = HeadStrides{sq * H * dv, H * dv, dv};
  EXPECT_NE(describe(s).find("d=192 dv=128"), std::string::npos) << describe(s);
  DeviceContext dc(0);
  CudnnAttention attn(0);
  SCOPED_TRACE(attn.plan(s).describe());
  const std::size_t nq = std::size_t(b * sq * H * d), nkv = std::size_t(b * sq * H * (dn + dv));
  const std::size_t no = std::size_t(b * sq * H * dv), nl = std::size_t(b * H * sq);
  DeviceBuffer q(dc.device(), nq * 2), k(dc.device(), nq * 2), kv(dc.device(), nkv * 2), o(dc.device(), no * 2),
      lse(dc.device(), nl * sizeof(float)), dout(dc.device(), no * 2), dq(dc.device(), nq * 2),
      dk(dc.device(), nq * 2), dkv(dc.device(), nkv * 2);
  fill_uniform(q.get(), DType::bf16, nq, 301, -2.0f, 2.0f, dc.stream());
  fill_uniform(k.get(), DType::bf16, nq, 302, -2.0f, 2.0f, dc.stream());
  fill_uniform(kv.get(), DType::bf16, nkv, 303, -2.0f, 2.0f, dc.stream());
  fill_uniform(dout.get(), DType::bf16, no, 304, -1.0f, 1.0f, dc.stream());
  for (DeviceBuffer* x : {&o, &lse, &dq, &dk, &dkv}) TB_CHECK(cudaMemsetAsync(x->get(), 0xff, x->bytes(), dc.stream()));
  auto* v = static_cast<unsigned char*>(kv.get()) + dn * 2;
  auto* dvp = static_cast<unsigned char*>(dkv.get()) + dn * 2;
  attn.forward(s, {q.get(), k.get(), v, o.get(), lse.as<float>()}, dc.stream());
  attn.backward(s, {q.get(), k.get(), v, o.get(), dout.get(), lse.as<float>(), dq.get(), dk.get(), dvp}, dc.stream());
  dc.synchronize();

  std::vector<double> hq = download_bf16(q.get(), nq, dc.stream()), hk = download_bf16(k.get(), nq, dc.stream());
  std::vector<double> hkv = download_bf16(kv.get(), nkv, dc.stream()), ho = download_bf16(o.get(), no, dc.stream());
  std::vector<double> hlse = download_f32(lse.as<float>(), nl, dc.stream());
  std::vector<double> hdout = download_bf16(dout.get(), no, dc.stream()), hdq = download_bf16(dq.get(), nq, dc.stream());
  std::vector<double> hdk = download_bf16(dk.get(), nq, dc.stream()), hdkv = download_bf16(dkv.get(), nkv, dc.stream());
  auto view = [&](std::vector<double>& buf, std::int64_t col, std::int64_t w, const HeadStrides& t) {
    return TensorView<double>(buf.data() + col, Shape{b, sq, H, w}, Shape{t.batch, t.seq, t.head, 1}, 4);
  };
  std::vector<double> o_ref(no), lse_ref(nl), dq_ref(nq), dk_ref(nq), dkv_ref(nkv);
  const TensorView<double> stats(hlse.data(), {b, H, sq}), stats_ref(lse_ref.data(), {b, H, sq});
  tb::ops::cpu::attention_forward<double>(view(o_ref, 0, dv, s.o), stats_ref, view(hq, 0, d, s.q), view(hk, 0, d, s.k),
                                          view(hkv, dn, dv, s.v));
  tb::ops::cpu::attention_backward<double>(view(dq_ref, 0, d, s.q), view(dk_ref, 0, d, s.k),
                                           view(dkv_ref, dn, dv, s.v), view(hdout, 0, dv, s.o), view(hq, 0, d, s.q),
                                           view(hk, 0, d, s.k), view(hkv, dn, dv, s.v), view(ho, 0, dv, s.o),
                                           stats_ref);
  const Err eo = compare(view(ho, 0, dv, s.o), view(o_ref, 0, dv, s.o));
  const Err el = compare(stats, stats_ref);
  const Err edq = compare(view(hdq, 0, d, s.q), view(dq_ref, 0, d, s.q));
  const Err edk = compare(view(hdk, 0, d, s.k), view(dk_ref, 0, d, s.k));
  const Err edv = compare(view(hdkv, dn, dv, s.v), view(dkv_ref, dn, dv, s.v));
  expect_close(eo, el, edq, edk, edv);
  // The k_nope columns of dkv are not cuDNN's: still NaN. The check can fail: dq is not dk.
  EXPECT_TRUE(std::isnan(hdkv[0]) && std::isnan(hdkv[std::size_t(dn - 1)]));
  EXPECT_FALSE(close(compare(view(hdq, 0, d, s.q), view(dk_ref, 0, d, s.k))));
  const AttentionFlops f = attention_flops(s, false);
  EXPECT_DOUBLE_EQ(f.forward, 2.0 * b * H * double(sq) * sq * (d + dv));
}

TEST(AttentionGpuDeterministic, BackwardIsBitReproducibleAndCorrect) {
  SKIP_WITHOUT_GPU();
  DeviceContext dc(0);
  CudnnAttention attn(0);
  const AttentionShape s = fused_qkv_attention(2, 128, 8, 2, 64, /*deterministic=*/true);
  try {
    attn.plan(s);
  } catch (const tb::Error& e) {
    if (e.kind() == tb::Error::Kind::unsupported) GTEST_SKIP() << e.what();
    throw;
  }
  Problem p(dc, s);
  attn.forward(s, p.forward_args(), dc.stream());
  attn.backward(s, p.backward_args(), dc.stream());
  const std::vector<double> first = download_bf16(p.dqkv.get(), fused_qkv_elements(s), dc.stream());
  TB_CHECK(cudaMemsetAsync(p.dqkv.get(), 0xff, p.dqkv.bytes(), dc.stream()));
  attn.backward(s, p.backward_args(), dc.stream());
  HostCheck h(p, dc.stream());
  std::int64_t differ = 0;
  for (std::size_t i = 0; i < first.size(); ++i) differ += !(first[i] == h.dqkv[i]);
  EXPECT_EQ(differ, 0) << "elements of dQKV that changed between two deterministic backward runs";
  h.reference();
  const Err dq = compare(h.q(h.dqkv), h.q(h.dqkv_ref));
  EXPECT_TRUE(close(dq)) << "dq: " << show(dq);
}

TEST(AttentionGpuPlans, AreCachedPerShapeAndOwnTheirWorkspace) {
  SKIP_WITHOUT_GPU();
  CudnnAttention attn(0);
  const AttentionShape a = fused_qkv_attention(1, 256, 8, 2, 128);
  const AttentionPlan& p1 = attn.plan(a);
  EXPECT_EQ(&attn.plan(a), &p1);
  const AttentionShape b = fused_qkv_attention(1, 512, 8, 2, 128);
  const AttentionPlan& p2 = attn.plan(b);
  EXPECT_NE(&p2, &p1);
  EXPECT_GE(attn.workspace_bytes(), std::max(p1.workspace_bytes(), p2.workspace_bytes()));
  EXPECT_NE(p1.describe().find("fused-qkv"), std::string::npos) << p1.describe();
  std::cout << "cuDNN " << cudnn_version() << ": " << p1.describe() << "\n";
}

TEST(AttentionGpuPlans, RejectsMisalignedPointersAndSmallWorkspace) {
  SKIP_WITHOUT_GPU();
  DeviceContext dc(0);
  CudnnAttention attn(0);
  const AttentionShape s = fused_qkv_attention(1, 128, 4, 2, 64);
  Problem p(dc, s);
  AttentionForwardArgs a = p.forward_args();
  a.q = static_cast<const unsigned char*>(a.q) + 2;
  EXPECT_THROW(attn.forward(s, a, dc.stream()), tb::Error);
  const AttentionPlan& plan = attn.plan(s);
  if (plan.backward_workspace_bytes() > 0) {
    EXPECT_THROW(plan.backward(attn.handle(), p.backward_args(), {nullptr, 0}, dc.stream()), tb::Error);
  }
}

// Host-only checks (no GPU needed).
TEST(AttentionShapeCheck, RejectsBadShapesWithConfigErrors) {
  const auto message = [](const AttentionShape& s) {
    return tb::testing_support::config_error([&] { check_attention_shape(s); });
  };
  EXPECT_EQ(message(fused_qkv_attention(1, 8192, 32, 8, 128)), "no error");
  EXPECT_NE(message(fused_qkv_attention(1, 128, 6, 4, 64)).find("must divide heads"), std::string::npos);
  EXPECT_NE(message(fused_qkv_attention(1, 128, 4, 4, 60)).find("multiple of 8"), std::string::npos);
  EXPECT_NE(message(fused_qkv_attention(0, 128, 4, 4, 64)).find("at least 1"), std::string::npos);
  AttentionShape odd = fused_qkv_attention(1, 128, 4, 4, 64);
  odd.o.seq = 257;
  EXPECT_NE(message(odd).find("multiples of 8"), std::string::npos);
  AttentionShape kv = fused_qkv_attention(1, 128, 4, 4, 64);
  kv.kv_seq = 128;
  EXPECT_EQ(message(kv), "no error");
  kv.kv_seq = 512;
  EXPECT_EQ(message(kv), "no error");
  kv.kv_seq = 64;
  EXPECT_NE(message(kv).find("kv_seq (64) must be 0"), std::string::npos) << message(kv);
  kv.kv_seq = -1;
  EXPECT_NE(message(kv).find("kv_seq (-1) must be 0"), std::string::npos) << message(kv);
  AttentionShape mla = fused_qkv_attention(1, 128, 4, 4, 192);
  mla.v_head_dim = 128;
  EXPECT_EQ(message(mla), "no error");
  mla.v_head_dim = 100;
  EXPECT_NE(message(mla).find("v_head_dim (100) must be 0"), std::string::npos) << message(mla);
}

TEST(AttentionShapeCheck, FusedLayoutAndFlops) {
  const AttentionShape s = fused_qkv_attention(1, 8192, 32, 8, 128);
  EXPECT_EQ(s.q.seq, 48 * 128);  // (H + 2G) d
  EXPECT_EQ(s.k.head, 128);
  EXPECT_EQ(s.o.seq, 32 * 128);
  EXPECT_EQ(fused_qkv_elements(s), std::size_t(8192) * 48 * 128);
  unsigned char buf[16];
  const QkvPointers ptr = split_fused_qkv(buf, s);
  EXPECT_EQ(static_cast<unsigned char*>(ptr.k) - buf, 32 * 128 * 2);
  EXPECT_EQ(static_cast<unsigned char*>(ptr.v) - buf, 40 * 128 * 2);
  EXPECT_EQ(describe(s), "b=1 s=8192 H=32 G=8 d=128 fused-qkv");
  const double causal = 2.0 * 32 * 8192.0 * 8192.0 * 128;  // 2 b H s^2 d
  EXPECT_DOUBLE_EQ(attention_flops(s, true).forward, causal);
  EXPECT_DOUBLE_EQ(attention_flops(s, false).forward, 2 * causal);
  EXPECT_DOUBLE_EQ(attention_flops(s, true).backward, 2 * causal);
  EXPECT_DOUBLE_EQ(attention_flops(s, true).backward_with_recompute, 2.5 * causal);

  // kv_seq == seq is the plain shape; kv_seq > seq counts the visible scores of the bottom-right block.
  AttentionShape same = s;
  same.kv_seq = 8192;
  EXPECT_EQ(describe(same), describe(s));
  EXPECT_DOUBLE_EQ(attention_flops(same, true).forward, causal);
  AttentionShape cp = fused_qkv_attention(2, 1024, 32, 8, 128);
  cp.kv_seq = 4096;
  EXPECT_EQ(describe(cp).rfind("b=2 s=1024 kv=4096 H=32 G=8 d=128 strides", 0), 0u) << describe(cp);
  double visible = 0;  // query i (position 3072 + i) sees 3072 + i + 1 keys
  for (std::int64_t i = 0; i < 1024; ++i) visible += double(3072 + i + 1);
  const double cp_causal = 2.0 * 2.0 * 2 * 32 * 128 * visible;
  EXPECT_DOUBLE_EQ(attention_flops(cp, true).forward, cp_causal);
  EXPECT_DOUBLE_EQ(attention_flops(cp, true).backward, 2 * cp_causal);
  EXPECT_DOUBLE_EQ(attention_flops(cp, false).forward, 2.0 * 2.0 * 2 * 32 * 128 * 1024.0 * 4096.0);
  EXPECT_TRUE(cp < s || s < cp);  // a different plan-cache key
}

// Llama 3.1 8B attention at sequence 8192: runs forward + backward, everything finite, a few rows of o and
// lse against a direct double computation (the full CPU reference would take minutes).
TEST(AttentionGpuSmoke, Llama31_8BShapesRunAndStayFinite) {
  SKIP_WITHOUT_GPU();
  DeviceContext dc(0);
  CudnnAttention attn(0);
  const AttentionShape s = fused_qkv_attention(1, 8192, 32, 8, 128);
  Problem p(dc, s);
  attn.forward(s, p.forward_args(), dc.stream());
  attn.backward(s, p.backward_args(), dc.stream());
  dc.synchronize();
  std::cout << "cuDNN " << cudnn_version() << ": " << attn.plan(s).describe() << "\n";

  HostCheck h(p, dc.stream());
  const auto nonfinite = [](const std::vector<double>& v) {
    std::int64_t n = 0;
    for (double x : v) n += !std::isfinite(x);
    return n;
  };
  EXPECT_EQ(nonfinite(h.o), 0);
  EXPECT_EQ(nonfinite(h.lse), 0);
  EXPECT_EQ(nonfinite(h.dqkv), 0);

  auto q = h.q(h.qkv), k = h.k(h.qkv), v = h.v(h.qkv), o = h.out(h.o);
  auto lse = h.stats(h.lse);
  const double scale = 1.0 / std::sqrt(double(s.head_dim));
  const std::int64_t group = s.heads / s.kv_heads;
  using HeadQuery = std::pair<std::int64_t, std::int64_t>;
  for (const auto& [head, i] : std::array{HeadQuery{0, 0}, HeadQuery{5, 1}, HeadQuery{17, 4000}, HeadQuery{31, 8191}}) {
    SCOPED_TRACE("head " + std::to_string(head) + " query " + std::to_string(i));
    std::vector<double> sc(std::size_t(i + 1));
    double mx = -std::numeric_limits<double>::infinity();
    for (std::int64_t j = 0; j <= i; ++j) {
      double dot = 0;
      for (std::int64_t c = 0; c < s.head_dim; ++c) dot += q(0, i, head, c) * k(0, j, head / group, c);
      sc[std::size_t(j)] = dot * scale;
      mx = std::max(mx, sc[std::size_t(j)]);
    }
    double sum = 0;
    for (double x : sc) sum += std::exp(x - mx);
    const double l = mx + std::log(sum);
    EXPECT_NEAR(lse(0, head, i), l, kLse);
    double num = 0, den = 0;
    for (std::int64_t c = 0; c < s.head_dim; ++c) {
      double ref = 0;
      for (std::int64_t j = 0; j <= i; ++j) ref += std::exp(sc[std::size_t(j)] - l) * v(0, j, head / group, c);
      num += (o(0, i, head, c) - ref) * (o(0, i, head, c) - ref);
      den += ref * ref;
    }
    EXPECT_LT(std::sqrt(num / den), kRelL2);
  }
}

}  // namespace
