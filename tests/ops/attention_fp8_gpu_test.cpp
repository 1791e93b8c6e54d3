// Tests ops/cuda/attention_fp8 (cuDNN's fused FP8 causal GQA attention) against the CPU reference ops/cpu/attention in
// double, computed on the dequantised FP8 tensors (x = code * descale: exact in double, so the inputs' own
// quantisation is no part of the error):
//   q, k, v: one fused E4M3 QKV buffer [b*s, (H+2G)*d] filled uniformly over [-448, 448], descale 2/448 (values in
//   [-2, 2]: scores with std ~1.3, as in attention_gpu_test); dO over the gradient format's whole range, descale
//   1/fp8_max (values in [-1, 1]); every output pre-filled with NaN codes, so anything left unwritten fails.
//   Two passes, as delayed scaling runs: pass 1 with unit scales for o, dS, dq, dk, dv measures their amaxes; pass 2
//   uses scale = fp8_max / amax / 2 (margin 1: pass 2's o, and so its D and dS, move a little) and is the one
//   compared. The reference backward reads the GPU's o, dequantised (cuDNN's D = rowsum(dO * O) uses it), and the
//   reference lse.
// Bounds, from FP8's unit roundoff u (dtype_eps: e4m3 u4 = 2^-4, e5m2 2^-3; ug = u of the gradient format): every
//   FP8 rounding on an output's path adds a relative error of at most u, RMS about u/sqrt(3) once summed over
//   random-sign terms; the bound on the relative L2 error is twice the RMS of the roundings on the path:
//     o       P (e4m3), o (e4m3)            2 sqrt((u4^2 + u4^2) / 3)   0.102
//     dv      P (e4m3), dv (grad)           2 sqrt((u4^2 + ug^2) / 3)   e5m2 0.161, e4m3 0.102
//     dq, dk  dS (grad), dq or dk (grad)    2 sqrt((ug^2 + ug^2) / 3)   e5m2 0.204, e4m3 0.102
//   max |err| <= 2 x that bound x max |ref| (one element may collect several roundings of one sign); lse within 2e-3
//   (exact FP8 products, but Hopper's FP8 MMAs accumulate with less than fp32's precision, on scores up to ~5);
//   amax_o, amax_dq, amax_dk, amax_dv within the output's bound x max |ref|;
//   amax_s = 1 (query 0 sees only itself: P = 1). The check can fail: dk against the reference dv must fail it.
// Shapes: head_dim 128 with GQA (H=8, G=2) and MHA (H=4), seq 256 and 1024, batch 1 and 2, gradients in e5m2 and
// e4m3. head_dim 64: cuDNN's FP8 backward on Hopper takes only 128, so there the plan must fail with
// Error{unsupported} naming the shape and cuDNN's reason (a GPU whose cuDNN takes it runs the full check instead).
// The errors of every case are printed. Also: plans are cached per shape, bad shapes and pointers are refused with
// config errors before cuDNN is asked. Timing (bf16 vs fp8): bench/lab/attention_fp8_lab.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "bench/sysinfo.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/cpu/attention.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/attention_fp8.h"
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

constexpr double kLse = 2e-3;

// Twice the RMS of the FP8 roundings on a path (see the top of this file).
double bound(std::initializer_list<DType> roundings) {
  double var = 0;
  for (DType t : roundings) var += tb::dtype_eps(t) * tb::dtype_eps(t) / 3;
  return 2 * std::sqrt(var);
}

// ---- scale slots: one device float per 256 bytes (the Fp8Scales layout) ------------------------------

enum Slot : int {
  kQkvDescale, kDoutDescale,
  kOScale, kODescale, kOAmax,
  kSScale, kSDescale, kSAmax,
  kDpScale, kDpDescale, kDpAmax,
  kDqScale, kDqAmax, kDkScale, kDkAmax, kDvScale, kDvAmax,
  kSlots
};
constexpr std::size_t kSlotFloats = 64;

