// Tests ops/cuda/grouped_gemm (GroupedGemmPlan) against ops/cpu/gemm_ref on one GPU, on random inputs:
//   every supported type combination (fp8 with scales: one for A, one per group for B) in every layout (abt, ab, atb;
//   fp8 reading the caller's transposed copies), over E = 8 experts with counts 0, 1, 15, 16, 17, 100, 0, 333 (empty
//   experts, counts off multiples of 16, imbalance) in every compiled configuration (each has its own epilogue, which
//   reads D when accumulating), overwriting and accumulating, and E = 64 with a Zipf-like spread and empty experts in
//   the default configuration, overwriting and accumulating; both raster orders on outputs of several tiles each way
//   in every compiled configuration (atb and abt). Every element of every group is checked against the
//   double-precision reference with gemm_ref's tolerance; rows outside every group must keep their bytes; an atb
//   expert without rows must be zero when overwritten and untouched when accumulated.
// A run captured in a CUDA graph and replayed after the device counts changed gives the new answer. One corrupted
// output element must fail the same check, so the check itself can fail.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "bench/sysinfo.h"
#include "core/dtype.h"
#include "core/error.h"
#include "ops/cpu/gemm_ref.h"
#include "ops/cuda/context.h"
#include "ops/cuda/fill.h"
#include "ops/cuda/grouped_gemm.h"

namespace {

using tb::DType;
using namespace tb::ops;
using Bytes = std::vector<unsigned char>;

#define SKIP_WITHOUT_GPU() \
  if (tb::bench::visible_gpu_count() == 0) GTEST_SKIP() << tb::bench::no_gpu_reason()

constexpr std::int64_t kN = 144, kK = 80;  // not multiples of any tile
// fp8 scales: A's, B's in atb (one for the buffer), B's per group otherwise.
constexpr float kAScale = 0.5f, kBScale = 4.0f;
float group_scale(int g) { return 1.0f + 0.25f * float(g % 4); }

std::vector<int> counts8() { return {0, 1, 15, 16, 17, 100, 0, 333}; }
std::vector<int> counts64() {
  std::vector<int> c(64);
  for (int g = 0; g < 64; ++g) c[std::size_t(g)] = g % 7 == 3 ? 0 : 600 / (g + 1);
  return c;
}
// Each expert's first row: the previous one's rows rounded up to 16 (as moe_dispatch places them).
std::vector<std::int32_t> starts_of(const std::vector<int>& counts) {
  std::vector<std::int32_t> start;
  std::int32_t at = 0;
  for (int c : counts) {
    start.push_back(at);
    at = (at + c + 15) / 16 * 16;
  }
  start.push_back(at);  // the rows in use
  return start;
}

struct TypeCase {
  DType a, b, d;
  GemmLayout layout;
  bool fast_accum = false;
};

std::vector<TypeCase> type_cases() {
  std::vector<TypeCase> v;
  for (GemmLayout l : {GemmLayout::abt, GemmLayout::ab, GemmLayout::atb}) {
    v.push_back({DType::bf16, DType::bf16, DType::bf16, l});
    if (l == GemmLayout::atb) v.push_back({DType::bf16, DType::bf16, DType::f32, l});
    v.push_back({DType::e4m3, DType::e4m3, DType::bf16, l, true});
    for (const auto& t : gemm_type_combos())
      if (tb::is_fp8(t.a)) v.push_back({t.a, t.b, t.d, l});
  }
  return v;
}

std::string name(const TypeCase& c) {
  return gemm_types_name(c.a, c.b) + "_to_" + std::string(tb::dtype_name(c.d)) + "_" +
         std::string(gemm_layout_name(c.layout)) + (c.fast_accum ? "_fast_accum" : "");
}
std::string case_name(const testing::TestParamInfo<TypeCase>& info) { return name(info.param); }

Bytes download(const DeviceBuffer& b) {
  Bytes h(b.bytes());
  TB_CHECK(cudaDeviceSynchronize());
  TB_CHECK(cudaMemcpy(h.data(), b.get(), h.size(), cudaMemcpyDeviceToHost));
  return h;
}
DeviceBuffer upload(const void* p, std::size_t bytes) {
  DeviceBuffer b(0, std::max<std::size_t>(bytes, 16));
  TB_CHECK(cudaMemcpy(b.get(), p, bytes, cudaMemcpyHostToDevice));
  return b;
}
// len elements of type t at offset + i * stride (elements) of a host buffer, packed.
Bytes gather(const Bytes& buf, DType t, std::int64_t offset, std::int64_t stride, std::int64_t len) {
  const std::size_t size = tb::dtype_size(t);
  Bytes out(std::size_t(len) * size);
  for (std::int64_t i = 0; i < len; ++i)
    std::memcpy(out.data() + std::size_t(i) * size, buf.data() + std::size_t(offset + i * stride) * size, size);
  return out;
}

// One grouped GEMM's operands on the device: inputs random, outputs random (accumulate) or NaN bytes (overwrite);
// R rows: the groups' rows (starts_of) and 16 rows of no group.
struct Problem {
  TypeCase tc;
  int E;
  std::vector<int> counts;
  std::vector<std::int32_t> start;
  std::int64_t R = 0;
  std::int64_t n = kN, k = kK;
  bool fp8;
  DeviceBuffer a, b, d, start_dev, count_dev, scales;
  std::vector<DeviceBuffer> b_groups, d_groups;
  GroupPointers b_ptrs, d_ptrs;

