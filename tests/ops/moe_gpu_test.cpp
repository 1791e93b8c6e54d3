// Tests ops/cuda/moe against ops/cpu/moe (double) on the same random inputs (fp32 logits, bf16 activations), n = 700
// tokens in sequences of 100, so the pairs span several dispatch chunks:
//   - route, for softmax and sigmoid scores, normalised or not (scale 2.5), learned and balanced, E = 16 k = 3 and
//     E = 256 k = 8, with and without an expert bias: the chosen experts exactly (in order), the weights,
//     probabilities and lse to fp32 rounding, the per-sequence counts exactly; the bias update;
//   - dispatch: each expert's start a multiple of 16, its count, and every pair's row exactly the CPU's row (in
//     (t, j) order within an expert) shifted to the expert's start; also for a proxy's 4 held experts (e mod 4), and
//     with a capacity (the pairs the CPU drops, dropped; padded: every held expert's rows at its fixed start);
//   - permute exactly and the padding rows zeroed; unpermute, with and without accumulation, and both backwards to
//     bf16 rounding;
//   - the router backward (weights, aux and sequence-aux losses, z-loss) against the CPU chain, to bf16 rounding of
//     dlogits; the losses' values and tokens per expert.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "bench/sysinfo.h"
#include "core/dtype.h"
#include "ops/cpu/moe.h"
#include "ops/cuda/context.h"
#include "ops/cuda/moe.h"