// ---- host side ----------------------------------------------------------------------------------------

std::vector<std::uint8_t> download_bytes(const void* dev, std::size_t n, cudaStream_t stream) {
  std::vector<std::uint8_t> b(n);
  TB_CHECK(cudaMemcpyAsync(b.data(), dev, n, cudaMemcpyDeviceToHost, stream));
  TB_CHECK(cudaStreamSynchronize(stream));
  return b;
}

double decode(DType t, std::uint8_t code) {
  return t == DType::e4m3 ? tb::e4m3_to_float(code) : tb::e5m2_to_float(code);
}

std::string show(const Err& e, double rel_bound) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "rel_l2 %.4f (bound %.3f), max_abs %.3g (%.3f of max |ref| %.3g), non-finite %lld",
                e.rel_l2, rel_bound, e.max_abs, e.max_abs / e.max_ref, e.max_ref, (long long)e.nonfinite);
  return buf;
}

bool close(const Err& e, double rel_bound) {
  return e.nonfinite == 0 && e.rel_l2 < rel_bound && e.max_abs <= 2 * rel_bound * e.max_ref;
}

// ---- one problem on the device ---------------------------------------------------------------------------

struct Fp8Problem {
  Fp8AttentionShape s;
  std::size_t qkv_elems, o_elems, lse_elems;
  DeviceBuffer qkv, o, lse, dout, dqkv, slots;
  QkvPointers in, grad;
  std::vector<float> host = std::vector<float>(kSlots * kSlotFloats, 0.0f);

  Fp8Problem(const DeviceContext& dc, const Fp8AttentionShape& shape)
      : s(shape),
        qkv_elems(fused_qkv_elements(s.attn)),
        o_elems(std::size_t(s.attn.batch * s.attn.seq * s.attn.heads * s.attn.head_dim)),
        lse_elems(std::size_t(s.attn.batch * s.attn.heads * s.attn.seq)),
        qkv(dc.device(), qkv_elems),
        o(dc.device(), o_elems),
        lse(dc.device(), lse_elems * sizeof(float)),
        dout(dc.device(), o_elems),
        dqkv(dc.device(), qkv_elems),
        slots(dc.device(), kSlots * kSlotFloats * sizeof(float)) {
    const float gmax = float(tb::dtype_max(s.grad));
    fill_uniform(qkv.get(), DType::e4m3, qkv_elems, 301, -448.0f, 448.0f, dc.stream());
    fill_uniform(dout.get(), s.grad, o_elems, 302, -gmax, gmax, dc.stream());
    in = split_fused_qkv_fp8(qkv.get(), s.attn);
    grad = split_fused_qkv_fp8(dqkv.get(), s.attn);
    set(kQkvDescale, 2.0f / 448.0f);
    set(kDoutDescale, 1.0f / gmax);
    set(kSScale, kPScale);
    set(kSDescale, 1.0f / kPScale);
    for (Slot x : {kOScale, kODescale, kDpScale, kDpDescale, kDqScale, kDkScale, kDvScale}) set(x, 1.0f);
  }
  float* slot(Slot i) const { return slots.as<float>() + std::size_t(i) * kSlotFloats; }
  void set(Slot i, float v) { host[std::size_t(i) * kSlotFloats] = v; }
  float get(Slot i) const { return host[std::size_t(i) * kSlotFloats]; }