  Problem(const TypeCase& c, std::vector<int> cnt, bool accumulate, cudaStream_t st, std::int64_t n_ = kN,
          std::int64_t k_ = kK)
      : tc(c), E(int(cnt.size())), counts(std::move(cnt)), start(starts_of(counts)), n(n_), k(k_),
        fp8(tb::is_fp8(c.a)) {
    R = start.back() + 16;
    start_dev = upload(start.data(), std::size_t(E) * 4);
    count_dev = upload(counts.data(), std::size_t(E) * 4);
    std::uint64_t seed = 100;
    auto random = [&](DType t, std::int64_t elements) {
      DeviceBuffer buf(0, std::size_t(elements) * tb::dtype_size(t));
      fill_uniform(buf.get(), t, std::size_t(elements), ++seed, -1.0f, 1.0f, st);
      return buf;
    };
    auto output = [&](std::int64_t elements) {
      if (accumulate) return random(tc.d, elements);
      DeviceBuffer buf(0, std::size_t(elements) * tb::dtype_size(tc.d));
      TB_CHECK(cudaMemsetAsync(buf.get(), 0xff, buf.bytes(), st));  // NaN until written
      return buf;
    };
    std::vector<void*> bp, dp;
    switch (tc.layout) {
      case GemmLayout::abt:  // X [R,k], W_e [n,k], Y [R,n]
        a = random(tc.a, R * k);
        for (int g = 0; g < E; ++g) bp.push_back(b_groups.emplace_back(random(tc.b, n * k)).get());
        d = output(R * n);
        break;
      case GemmLayout::ab:  // dY [R,n], W_e [n,k] (fp8: Wt_e [k,n]), dX [R,k]
        a = random(tc.a, R * n);
        for (int g = 0; g < E; ++g) bp.push_back(b_groups.emplace_back(random(tc.b, n * k)).get());
        d = output(R * k);
        break;
      case GemmLayout::atb:  // dY [R,n] (fp8: dYt [n,R]), X [R,k] (fp8: Xt [k,R]), dW_e [n,k]
        a = random(tc.a, R * n);
        b = random(tc.b, R * k);
        for (int g = 0; g < E; ++g) dp.push_back(d_groups.emplace_back(output(n * k)).get());
        break;
    }
    if (!bp.empty()) b_ptrs = GroupPointers(0, bp);
    if (!dp.empty()) d_ptrs = GroupPointers(0, dp);
    std::vector<float> s = {kAScale, kBScale};
    for (int g = 0; g < E; ++g) s.push_back(group_scale(g));
    scales = upload(s.data(), s.size() * 4);
  }