namespace {

namespace cpu = tb::ops::cpu;
using tb::TensorView;
using tb::ops::DeviceBuffer;
using Vec = std::vector<double>;

#define SKIP_WITHOUT_GPU() \
  if (tb::bench::visible_gpu_count() == 0) GTEST_SKIP() << tb::bench::no_gpu_reason()

constexpr int kN = 700, kSeq = 100, kD = 64;

template <class T>
DeviceBuffer upload(const std::vector<T>& v) {
  DeviceBuffer b(0, std::max<std::size_t>(v.size(), 1) * sizeof(T));
  cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
  return b;
}
template <class T>
std::vector<T> download(const DeviceBuffer& b, std::size_t n) {
  std::vector<T> v(n);
  cudaDeviceSynchronize();
  cudaMemcpy(v.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost);
  return v;
}

float round_bf16(double x) { return tb::bf16_to_float(tb::float_to_bf16(float(x))); }
std::vector<std::uint16_t> to_bf16(const Vec& v) {
  std::vector<std::uint16_t> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = tb::float_to_bf16(float(v[i]));
  return out;
}
Vec from_bf16(const std::vector<std::uint16_t>& v) {
  Vec out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = tb::bf16_to_float(v[i]);
  return out;
}
Vec random_vec(std::size_t n, std::uint64_t seed, bool bf16) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> u(0, 1);
  Vec v(n);
  for (double& x : v) x = bf16 ? round_bf16(u(g)) : double(float(u(g)));
  return v;
}
double max_abs(const Vec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

struct Case {
  int E, k;
  tb::ops::MoeScore score;
  bool normalize, balanced;
  int held = 0;  // > 0: a proxy's held experts (dispatch by e mod held)
  int capacity = 0;
  bool pad = false;
  bool bias = false;  // an expert bias in the choice (aux-loss-free balancing)
};

// One case: the GPU's routing against the CPU's, then everything downstream of it.
void check(const Case& c) {
  SCOPED_TRACE("E " + std::to_string(c.E) + " k " + std::to_string(c.k) +
               (c.score == tb::ops::MoeScore::softmax ? " softmax" : " sigmoid") + (c.normalize ? " normalize" : "") +
               (c.balanced ? " balanced" : "") + (c.held ? " held " + std::to_string(c.held) : "") +
               (c.capacity ? " capacity " + std::to_string(c.capacity) : "") + (c.pad ? " padded" : "") +
               (c.bias ? " bias" : ""));
  const int E = c.E, k = c.k, B = kN / kSeq, H = c.held > 0 ? c.held : E;
  tb::ops::MoeRouting r;
  r.tokens = kN, r.experts = E, r.k = k, r.seq = kSeq, r.score = c.score, r.normalize = c.normalize, r.scale = 2.5f;
  r.balanced = c.balanced, r.token0 = 0, r.held = c.held, r.capacity = c.capacity, r.pad = c.pad;
  const Vec logits = random_vec(std::size_t(kN * E), 1, false);
  // CPU
  const cpu::Score sc = c.score == tb::ops::MoeScore::softmax ? cpu::Score::softmax : cpu::Score::sigmoid;
  cpu::RouteOptions opt{.k = k, .score = sc, .normalize = c.normalize, .scale = 2.5, .balanced = c.balanced};
  const Vec bias = random_vec(std::size_t(E), 11, false);  // N(0, 1), float values: moves many choices
  DeviceBuffer dbias = upload(std::vector<float>(bias.begin(), bias.end()));
  if (c.bias) opt.bias = bias, r.bias = dbias.as<float>();
  Vec s(logits.size()), p(logits.size());
  cpu::router_scores<double>(sc, TensorView<double>(s.data(), {kN, E}),
                             TensorView<const double>(logits.data(), {kN, E}));
  cpu::router_probs<double>(sc, TensorView<double>(p.data(), {kN, E}), TensorView<const double>(s.data(), {kN, E}));
  std::vector<std::int64_t> ids(kN);
  for (int t = 0; t < kN; ++t) ids[std::size_t(t)] = t;
  cpu::Routes<double> routes;
  cpu::route<double>(routes, TensorView<const double>(s.data(), {kN, E}), opt, ids);
  cpu::Routes<double> held = routes;  // the dispatch's experts: the kept pairs' held experts
  const std::int64_t dropped = c.capacity ? cpu::drop_over_capacity(held, c.capacity) : 0;
  held.experts = H;
  for (auto& e : held.expert)
    if (e >= 0) e %= H;
  const cpu::Dispatch D = cpu::make_dispatch(held);
  // GPU route
  std::vector<float> lf(logits.begin(), logits.end());
  DeviceBuffer dlog = upload(lf), dexp(0, 4 * kN * k), dw(0, 4 * kN * k), dcounts(0, 4 * B * E), dprobs(0, 4 * kN * E),
               dlse(0, 4 * kN);
  cudaStream_t st = nullptr;
  tb::ops::moe_route(
      r, dlog.as<float>(),
      {dexp.as<std::int32_t>(), dw.as<float>(), dcounts.as<std::int32_t>(), dprobs.as<float>(), dlse.as<float>()}, st);
  const auto expert = download<std::int32_t>(dexp, std::size_t(kN * k));
  const auto weight = download<float>(dw, std::size_t(kN * k));
  const auto counts = download<std::int32_t>(dcounts, std::size_t(B * E));
  const auto probs = download<float>(dprobs, std::size_t(kN * E));
  const auto lse = download<float>(dlse, kN);
  ASSERT_EQ(std::vector<std::int32_t>(routes.expert.begin(), routes.expert.end()), expert);
  for (std::size_t i = 0; i < weight.size(); ++i) ASSERT_NEAR(weight[i], routes.weight[i], 2e-6 * 2.5) << "pair " << i;
  for (std::size_t i = 0; i < probs.size(); ++i) ASSERT_NEAR(probs[i], p[i], 1e-6) << i;
  for (int t = 0; t < kN; ++t) {
    double m = -1e300, sum = 0;
    for (int e = 0; e < E; ++e) m = std::max(m, logits[std::size_t(t * E + e)]);
    for (int e = 0; e < E; ++e) sum += std::exp(logits[std::size_t(t * E + e)] - m);
    ASSERT_NEAR(lse[std::size_t(t)], m + std::log(sum), 2e-6 * (1 + std::abs(m))) << "token " << t;
  }
  std::vector<std::int32_t> want_counts(std::size_t(B * E), 0);
  for (int t = 0; t < kN; ++t)
    for (int j = 0; j < k; ++j) ++want_counts[std::size_t((t / kSeq) * E + routes.expert[std::size_t(t * k + j)])];
  EXPECT_EQ(counts, want_counts);

  // dispatch
  DeviceBuffer drow(0, 4 * kN * k), dstart(0, 4 * (H + 1)), dcount(0, 4 * H),
      dscratch(0, 4 * tb::ops::moe_dispatch_scratch(r)), ddropped = upload(std::vector<double>{1.0});
  tb::ops::moe_dispatch(r, dexp.as<std::int32_t>(), dw.as<float>(),
                        {drow.as<std::int32_t>(), dstart.as<std::int32_t>(), dcount.as<std::int32_t>(),
                         dscratch.as<std::int32_t>(), ddropped.as<double>()},
                        st);
  EXPECT_EQ(download<double>(ddropped, 1)[0] - 1, double(dropped));  // added to what is there
  if (c.capacity) {
    EXPECT_GT(dropped, 0) << "a capacity that drops nothing tests nothing";
  }
  const auto row = download<std::int32_t>(drow, std::size_t(kN * k));
  const auto start = download<std::int32_t>(dstart, std::size_t(H + 1));
  const auto count = download<std::int32_t>(dcount, std::size_t(H));
  for (int e = 0; e < H; ++e) {
    EXPECT_EQ(start[std::size_t(e)] % tb::ops::kMoeRowAlign, 0) << "expert " << e;
    EXPECT_EQ(count[std::size_t(e)], D.offsets[std::size_t(e + 1)] - D.offsets[std::size_t(e)]) << "expert " << e;
    EXPECT_GE(start[std::size_t(e + 1)] - start[std::size_t(e)], count[std::size_t(e)]);
    if (c.pad) {
      EXPECT_EQ(start[std::size_t(e)], e * r.padded_rows());
    }
    for (std::int64_t cr = D.offsets[std::size_t(e)]; cr < D.offsets[std::size_t(e + 1)]; ++cr)
      ASSERT_EQ(row[std::size_t(D.pair[std::size_t(cr)])], start[std::size_t(e)] + (cr - D.offsets[std::size_t(e)]))
          << "expert " << e;
  }
  EXPECT_LE(start[std::size_t(H)], r.rows());
  // the GPU row of CPU row cr
  auto gpu_row = [&](std::int64_t cr) { return row[std::size_t(D.pair[std::size_t(cr)])]; };

  // permute, unpermute
  const std::int64_t R = r.rows(), rows = D.rows();
  const Vec x = random_vec(std::size_t(kN * kD), 2, true), y0 = random_vec(std::size_t(kN * kD), 3, true);
  Vec o_cpu = random_vec(std::size_t(rows * kD), 4, true);
  std::vector<std::uint16_t> o_gpu(std::size_t(R * kD), 0);
  for (std::int64_t cr = 0; cr < rows; ++cr)
    for (int i = 0; i < kD; ++i)
      o_gpu[std::size_t(gpu_row(cr) * kD + i)] = tb::float_to_bf16(float(o_cpu[std::size_t(cr * kD + i)]));
  DeviceBuffer dx = upload(to_bf16(x)), dxp(0, 2 * R * kD), dout = upload(o_gpu), dy = upload(to_bf16(y0));
  ASSERT_EQ(cudaMemset(dxp.get(), 0x3f, std::size_t(2 * R * kD)), cudaSuccess);  // poison: 0x3f3f is 0.746
  tb::ops::moe_permute(dxp.as<tb::ops::bf16>(), dx.as<tb::ops::bf16>(), drow.as<std::int32_t>(), kN, k, kD, st);
  tb::ops::moe_zero_padding(dxp.as<tb::ops::bf16>(), dstart.as<std::int32_t>(), dcount.as<std::int32_t>(), H, kD, st);
  const Vec xp = from_bf16(download<std::uint16_t>(dxp, std::size_t(R * kD)));
  for (std::int64_t cr = 0; cr < rows; ++cr)
    for (int i = 0; i < kD; ++i)
      ASSERT_EQ(xp[std::size_t(gpu_row(cr) * kD + i)], x[std::size_t(D.pair[std::size_t(cr)] / k * kD + i)]);
  for (int e = 0; e < H; ++e)  // the padding past each held expert's pairs
    for (std::int64_t pr = start[std::size_t(e)] + count[std::size_t(e)]; pr < start[std::size_t(e + 1)]; ++pr)
      for (int i = 0; i < kD; ++i) ASSERT_EQ(xp[std::size_t(pr * kD + i)], 0.0) << "padding row " << pr;
  for (bool accumulate : {false, true}) {
    Vec want = accumulate ? y0 : Vec(y0.size(), 0.0);
    cpu::unpermute<double>(TensorView<double>(want.data(), {kN, kD}),
                           TensorView<const double>(o_cpu.data(), {rows, kD}), D, routes);
    DeviceBuffer dyy = upload(to_bf16(y0));
    tb::ops::moe_unpermute(dyy.as<tb::ops::bf16>(), dout.as<tb::ops::bf16>(), drow.as<std::int32_t>(), dw.as<float>(),
                           kN, k, kD, accumulate, st);
    const Vec got = from_bf16(download<std::uint16_t>(dyy, std::size_t(kN * kD)));
    for (std::size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 8e-3 * (1 + std::abs(want[i]))) << "accumulate " << accumulate << " " << i;
  }
  // unpermute backward: dop (over o), dw
  {
    Vec dop(std::size_t(rows * kD)), dwt(routes.weight.size());
    cpu::unpermute_backward<double>(TensorView<double>(dop.data(), {rows, kD}), dwt,
                                    TensorView<const double>(y0.data(), {kN, kD}),
                                    TensorView<const double>(o_cpu.data(), {rows, kD}), D, routes);
    DeviceBuffer ddw(0, 4 * kN * k), dcopy = upload(o_gpu);
    tb::ops::moe_unpermute_backward(dcopy.as<tb::ops::bf16>(), ddw.as<float>(), dy.as<tb::ops::bf16>(),
                                    dcopy.as<tb::ops::bf16>(), drow.as<std::int32_t>(), dw.as<float>(), kN, k, kD, st);
    const Vec gop = from_bf16(download<std::uint16_t>(dcopy, std::size_t(R * kD)));
    const auto gdw = download<float>(ddw, std::size_t(kN * k));
    for (std::size_t i = 0; i < dwt.size(); ++i) ASSERT_NEAR(gdw[i], dwt[i], 1e-4 * (1 + std::abs(dwt[i]))) << i;
    for (std::int64_t cr = 0; cr < rows; ++cr)
      for (int i = 0; i < kD; ++i) {
        const double want = dop[std::size_t(cr * kD + i)];
        ASSERT_NEAR(gop[std::size_t(gpu_row(cr) * kD + i)], want, 8e-3 * (1 + std::abs(want)));
      }
  }
  // permute backward
  for (bool accumulate : {false, true}) {
    Vec g_cpu = random_vec(std::size_t(rows * kD), 5, true);
    std::vector<std::uint16_t> g_gpu(std::size_t(R * kD), 0);
    for (std::int64_t cr = 0; cr < rows; ++cr)
      for (int i = 0; i < kD; ++i)
        g_gpu[std::size_t(gpu_row(cr) * kD + i)] = tb::float_to_bf16(float(g_cpu[std::size_t(cr * kD + i)]));
    Vec want = accumulate ? y0 : Vec(y0.size(), 0.0);
    Vec part(y0.size());
    cpu::permute_backward<double>(TensorView<double>(part.data(), {kN, kD}),
                                  TensorView<const double>(g_cpu.data(), {rows, kD}), D, k);
    for (std::size_t i = 0; i < want.size(); ++i) want[i] += part[i];
    DeviceBuffer dg = upload(g_gpu), ddx = upload(to_bf16(y0));
    tb::ops::moe_permute_backward(ddx.as<tb::ops::bf16>(), dg.as<tb::ops::bf16>(), drow.as<std::int32_t>(), kN, k, kD,
                                  accumulate, st);
    const Vec got = from_bf16(download<std::uint16_t>(ddx, std::size_t(kN * kD)));
    for (std::size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 8e-3 * (1 + std::abs(want[i]))) << i;
  }

  // router backward: dw random; aux 0.3, sequence aux 0.2, z 0.1, grad_scale 0.5
  const double aux = 0.3, seq_aux = 0.2, z = 0.1, gs = 0.5;
  const Vec dwr = random_vec(std::size_t(kN * k), 6, false);
  Vec ds(logits.size()), dp(logits.size()), dl(logits.size());
  cpu::weights_backward<double>(TensorView<double>(ds.data(), {kN, E}), TensorView<const double>(s.data(), {kN, E}),
                                routes, dwr, opt);
  std::vector<double> ctot(std::size_t(E), 0);
  for (int b = 0; b < B; ++b)
    for (int e = 0; e < E; ++e) ctot[std::size_t(e)] += want_counts[std::size_t(b * E + e)];
  const double T = kN;
  for (int t = 0; t < kN; ++t)
    for (int e = 0; e < E; ++e)
      dp[std::size_t(t * E + e)] =
          gs * (aux * E * ctot[std::size_t(e)] / (T * T * k) +
                seq_aux * want_counts[std::size_t((t / kSeq) * E + e)] * E / double(k * kSeq) / double(B * kSeq));
  cpu::probs_backward<double>(sc, TensorView<double>(ds.data(), {kN, E}), TensorView<const double>(s.data(), {kN, E}),
                              TensorView<const double>(dp.data(), {kN, E}));
  cpu::scores_backward<double>(sc, TensorView<double>(dl.data(), {kN, E}), TensorView<const double>(s.data(), {kN, E}),
                               TensorView<const double>(ds.data(), {kN, E}));
  cpu::z_loss_backward<double>(TensorView<double>(dl.data(), {kN, E}), TensorView<const double>(logits.data(), {kN, E}),
                               gs * z / T);
  std::vector<float> dwf(dwr.begin(), dwr.end());
  DeviceBuffer ddwr = upload(dwf), ddl(0, 2 * kN * E);
  tb::ops::moe_router_backward(r, ddl.as<tb::ops::bf16>(), dlog.as<float>(), dexp.as<std::int32_t>(), ddwr.as<float>(),
                               dcounts.as<std::int32_t>(), tb::ops::moe_loss_coefficients(r, aux, seq_aux, z, gs), st);
  const Vec gdl = from_bf16(download<std::uint16_t>(ddl, std::size_t(kN * E)));
  const double scale = max_abs(dl);
  ASSERT_GT(scale, 0);
  for (std::size_t i = 0; i < dl.size(); ++i) ASSERT_NEAR(gdl[i], dl[i], 5e-3 * std::abs(dl[i]) + 1e-4 * scale) << i;

  // the losses' values
  double want_aux = 0, want_seq = 0, want_z = 0;
  for (int e = 0; e < E; ++e) {
    double P = 0;
    for (int t = 0; t < kN; ++t) P += p[std::size_t(t * E + e)];
    want_aux += ctot[std::size_t(e)] * P;
    for (int b = 0; b < B; ++b) {
      double Pb = 0;
      for (int t = b * kSeq; t < (b + 1) * kSeq; ++t) Pb += p[std::size_t(t * E + e)];
      want_seq += want_counts[std::size_t(b * E + e)] * double(E) / double(k * kSeq) * Pb / kSeq;
    }
  }
  want_aux *= double(E) / (T * T * k), want_seq /= B;
  want_z = cpu::z_loss<double>(TensorView<const double>(logits.data(), {kN, E})) / T;
  std::vector<double> zero(std::size_t(3 + E), 1.0);  // accumulates onto what is there
  DeviceBuffer dstats = upload(zero), dls(0, 4 * tb::ops::moe_losses_scratch(r));
  tb::ops::moe_losses(r, dcounts.as<std::int32_t>(), dprobs.as<float>(), dlse.as<float>(), dstats.as<double>(),
                      dls.as<float>(), st);
  const auto stats = download<double>(dstats, std::size_t(3 + E));
  EXPECT_NEAR(stats[0] - 1, want_aux, 1e-5 * want_aux);
  EXPECT_NEAR(stats[1] - 1, want_seq, 1e-5 * want_seq);
  EXPECT_NEAR(stats[2] - 1, want_z, 1e-5 * want_z);
  for (int e = 0; e < E; ++e) EXPECT_EQ(stats[std::size_t(3 + e)] - 1, ctot[std::size_t(e)]);
}

TEST(MoeCuda, MatchesTheCpuReference) {
  SKIP_WITHOUT_GPU();
  using tb::ops::MoeScore;
  for (const Case& c : {Case{16, 3, MoeScore::softmax, true, false}, Case{16, 3, MoeScore::softmax, false, false},
                        Case{16, 3, MoeScore::sigmoid, true, false}, Case{16, 3, MoeScore::sigmoid, false, true},
                        Case{256, 8, MoeScore::sigmoid, true, false}, Case{256, 8, MoeScore::softmax, true, true},
                        Case{16, 3, MoeScore::softmax, true, false, 4}, Case{256, 8, MoeScore::sigmoid, true, false, 4},
                        Case{16, 3, MoeScore::softmax, true, false, 0, 100}, Case{16, 3, MoeScore::sigmoid, true, false, 0, 120, true},
                        Case{16, 3, MoeScore::softmax, false, false, 4, 110, true},
                        Case{16, 3, MoeScore::sigmoid, true, false, 0, 0, false, true},
                        Case{256, 8, MoeScore::sigmoid, true, false, 0, 0, false, true}})
    check(c);
}

TEST(MoeCuda, ExpertBiasUpdateMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  const int E = 64;
  const Vec b0 = random_vec(E, 12, false), load = random_vec(E, 13, false);
  std::vector<float> bf(b0.begin(), b0.end()), lf(E);
  for (int e = 0; e < E; ++e) lf[std::size_t(e)] = std::round(float(50 + 40 * std::abs(load[std::size_t(e)])));
  lf[3] = lf[5] = 0, lf[7] = 0;
  DeviceBuffer db = upload(bf), dl = upload(lf);
  tb::ops::moe_update_expert_bias(db.as<float>(), dl.as<float>(), E, 0.001f, nullptr);
  std::vector<double> want(bf.begin(), bf.end());
  cpu::update_expert_bias(want, std::vector<double>(lf.begin(), lf.end()), 0.001);
  const auto got = download<float>(db, E), zeroed = download<float>(dl, E);
  for (int e = 0; e < E; ++e) {
    EXPECT_NEAR(got[std::size_t(e)], want[std::size_t(e)], 1e-6) << "expert " << e;
    EXPECT_EQ(zeroed[std::size_t(e)], 0.f);
  }
}

TEST(MoeCuda, RefusesShapesOutsideTheKernelsLimits) {
  tb::ops::MoeRouting r;
  r.tokens = 64, r.seq = 64, r.k = 2;
  for (int E : {4, 12, 512}) {
    r.experts = E;
    EXPECT_THROW(tb::ops::check_moe_routing(r), tb::Error) << E;
  }
  r.experts = 8, r.k = 9;
  EXPECT_THROW(tb::ops::check_moe_routing(r), tb::Error);
  r.k = 2, r.seq = 60;
  EXPECT_THROW(tb::ops::check_moe_routing(r), tb::Error);
}

}  // namespace