  // Outputs and amaxes to NaN, scales up; then the forward and the backward; amaxes down.
  void run(CudnnFp8Attention& attn, const DeviceContext& dc) {
    for (Slot x : {kOAmax, kSAmax, kDpAmax, kDqAmax, kDkAmax, kDvAmax}) set(x, std::nanf(""));
    TB_CHECK(cudaMemcpyAsync(slots.get(), host.data(), slots.bytes(), cudaMemcpyHostToDevice, dc.stream()));
    for (DeviceBuffer* b : {&o, &lse, &dqkv}) TB_CHECK(cudaMemsetAsync(b->get(), 0xff, b->bytes(), dc.stream()));
    attn.forward(s, forward_args(), dc.stream());
    attn.backward(s, backward_args(), dc.stream());
    TB_CHECK(cudaMemcpyAsync(host.data(), slots.get(), slots.bytes(), cudaMemcpyDeviceToHost, dc.stream()));
    dc.synchronize();
  }
  // Delayed scaling from the last run's amaxes: scale = fp8_max / amax / 2, descale = 1 / scale.
  void rescale() {
    const double gmax = tb::dtype_max(s.grad);
    const auto from = [&](Slot amax, Slot scale, double fmax) {
      const float a = get(amax);
      ASSERT_TRUE(std::isfinite(a) && a > 0) << "amax slot " << int(amax) << " = " << a;
      set(scale, float(fmax / a / 2));
    };
    from(kOAmax, kOScale, 448.0);
    from(kDpAmax, kDpScale, gmax);
    from(kDqAmax, kDqScale, gmax);
    from(kDkAmax, kDkScale, gmax);
    from(kDvAmax, kDvScale, gmax);
    set(kODescale, 1.0f / get(kOScale));
    set(kDpDescale, 1.0f / get(kDpScale));
  }

  Fp8AttentionForwardArgs forward_args() const {
    Fp8AttentionForwardArgs a;
    a.q = {in.q, slot(kQkvDescale)};
    a.k = {in.k, slot(kQkvDescale)};
    a.v = {in.v, slot(kQkvDescale)};
    a.o = {o.get(), slot(kOScale), slot(kOAmax)};
    a.lse = lse.as<float>();
    a.s = {slot(kSScale), slot(kSDescale), slot(kSAmax)};
    return a;
  }
  Fp8AttentionBackwardArgs backward_args() const {
    Fp8AttentionBackwardArgs a;
    a.q = {in.q, slot(kQkvDescale)};
    a.k = {in.k, slot(kQkvDescale)};
    a.v = {in.v, slot(kQkvDescale)};
    a.o = {o.get(), slot(kODescale)};
    a.dout = {dout.get(), slot(kDoutDescale)};
    a.lse = lse.as<float>();
    a.s = {slot(kSScale), slot(kSDescale), nullptr};
    a.dp = {slot(kDpScale), slot(kDpDescale), slot(kDpAmax)};
    a.dq = {grad.q, slot(kDqScale), slot(kDqAmax)};
    a.dk = {grad.k, slot(kDkScale), slot(kDkAmax)};
    a.dv = {grad.v, slot(kDvScale), slot(kDvAmax)};
    return a;
  }
};

// The problem on the host in double: dequantised inputs and GPU outputs, reference outputs.
struct HostCheck : AttentionHostCheck {
  HostCheck(const Fp8Problem& p, cudaStream_t stream) : AttentionHostCheck(p.s.attn) {
    const auto dequant = [&](const DeviceBuffer& b, std::size_t n, DType t, double descale) {
      const std::vector<std::uint8_t> codes = download_bytes(b.get(), n, stream);
      std::vector<double> x(n);
      for (std::size_t i = 0; i < n; ++i) x[i] = decode(t, codes[i]) * descale;
      return x;
    };
    qkv = dequant(p.qkv, p.qkv_elems, DType::e4m3, p.get(kQkvDescale));
    o = dequant(p.o, p.o_elems, DType::e4m3, p.get(kODescale));  // what the backward reads
    dout = dequant(p.dout, p.o_elems, p.s.grad, p.get(kDoutDescale));
    // dq, dk, dv share the fused buffer, each with its own scale: by column within a row.
    const std::vector<std::uint8_t> codes = download_bytes(p.dqkv.get(), p.qkv_elems, stream);
    const std::int64_t row = (s.heads + 2 * s.kv_heads) * s.head_dim;
    dqkv.resize(p.qkv_elems);
    for (std::size_t i = 0; i < codes.size(); ++i) {
      const std::int64_t col = std::int64_t(i) % row;
      const float scale = p.get(col < qd ? kDqScale : col < qd + kvd ? kDkScale : kDvScale);
      dqkv[i] = decode(p.s.grad, codes[i]) / double(scale);
    }
    std::vector<float> l(p.lse_elems);
    TB_CHECK(cudaMemcpyAsync(l.data(), p.lse.get(), p.lse.bytes(), cudaMemcpyDeviceToHost, stream));
    TB_CHECK(cudaStreamSynchronize(stream));
    lse.assign(l.begin(), l.end());
  }
};

