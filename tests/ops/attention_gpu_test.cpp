// Tests ops/cuda/attention (cuDNN fused causal GQA attention through cudnn-frontend) against the CPU
// reference ops/cpu/attention in double, on the same bf16 inputs:
//   q, k, v are read in place from one fused QKV buffer [b*s, (H+2G)*d] and dq, dk, dv are written into one
//   fused dQKV buffer (outputs pre-filled with NaN, so anything left unwritten fails), for GQA, MHA, MQA
//   and an odd sequence length; relative L2 error of o, dq, dk, dv < 1e-2, max abs error < 3e-2 of the
//   largest reference value, lse within 1e-3. The reference backward reads the GPU's o (cuDNN's backward
//   uses it for D = rowsum(dO * O)) and its own lse.
//   The check can fail: K and V swapped in the forward, and dk compared with the reference dv, must fail it.
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

namespace {

using tb::DType;
using tb::Shape;
using tb::TensorView;
using namespace tb::ops;

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

// [b, s, heads, d] view with the given strides, starting `col` elements into v.
TensorView<double> heads_view(std::vector<double>& v, std::int64_t col, const AttentionShape& s, std::int64_t heads,
                              const HeadStrides& t) {
  return TensorView<double>(v.data() + col, Shape{s.batch, s.seq, heads, s.head_dim}, Shape{t.batch, t.seq, t.head, 1},
                            4);
}

struct Err {
  double rel_l2 = 0, max_abs = 0, max_ref = 0;
  std::int64_t nonfinite = 0;
};

// Over every element of two views of the same shape (rank 3 or 4).
Err compare(const TensorView<double>& got, const TensorView<double>& ref) {
  Err e;
  double num = 0, den = 0;
  const auto n = [&](int d) { return d < got.rank() ? got.size(d) : std::int64_t(1); };
  for (std::int64_t a = 0; a < n(0); ++a)
    for (std::int64_t b = 0; b < n(1); ++b)
      for (std::int64_t c = 0; c < n(2); ++c)
        for (std::int64_t d = 0; d < n(3); ++d) {
          const double g = got.rank() == 4 ? got(a, b, c, d) : got(a, b, c);
          const double r = ref.rank() == 4 ? ref(a, b, c, d) : ref(a, b, c);
          if (!std::isfinite(g)) ++e.nonfinite;
          num += (g - r) * (g - r);
          den += r * r;
          e.max_abs = std::max(e.max_abs, std::abs(g - r));
          e.max_ref = std::max(e.max_ref, std::abs(r));
        }
  e.rel_l2 = std::sqrt(num / den);
  if (e.nonfinite) e.rel_l2 = e.max_abs = std::numeric_limits<double>::infinity();
  return e;
}

std::string show(const Err& e) {
  return "rel_l2 " + std::to_string(e.rel_l2) + ", max_abs " + std::to_string(e.max_abs) + " (max |ref| " +
         std::to_string(e.max_ref) + "), non-finite " + std::to_string(e.nonfinite);
}

bool close(const Err& e) { return e.nonfinite == 0 && e.rel_l2 < kRelL2 && e.max_abs <= kMaxAbsFrac * e.max_ref; }

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
struct HostCheck {
  AttentionShape s;
  std::int64_t qd, kvd;
  std::vector<double> qkv, o, lse, dout, dqkv;  // from the GPU
  std::vector<double> o_ref, lse_ref, dqkv_ref;  // CPU reference (reference_forward / reference)

  HostCheck(const Problem& p, cudaStream_t stream) : s(p.s), qd(s.heads * s.head_dim), kvd(s.kv_heads * s.head_dim) {
    qkv = download_bf16(p.qkv.get(), fused_qkv_elements(s), stream);
    o = download_bf16(p.o.get(), p.o.bytes() / 2, stream);
    lse = download_f32(p.lse.as<float>(), p.lse.bytes() / sizeof(float), stream);
    dout = download_bf16(p.dout.get(), p.dout.bytes() / 2, stream);
    dqkv = download_bf16(p.dqkv.get(), fused_qkv_elements(s), stream);
  }
  // Views of a fused (d)QKV host buffer, of an o-shaped one, of an lse-shaped one.
  TensorView<double> q(std::vector<double>& buf) { return heads_view(buf, 0, s, s.heads, s.q); }
  TensorView<double> k(std::vector<double>& buf) { return heads_view(buf, qd, s, s.kv_heads, s.k); }
  TensorView<double> v(std::vector<double>& buf) { return heads_view(buf, qd + kvd, s, s.kv_heads, s.v); }
  TensorView<double> out(std::vector<double>& buf) { return heads_view(buf, 0, s, s.heads, s.o); }
  TensorView<double> stats(std::vector<double>& buf) {
    return TensorView<double>(buf.data(), {s.batch, s.heads, s.seq});
  }

  void reference_forward() {
    o_ref.assign(o.size(), 0.0);
    lse_ref.assign(lse.size(), 0.0);
    tb::ops::cpu::attention_forward<double>(out(o_ref), stats(lse_ref), q(qkv), k(qkv), v(qkv));
  }
  void reference() {
    reference_forward();
    dqkv_ref.assign(dqkv.size(), 0.0);
    tb::ops::cpu::attention_backward<double>(q(dqkv_ref), k(dqkv_ref), v(dqkv_ref), out(dout), q(qkv), k(qkv),
                                             v(qkv), out(o), stats(lse_ref));
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
  EXPECT_TRUE(close(o)) << "o: " << show(o);
  EXPECT_EQ(lse.nonfinite, 0);
  EXPECT_LT(lse.max_abs, kLse) << "lse: " << show(lse);
  EXPECT_TRUE(close(dq)) << "dq: " << show(dq);
  EXPECT_TRUE(close(dk)) << "dk: " << show(dk);
  EXPECT_TRUE(close(dv)) << "dv: " << show(dv);

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
    try {
      check_attention_shape(s);
    } catch (const tb::Error& e) {
      EXPECT_EQ(e.kind(), tb::Error::Kind::config);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(fused_qkv_attention(1, 8192, 32, 8, 128)), "no error");
  EXPECT_NE(message(fused_qkv_attention(1, 128, 6, 4, 64)).find("must divide heads"), std::string::npos);
  EXPECT_NE(message(fused_qkv_attention(1, 128, 4, 4, 60)).find("multiple of 8"), std::string::npos);
  EXPECT_NE(message(fused_qkv_attention(0, 128, 4, 4, 64)).find("at least 1"), std::string::npos);
  AttentionShape odd = fused_qkv_attention(1, 128, 4, 4, 64);
  odd.o.seq = 257;
  EXPECT_NE(message(odd).find("multiples of 8"), std::string::npos);
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