  // New counts in the same device arrays (their rows must fit in R).
  void set_counts(std::vector<int> cnt) {
    counts = std::move(cnt);
    start = starts_of(counts);
    ASSERT_LE(start.back() + 16, R);
    TB_CHECK(cudaMemcpy(start_dev.get(), start.data(), std::size_t(E) * 4, cudaMemcpyHostToDevice));
    TB_CHECK(cudaMemcpy(count_dev.get(), counts.data(), std::size_t(E) * 4, cudaMemcpyHostToDevice));
  }

  GroupedGemmShape shape() const {
    GroupedGemmShape s;
    s.n = n, s.k = k, s.groups = E, s.rows = R;
    s.a = tc.a, s.b = tc.b, s.d = tc.d, s.layout = tc.layout, s.fast_accum = tc.fast_accum;
    return s;
  }
  GroupedGemmArgs args(bool accumulate) const {
    GroupedGemmArgs g;
    g.start = start_dev.as<std::int32_t>();
    g.count = count_dev.as<std::int32_t>();
    g.a = a.get();
    if (tc.layout == GemmLayout::atb) {
      g.b = b.get();
      g.d_groups = d_ptrs.out();
    } else {
      g.b_groups = b_ptrs.in();
      g.d = d.get();
    }
    if (fp8) {
      g.a_scale = scales.as<float>();
      g.b_scale = scales.as<float>() + (tc.layout == GemmLayout::atb ? 1 : 2);
    }
    g.accumulate = accumulate;
    return g;
  }
  // The outputs' bytes (the row buffer, or the groups' buffers one after another).
  Bytes outputs() const {
    if (tc.layout != GemmLayout::atb) return download(d);
    Bytes all;
    for (const auto& g : d_groups) {
      const Bytes h = download(g);
      all.insert(all.end(), h.begin(), h.end());
    }
    return all;
  }
};

struct Outcome {
  GemmCheck check;
  int wrong = 0;  // outputs outside the products that changed, or empty atb experts not zero / not untouched
  std::string first_wrong;
};

// init: the outputs before the run, out: after. Every product element against dot_ref (plus init when
// accumulating); every other output element bit for bit.
// CUTLASS's FP8 mainloop adds each promotion interval (4 k-blocks) at the tensor cores' accumulation precision before
// promoting to fp32: on an H100 its fp32-output weight gradients erred by up to 1.84x the cuBLASLt-derived bound of
// ops/cpu/gemm_ref.h (2^-15, about p = 14 bits), so FP8 gets 4x (p = 12); bf16 keeps the bound as it is.
constexpr double kFp8Margin = 4;

Outcome compare(const Problem& p, const Bytes& init, const Bytes& out, bool accumulate) {
  const TypeCase& tc = p.tc;
  const bool atb = tc.layout == GemmLayout::atb;
  const std::size_t ds = tb::dtype_size(tc.d);
  const std::int64_t n = p.n, k = p.k, R = p.R;
  const Bytes A = download(p.a), Bx = atb ? download(p.b) : Bytes();
  std::vector<bool> covered(out.size() / ds, false);
  Outcome o;
  for (int g = 0; g < p.E; ++g) {
    const std::int64_t s = p.start[std::size_t(g)], m = p.counts[std::size_t(g)];
    const Bytes B = atb ? Bx : download(p.b_groups[std::size_t(g)]);
    // Group g as A_g [M,K] · B_g^T with B_g^T [N,K]: rows of A_g and of B_g^T gathered from the stored layouts.
    std::int64_t M = m, N = n, K = k;
    if (tc.layout == GemmLayout::ab) N = k, K = n;
    if (atb) M = n, N = k, K = m;
    std::vector<Bytes> arow(static_cast<std::size_t>(M)), brow(static_cast<std::size_t>(N));
    for (std::int64_t i = 0; i < M; ++i)
      arow[std::size_t(i)] = tc.layout == GemmLayout::abt ? gather(A, tc.a, (s + i) * k, 1, K)
                             : tc.layout == GemmLayout::ab ? gather(A, tc.a, (s + i) * n, 1, K)
                             : p.fp8                       ? gather(A, tc.a, i * R + s, 1, K)
                                                           : gather(A, tc.a, s * n + i, n, K);
    for (std::int64_t j = 0; j < N; ++j)
      brow[std::size_t(j)] = tc.layout == GemmLayout::abt ? gather(B, tc.b, j * k, 1, K)
                             : tc.layout == GemmLayout::ab ? (p.fp8 ? gather(B, tc.b, j * n, 1, K) : gather(B, tc.b, j, k, K))
                             : p.fp8                       ? gather(B, tc.b, j * R + s, 1, K)
                                                           : gather(B, tc.b, s * k + j, k, K);
    const double sa = p.fp8 ? kAScale : 1, sb = !p.fp8 ? 1 : atb ? kBScale : group_scale(g);
    for (std::int64_t i = 0; i < M; ++i) {
      for (std::int64_t j = 0; j < N; ++j) {
        const std::int64_t at = atb ? g * n * k + i * k + j : (s + i) * N + j;  // D's element
        covered[std::size_t(at)] = true;
        const double c = accumulate ? tb::load_as_double(tc.d, init.data(), std::size_t(at)) : 0.0;
        const double got = tb::load_as_double(tc.d, out.data(), std::size_t(at));
        if (K == 0) {  // an atb expert without rows: zero, or untouched
          if (got != c && o.wrong++ == 0)
            o.first_wrong = "expert " + std::to_string(g) + " without rows holds " + std::to_string(got);
          continue;
        }
        DotRef ref = dot_ref(tc.a, arow[std::size_t(i)].data(), tc.b, brow[std::size_t(j)].data(), K, sa, sb);
        ref.value += c;
        const double tol = gemm_tolerance(tc.a, tc.b, tc.d, tc.fast_accum, K, ref);
        o.check.add({i, j}, got, ref.value, (p.fp8 ? kFp8Margin : 1.0) * tol);
      }
    }
  }
  for (std::size_t e = 0; e < covered.size(); ++e)
    if (!covered[e] && std::memcmp(out.data() + e * ds, init.data() + e * ds, ds) != 0 && o.wrong++ == 0)
      o.first_wrong = "element " + std::to_string(e) + " of no group changed";
  return o;
}

void expect_ok(const Outcome& o, const std::string& what) {
  EXPECT_TRUE(o.check.ok()) << what << ": " << o.check.worst_message();
  EXPECT_EQ(o.wrong, 0) << what << ": " << o.first_wrong;
}

// A fresh problem run once through a fresh plan and checked.
void check_run(const TypeCase& tc, const std::vector<int>& counts, bool accumulate,
               std::optional<GroupedGemmConfig> config, DeviceContext& dc) {
  Problem p(tc, counts, accumulate, dc.stream());
  GroupedGemmPlan plan(0, p.shape(), config);
  const Bytes init = p.outputs();
  plan.run(p.args(accumulate), dc.stream());
  expect_ok(compare(p, init, p.outputs(), accumulate),
            std::string(grouped_gemm_config_name(plan.config())) + " E=" + std::to_string(p.E) +
                (accumulate ? " accumulate" : " overwrite"));
}

class GroupedGemmGpu : public testing::TestWithParam<TypeCase> {};

TEST_P(GroupedGemmGpu, EightExpertsEveryConfig) {
  SKIP_WITHOUT_GPU();
  DeviceContext dc(0);
  GroupedGemmShape s;
  s.n = kN, s.k = kK, s.groups = 8, s.rows = 1024;
  s.a = GetParam().a, s.b = GetParam().b, s.d = GetParam().d, s.layout = GetParam().layout;
  s.fast_accum = GetParam().fast_accum;
  for (GroupedGemmConfig c : grouped_gemm_configs(s))
    for (bool accumulate : {false, true}) check_run(GetParam(), counts8(), accumulate, c, dc);
}

TEST_P(GroupedGemmGpu, SixtyFourExperts) {
  SKIP_WITHOUT_GPU();
  DeviceContext dc(0);
  for (bool accumulate : {false, true}) check_run(GetParam(), counts64(), accumulate, std::nullopt, dc);
}

INSTANTIATE_TEST_SUITE_P(Types, GroupedGemmGpu, testing::ValuesIn(type_cases()), case_name);

// Both raster orders on outputs of several tiles each way (partial ones at the edges), in every compiled
// configuration: the weight gradient (whose default walks across N when D_e has more tiles down M) and the forward.
TEST(GroupedGemmGpuRaster, BothOrders) {
  SKIP_WITHOUT_GPU();
  DeviceContext dc(0);
  for (GemmLayout l : {GemmLayout::atb, GemmLayout::abt}) {
    const TypeCase tc{DType::bf16, DType::bf16, DType::bf16, l};
    GroupedGemmShape s;  // (the configurations depend on the types and layout only)
    s.n = 648, s.k = 392, s.groups = 8, s.rows = 1024;
    s.a = tc.a, s.b = tc.b, s.d = tc.d, s.layout = l;
    for (GroupedGemmConfig c : grouped_gemm_configs(s))
      for (GroupedGemmRaster r : {GroupedGemmRaster::along_m, GroupedGemmRaster::along_n})
        for (bool accumulate : {false, true}) {
          Problem p(tc, counts8(), accumulate, dc.stream(), 648, 392);
          GroupedGemmPlan plan(0, p.shape(), c, r);
          const Bytes init = p.outputs();
          plan.run(p.args(accumulate), dc.stream());
          expect_ok(compare(p, init, p.outputs(), accumulate),
                    std::string(gemm_layout_name(l)) + " " + std::string(grouped_gemm_config_name(c)) +
                        (r == GroupedGemmRaster::along_n ? " along N" : " along M") +
                        (accumulate ? " accumulate" : " overwrite"));
        }
  }
}

// The check fails on one wrong element of a group, and on a changed element of no group.
TEST(GroupedGemmGpuCheck, CatchesWrongElements) {
  SKIP_WITHOUT_GPU();
  DeviceContext dc(0);
  Problem p({DType::bf16, DType::bf16, DType::bf16, GemmLayout::abt}, counts8(), false, dc.stream());
  GroupedGemmPlan plan(0, p.shape());
  const Bytes init = p.outputs();
  plan.run(p.args(false), dc.stream());
  const Bytes out = p.outputs();
  expect_ok(compare(p, init, out, false), "as computed");
  Bytes bad = out;
  const std::size_t in_group = std::size_t(p.start[5] + 3) * kN + 7;  // expert 5 has 100 rows
  bad[2 * in_group + 1] ^= 0x40;
  EXPECT_FALSE(compare(p, init, bad, false).check.ok());
  bad = out;
  bad[2 * std::size_t(p.R - 1) * kN] ^= 1;  // the last row is in no group
  EXPECT_GT(compare(p, init, bad, false).wrong, 0);
}

// Captured once, replayed after new counts and starts were written to the same device arrays: the new answer, each
// time (an fp8 weight gradient too, whose empty experts are zeroed).
TEST(GroupedGemmGpuGraph, ReplayReadsTheNewCounts) {
  SKIP_WITHOUT_GPU();
  DeviceContext dc(0);
  cudaStream_t st = dc.stream();
  for (const TypeCase& tc : {TypeCase{DType::bf16, DType::bf16, DType::bf16, GemmLayout::abt},
                             TypeCase{DType::e5m2, DType::e4m3, DType::f32, GemmLayout::atb}}) {
    Problem p(tc, counts8(), false, st);
    GroupedGemmPlan plan(0, p.shape());
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    TB_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    plan.run(p.args(false), st);
    TB_CHECK(cudaStreamEndCapture(st, &graph));
    TB_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (const auto& counts : {counts8(), std::vector<int>{40, 0, 0, 64, 3, 0, 200, 17}, counts8()}) {
      p.set_counts(counts);
      const Bytes init = p.outputs();
      TB_CHECK(cudaGraphLaunch(exec, st));
      TB_CHECK(cudaStreamSynchronize(st));
      expect_ok(compare(p, init, p.outputs(), false), name(tc) + " replay");
    }
    TB_CHECK(cudaGraphExecDestroy(exec));
    TB_CHECK(cudaGraphDestroy(graph));
  }
}

}  // namespace