// ---- the cases -------------------------------------------------------------------------------------------

struct Case {
  std::int64_t b, s, heads, kv_heads, d;
  DType grad;
  const char* name;
};

class AttentionFp8Gpu : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override { SKIP_WITHOUT_GPU(); }
};

TEST_P(AttentionFp8Gpu, ForwardAndBackwardMatchTheCpuReferenceOnTheDequantisedInputs) {
  const Case& c = GetParam();
  const Fp8AttentionShape shape = fp8_fused_qkv_attention(c.b, c.s, c.heads, c.kv_heads, c.d, c.grad);
  DeviceContext dc(0);
  CudnnFp8Attention attn(0);
  try {
    attn.plan(shape);
  } catch (const tb::Error& e) {
    if (e.kind() == tb::Error::Kind::unsupported && c.d != 128) {
      EXPECT_NE(std::string(e.what()).find(describe(shape)), std::string::npos) << e.what();
      std::printf("[ fp8 attn ] %s: unsupported here, as expected on Hopper: %s\n", c.name, e.what());
      GTEST_SKIP() << e.what();
    }
    FAIL() << e.what();
  }
  SCOPED_TRACE(attn.plan(shape).describe());
  std::printf("[ fp8 attn ] cuDNN %s: %s\n", cudnn_version().c_str(), attn.plan(shape).describe().c_str());

  Fp8Problem p(dc, shape);
  p.run(attn, dc);  // pass 1: unit scales, amaxes measured
  std::printf("[ fp8 attn ] %s pass 1 amax: o %.4g, P %.4g, dS %.4g, dq %.4g, dk %.4g, dv %.4g\n", c.name,
              p.get(kOAmax), p.get(kSAmax), p.get(kDpAmax), p.get(kDqAmax), p.get(kDkAmax), p.get(kDvAmax));
  p.rescale();
  if (HasFatalFailure()) return;
  p.run(attn, dc);  // pass 2: delayed scales from pass 1

  HostCheck h(p, dc.stream());
  h.reference();
  const double bo = bound({DType::e4m3, DType::e4m3}), bv = bound({DType::e4m3, c.grad}),
               bqk = bound({c.grad, c.grad});
  const Err o = compare(h.out(h.o), h.out(h.o_ref));
  const Err lse = compare(h.stats(h.lse), h.stats(h.lse_ref));
  const Err dq = compare(h.q(h.dqkv), h.q(h.dqkv_ref));
  const Err dk = compare(h.k(h.dqkv), h.k(h.dqkv_ref));
  const Err dv = compare(h.v(h.dqkv), h.v(h.dqkv_ref));
  std::printf("[ fp8 attn ] %s\n  o   %s\n  lse max_abs %.3g\n  dq  %s\n  dk  %s\n  dv  %s\n", c.name,
              show(o, bo).c_str(), lse.max_abs, show(dq, bqk).c_str(), show(dk, bqk).c_str(), show(dv, bv).c_str());
  EXPECT_TRUE(close(o, bo)) << "o: " << show(o, bo);
  EXPECT_EQ(lse.nonfinite, 0);
  EXPECT_LT(lse.max_abs, kLse) << "lse max_abs " << lse.max_abs;
  EXPECT_TRUE(close(dq, bqk)) << "dq: " << show(dq, bqk);
  EXPECT_TRUE(close(dk, bqk)) << "dk: " << show(dk, bqk);
  EXPECT_TRUE(close(dv, bv)) << "dv: " << show(dv, bv);

  // The amaxes of pass 2 describe its fp32 results.
  EXPECT_NEAR(p.get(kSAmax), 1.0, 1e-3);
  EXPECT_NEAR(p.get(kOAmax), o.max_ref, bo * o.max_ref);
  EXPECT_NEAR(p.get(kDqAmax), dq.max_ref, bqk * dq.max_ref);
  EXPECT_NEAR(p.get(kDkAmax), dk.max_ref, bqk * dk.max_ref);
  EXPECT_NEAR(p.get(kDvAmax), dv.max_ref, bv * dv.max_ref);
  EXPECT_TRUE(std::isfinite(p.get(kDpAmax)) && p.get(kDpAmax) > 0) << p.get(kDpAmax);

  // The check can fail: dk is not dv.
  EXPECT_FALSE(close(compare(h.k(h.dqkv), h.v(h.dqkv_ref)), bqk));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionFp8Gpu,
    testing::Values(Case{2, 256, 8, 2, 128, DType::e5m2, "gqa_b2_s256_H8_G2_d128_e5m2"},
                    Case{1, 1024, 8, 2, 128, DType::e5m2, "gqa_b1_s1024_H8_G2_d128_e5m2"},
                    Case{2, 256, 4, 4, 128, DType::e5m2, "mha_b2_s256_H4_G4_d128_e5m2"},
                    Case{1, 1024, 4, 4, 128, DType::e5m2, "mha_b1_s1024_H4_G4_d128_e5m2"},
                    Case{2, 256, 8, 2, 128, DType::e4m3, "gqa_b2_s256_H8_G2_d128_e4m3"},
                    Case{1, 1024, 8, 2, 128, DType::e4m3, "gqa_b1_s1024_H8_G2_d128_e4m3"},
                    Case{2, 256, 4, 4, 128, DType::e4m3, "mha_b2_s256_H4_G4_d128_e4m3"},
                    Case{1, 256, 8, 2, 64, DType::e5m2, "gqa_b1_s256_H8_G2_d64_e5m2"}),
    [](const testing::TestParamInfo<Case>& c) { return std::string(c.param.name); });

