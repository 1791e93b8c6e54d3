// Tests ops/cuda/mla (multi-head latent attention's keys) on one GPU against the CPU reference ops/cpu/mla in double
// on the SAME bf16 inputs (the device inputs copied back and decoded), in the MLA layer's layout: k_nope inside a kv_up
// output [T, H (Dn + Dv)], k_rope inside a kv_down output [T, Rkv + Dr], k and dk [T, H, Dn + Dr] contiguous:
//   forward: k bit for bit (a copy and a broadcast);
//   backward: dk_nope bit for bit, dk_rope (an fp32 sum over the heads, one rounding) within one bf16 rounding of the
//   double sum, |got - ref| <= 2^-8 |ref| + 1e-6; the rest of the kv_up and kv_down buffers (v columns, c_kv columns)
//   left untouched bit for bit;
//   shapes: DeepSeek-V3's (H 16 of 128, Dn 128, Dr 64, Dv 128, Rkv 512) at 1000 tokens, and a small one (H 3, Dn 8,
//   Dr 16, Dv 8, Rkv 8, 7 tokens); misaligned views refused with config errors.
// Outputs are poisoned first (0xFF bytes: NaN), so an unwritten element fails; the checks are shown to fail on one
// corrupted element. Skips cleanly without a GPU.
#include <gtest/gtest.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "bench/sysinfo.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/cpu/mla.h"
#include "ops/cuda/fill.h"
#include "ops/cuda/mla.h"
#include "../support/config_error.h"

