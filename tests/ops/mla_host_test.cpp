// Tests ops/cpu/mla (multi-head latent attention's keys): known values of the broadcast of k_rope to every head on
// strided views (as the decoder passes them: k_nope inside the kv_up output, k_rope inside the kv_down output), the
// backward as the adjoint of the forward (<forward(n, r), R> = <n, backward_nope(R)> + <r, backward_rope(R)>: the sum
// over heads included), and bad shapes raising tb::Error.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "core/error.h"
#include "ops/cpu/mla.h"

namespace {

using tb::Shape;
using tb::TensorView;
using namespace tb::ops::cpu;

std::vector<double> rnd(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(n);
  for (double& x : v) x = u(g);
  return v;
}

constexpr std::int64_t T = 5, H = 3, Dn = 4, Dr = 2, Dv = 3, Rkv = 6;

// k_nope inside a kv_up output [T, H (Dn + Dv)]; k_rope inside a kv_down output [T, Rkv + Dr] (columns Rkv..).
template <class P>
TensorView<P> nope_view(P* kv) {
  return TensorView<P>(kv, Shape{T, H, Dn}, Shape{H * (Dn + Dv), Dn + Dv, 1}, 3);
}
template <class P>
TensorView<P> rope_view(P* down) {
  return TensorView<P>(down + Rkv, Shape{T, Dr}, Shape{Rkv + Dr, 1}, 2);
}

TEST(MlaKeys, ForwardCopiesNopeAndBroadcastsRope) {
  std::vector<double> kv = rnd(T * H * (Dn + Dv), 1), down = rnd(T * (Rkv + Dr), 2), k(T * H * (Dn + Dr), -7.0);
  mla_k_forward<double>(TensorView<double>(k.data(), {T, H, Dn + Dr}), nope_view<const double>(kv.data()),
                        rope_view<const double>(down.data()));
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t h = 0; h < H; ++h) {
      const double* row = k.data() + (t * H + h) * (Dn + Dr);
      for (std::int64_t i = 0; i < Dn; ++i) ASSERT_EQ(row[i], kv[std::size_t(t * H * (Dn + Dv) + h * (Dn + Dv) + i)]);
      for (std::int64_t i = 0; i < Dr; ++i) ASSERT_EQ(row[Dn + i], down[std::size_t(t * (Rkv + Dr) + Rkv + i)]);
    }
}

TEST(MlaKeys, BackwardIsTheAdjointOfTheForward) {
  std::vector<double> kv = rnd(T * H * (Dn + Dv), 3), down = rnd(T * (Rkv + Dr), 4), k(T * H * (Dn + Dr));
  const std::vector<double> R = rnd(k.size(), 5);
  mla_k_forward<double>(TensorView<double>(k.data(), {T, H, Dn + Dr}), nope_view<const double>(kv.data()),
                        rope_view<const double>(down.data()));
  std::vector<double> dkv(kv.size(), 9.0), ddown(down.size(), 9.0);
  mla_k_backward<double>(nope_view(dkv.data()), rope_view(ddown.data()),
                         TensorView<const double>(R.data(), {T, H, Dn + Dr}));
  double lhs = 0, rhs = 0;
  for (std::size_t i = 0; i < k.size(); ++i) lhs += k[i] * R[i];
  for (std::int64_t t = 0; t < T; ++t) {
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < Dn; ++i) {
        const std::size_t at = std::size_t(t * H * (Dn + Dv) + h * (Dn + Dv) + i);
        rhs += kv[at] * dkv[at];
      }
    for (std::int64_t i = 0; i < Dr; ++i) {
      const std::size_t at = std::size_t(t * (Rkv + Dr) + Rkv + i);
      rhs += down[at] * ddown[at];
    }
  }
  EXPECT_NEAR(lhs, rhs, 1e-12 * std::abs(lhs));
  // outside the views nothing is written
  EXPECT_EQ(dkv[Dn], 9.0);  // token 0, head 0: the first v column
  EXPECT_EQ(ddown[0], 9.0);
}

TEST(MlaKeys, BadShapesRaise) {
  std::vector<double> k(T * H * (Dn + Dr)), n(T * H * Dn), r(T * Dr);
  auto nope = TensorView<const double>(n.data(), {T, H, Dn});
  EXPECT_THROW(mla_k_forward<double>(TensorView<double>(k.data(), {T, H, Dn + Dr - 1}), nope,
                                     TensorView<const double>(r.data(), {T, Dr})),
               tb::Error);
  EXPECT_THROW(mla_k_forward<double>(TensorView<double>(k.data(), {T, H, Dn + Dr}), nope,
                                     TensorView<const double>(r.data(), {T - 1, Dr})),
               tb::Error);
}

}  // namespace