TEST(AttentionFp8GpuPlans, AreCachedPerShapeAndOwnTheirWorkspace) {
  SKIP_WITHOUT_GPU();
  CudnnFp8Attention attn(0);
  const Fp8AttentionShape a = fp8_fused_qkv_attention(1, 256, 8, 2, 128);
  const Fp8AttentionPlan& p1 = attn.plan(a);
  EXPECT_EQ(&attn.plan(a), &p1);
  const Fp8AttentionShape b = fp8_fused_qkv_attention(1, 256, 8, 2, 128, DType::e4m3);  // another gradient format
  const Fp8AttentionPlan& p2 = attn.plan(b);
  EXPECT_NE(&p2, &p1);
  EXPECT_GE(attn.workspace_bytes(), std::max(p1.workspace_bytes(), p2.workspace_bytes()));
  EXPECT_NE(p1.describe().find("fp8 b=1 s=256 H=8 G=2 d=128 fused-qkv grad e5m2"), std::string::npos)
      << p1.describe();
}

TEST(AttentionFp8GpuPlans, RejectsMisalignedOrMissingPointersAndSmallWorkspace) {
  SKIP_WITHOUT_GPU();
  DeviceContext dc(0);
  CudnnFp8Attention attn(0);
  const Fp8AttentionShape s = fp8_fused_qkv_attention(1, 256, 4, 2, 128);
  Fp8Problem p(dc, s);
  Fp8AttentionForwardArgs a = p.forward_args();
  a.q.data = static_cast<const unsigned char*>(a.q.data) + 8;
  EXPECT_THROW(attn.forward(s, a, dc.stream()), tb::Error);
  a = p.forward_args();
  a.s.amax = nullptr;
  const std::string missing_amax = tb::testing_support::config_error([&] { attn.forward(s, a, dc.stream()); });
  EXPECT_NE(missing_amax.find("P amax"), std::string::npos) << missing_amax;  // "no error": accepted
  const Fp8AttentionPlan& plan = attn.plan(s);
  if (plan.backward_workspace_bytes() > 0) {
    EXPECT_THROW(plan.backward(attn.handle(), p.backward_args(), {nullptr, 0}, dc.stream()), tb::Error);
  }
}