namespace {

using tb::Shape;
using tb::TensorView;
using bf16 = __nv_bfloat16;
using Vec = std::vector<double>;

#define SKIP_WITHOUT_GPU() \
  if (tb::bench::visible_gpu_count() == 0) GTEST_SKIP() << tb::bench::no_gpu_reason()

struct Dims {
  std::int64_t t, h, dn, dr, dv, rkv;
  const char* name = "";
  std::int64_t kvw() const { return h * (dn + dv); }
  std::int64_t downw() const { return rkv + dr; }
  std::int64_t kw() const { return h * (dn + dr); }
};

class Buf {
 public:
  explicit Buf(std::size_t n) : n_(n) { TB_CHECK(cudaMalloc(&p_, n * sizeof(bf16))); }
  ~Buf() { cudaFree(p_); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  bf16* get() const { return p_; }
  void fill(std::uint64_t seed) { tb::ops::fill_uniform(p_, tb::DType::bf16, n_, seed, -2.f, 2.f, nullptr); }
  void poison() { TB_CHECK(cudaMemset(p_, 0xff, n_ * sizeof(bf16))); }
  std::vector<std::uint16_t> bits() const {
    TB_CHECK(cudaDeviceSynchronize());
    std::vector<std::uint16_t> b(n_);
    TB_CHECK(cudaMemcpy(b.data(), p_, n_ * 2, cudaMemcpyDeviceToHost));
    return b;
  }
  Vec values() const {
    const std::vector<std::uint16_t> b = bits();
    Vec v(b.size());
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = tb::bf16_to_float(b[i]);
    return v;
  }

 private:
  bf16* p_ = nullptr;
  std::size_t n_;
};

// The layer's views (device or host) of k_nope in kv, k_rope in down, k.
template <class P>
TensorView<P> nope(P* kv, const Dims& d) {
  return TensorView<P>(kv, Shape{d.t, d.h, d.dn, 0}, Shape{d.kvw(), d.dn + d.dv, 1, 0}, 3);
}
template <class P>
TensorView<P> rope(P* down, const Dims& d) {
  return TensorView<P>(down + d.rkv, Shape{d.t, d.dr, 0, 0}, Shape{d.downw(), 1, 0, 0}, 2);
}
template <class P>
TensorView<P> keys(P* k, const Dims& d) {
  return TensorView<P>(k, Shape{d.t, d.h, d.dn + d.dr, 0}, Shape{d.kw(), d.dn + d.dr, 1, 0}, 3);
}

// Elements where got and want differ by more than 2^-8 |want| + 1e-6 (exact: bit for bit).
std::int64_t mismatches(const Vec& got, const Vec& want, bool exact) {
  std::int64_t bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double tol = exact ? 0.0 : std::ldexp(std::abs(want[i]), -8) + 1e-6;
    bad += !(std::abs(got[i] - want[i]) <= tol);
  }
  return bad;
}

class MlaKeysGpu : public testing::TestWithParam<Dims> {
 protected:
  void SetUp() override { SKIP_WITHOUT_GPU(); }
};

TEST_P(MlaKeysGpu, ForwardAndBackwardMatchTheCpuReference) {
  const Dims d = GetParam();
  Buf kv(std::size_t(d.t * d.kvw())), down(std::size_t(d.t * d.downw())), k(std::size_t(d.t * d.kw()));
  kv.fill(11), down.fill(12), k.poison();
  tb::ops::mla_k_forward(keys(k.get(), d), nope<const bf16>(kv.get(), d), rope<const bf16>(down.get(), d), nullptr);
  Vec hkv = kv.values(), hdown = down.values(), want(std::size_t(d.t * d.kw()));
  tb::ops::cpu::mla_k_forward<double>(keys(want.data(), d), nope<const double>(hkv.data(), d),
                                      rope<const double>(hdown.data(), d));
  Vec got = k.values();
  EXPECT_EQ(mismatches(got, want, true), 0) << "k";
  got[got.size() / 2] += 1.0;  // the check can fail
  EXPECT_EQ(mismatches(got, want, true), 1);

  // backward: dk random; dkv and ddown hold random values outside the views, which must survive
  Buf dk(std::size_t(d.t * d.kw())), dkv(std::size_t(d.t * d.kvw())), ddown(std::size_t(d.t * d.downw()));
  dk.fill(13), dkv.fill(14), ddown.fill(15);
  const Vec before_kv = dkv.values(), before_down = ddown.values();
  tb::ops::mla_k_backward(nope(dkv.get(), d), rope(ddown.get(), d), keys<const bf16>(dk.get(), d), nullptr);
  Vec hdk = dk.values(), want_kv = before_kv, want_down = before_down;
  tb::ops::cpu::mla_k_backward<double>(nope(want_kv.data(), d), rope(want_down.data(), d),
                                       keys<const double>(hdk.data(), d));
  const Vec got_kv = dkv.values(), got_down = ddown.values();
  EXPECT_EQ(mismatches(got_kv, want_kv, true), 0) << "dk_nope (and the v columns untouched)";
  // dk_rope: one bf16 rounding of an fp32 sum; the c_kv columns untouched bit for bit
  Vec rope_got, rope_want, rest_got, rest_want;
  for (std::int64_t t = 0; t < d.t; ++t)
    for (std::int64_t c = 0; c < d.downw(); ++c) {
      const std::size_t i = std::size_t(t * d.downw() + c);
      (c < d.rkv ? rest_got : rope_got).push_back(got_down[i]);
      (c < d.rkv ? rest_want : rope_want).push_back(want_down[i]);
    }
  EXPECT_EQ(mismatches(rope_got, rope_want, false), 0) << "dk_rope";
  EXPECT_EQ(mismatches(rest_got, rest_want, true), 0) << "c_kv columns";
  rope_got[0] += 0.1 * std::abs(rope_want[0]) + 0.1;
  EXPECT_EQ(mismatches(rope_got, rope_want, false), 1);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MlaKeysGpu,
                         testing::Values(Dims{1000, 16, 128, 64, 128, 512, "deepseek_v3_heads16"},
                                         Dims{7, 3, 8, 16, 8, 8, "small"}),
                         [](const testing::TestParamInfo<Dims>& p) { return std::string(p.param.name); });

TEST(MlaKeysGpu, MisalignedViewsAreRefused) {
  SKIP_WITHOUT_GPU();
  const Dims d{4, 2, 8, 16, 8, 8, "aligned"};
  Buf kv(std::size_t(d.t * d.kvw())), down(std::size_t(d.t * d.downw())), k(std::size_t(d.t * d.kw()));
  const Dims odd{4, 2, 4, 16, 12, 8, "odd"};  // Dn 4: 8-byte rows of k_nope
  const std::string m = tb::testing_support::config_error([&] {
    tb::ops::mla_k_forward(keys(k.get(), odd), nope<const bf16>(kv.get(), odd), rope<const bf16>(down.get(), odd),
                           nullptr);
  });
  EXPECT_NE(m.find("multiples of 8"), std::string::npos) << m;
  const std::string n = tb::testing_support::config_error([&] {
    tb::ops::mla_k_forward(TensorView<bf16>(k.get(), {d.t, d.h, d.dn + d.dr - 8}), nope<const bf16>(kv.get(), d),
                           rope<const bf16>(down.get(), d), nullptr);
  });
  EXPECT_NE(n.find("must be [tokens, heads, Dn + Dr]"), std::string::npos) << n;
}

}  // namespace