// Host-only checks (no GPU needed).
TEST(AttentionFp8ShapeCheck, RejectsWhatCuDnnsFp8AttentionCannotDoWithConfigErrors) {
  const auto message = [](const Fp8AttentionShape& s) {
    return tb::testing_support::config_error([&] { check_fp8_attention_shape(s); });
  };
  EXPECT_EQ(message(fp8_fused_qkv_attention(1, 8192, 32, 8, 128)), "no error");
  EXPECT_EQ(message(fp8_fused_qkv_attention(1, 8192, 32, 8, 128, DType::e4m3)), "no error");
  EXPECT_NE(message(fp8_fused_qkv_attention(1, 128, 6, 4, 128)).find("must divide heads"), std::string::npos);
  EXPECT_NE(message(fp8_fused_qkv_attention(1, 128, 4, 4, 128, DType::bf16)).find("e5m2 or e4m3"),
            std::string::npos);
  Fp8AttentionShape cp = fp8_fused_qkv_attention(1, 128, 4, 4, 128);
  cp.attn.kv_seq = 512;
  EXPECT_NE(message(cp).find("kv_seq (512) must be 0 or seq"), std::string::npos) << message(cp);
  cp.attn.kv_seq = 128;
  EXPECT_EQ(message(cp), "no error");
  Fp8AttentionShape det = fp8_fused_qkv_attention(1, 128, 4, 4, 128);
  det.attn.deterministic = true;
  EXPECT_NE(message(det).find("deterministic"), std::string::npos) << message(det);
  Fp8AttentionShape odd = fp8_fused_qkv_attention(1, 128, 4, 4, 128);
  odd.attn.o.seq = 4 * 128 + 8;  // a multiple of 8 (fine in bf16) but not of 16
  EXPECT_NE(message(odd).find("multiples of 16 elements"), std::string::npos) << message(odd);
}

TEST(AttentionFp8ShapeCheck, FusedLayoutNamesAndFlops) {
  const Fp8AttentionShape s = fp8_fused_qkv_attention(1, 8192, 32, 8, 128);
  EXPECT_EQ(s.grad, DType::e5m2);
  EXPECT_EQ(s.attn, fused_qkv_attention(1, 8192, 32, 8, 128));
  EXPECT_EQ(describe(s), "fp8 b=1 s=8192 H=32 G=8 d=128 fused-qkv grad e5m2");
  unsigned char buf[16];
  const QkvPointers ptr = split_fused_qkv_fp8(buf, s.attn);
  EXPECT_EQ(static_cast<unsigned char*>(ptr.k) - buf, 32 * 128);
  EXPECT_EQ(static_cast<unsigned char*>(ptr.v) - buf, 40 * 128);
  EXPECT_TRUE(s < fp8_fused_qkv_attention(1, 8192, 32, 8, 128, DType::e4m3) ||
              fp8_fused_qkv_attention(1, 8192, 32, 8, 128, DType::e4m3) < s);  // a different plan-cache key
  EXPECT_NEAR(bound({DType::e4m3, DType::e4m3}), 0.102, 1e-3);
  EXPECT_NEAR(bound({DType::e5m2, DType::e5m2}), 0.204, 1e-3);
}

}  // namespace
