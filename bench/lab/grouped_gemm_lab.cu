// bench/lab/grouped_gemm_lab.cu: the Mixture-of-Experts expert GEMMs, every way trainbench could run them, on one GPU
// (a lab, not part of trainbench): the numbers behind ops/cuda/grouped_gemm's default configuration
// (TB_GROUPED_GEMM_DEFAULTS in ops/cuda/grouped_gemm_instances.h).
// Shapes (E experts, model width d, expert ffn f; fc1 n = 2f, k = d (SwiGLU gate and up); fc2 n = d, k = f):
//   Mixtral 8x7B (E 8, d 4096, f 14336), Grok-1 (E 8, d 6144, f 32768), a DeepSeek-V3-like rank (E 32, d 7168, f 2048)
// at 1024 and 4096 rows per expert and a Zipf-like spread (count_e ~ 1 / (e + 1), multiples of 16) of 1024 E rows;
// passes: forward (fwd, abt), data gradient (dgrad, ab), weight gradient (wgrad, atb, fp32 gradients, overwritten),
// in BF16 and FP8 (e4m3 forward with fast accumulation, e5m2 gradients against e4m3 copies; transposed copies as
// grouped_gemm.h says); and, BF16 only, the weight gradient as trainbench's MoE layer runs it with --grads bf16 after
// the first micro-batch (wgrad16, atb: bf16 gradients, accumulated: D += dY_e^T X_e, every method with beta 1).
// Methods, each timed as the median of 20 runs after one (bench/loop.h, CUDA events, launches held back; wgrad16's
// gradients start random and keep accumulating across runs and methods):
//   lt      one cuBLASLt GemmPlan per expert on one stream (today's MoE layer; fp8 weight gradient: per-expert
//           transposes [n, m_e], as GemmPlan has no leading dimension)
//   lt4     the same, expert e on stream e % 4
//   cublas  cublasGemmGroupedBatchedEx (cuBLAS 13.1, host-side sizes; "-" where cuBLAS refuses the types)
//   <cfg>   GroupedGemmPlan in each compiled configuration (grouped_gemm_instances.h): coop/pingpong, tile, cluster
//   alongM  the default configuration with its tiles walked down M (the others: the plan's raster order, which
//           walks the weight gradient across N where its output has more tiles down M; grouped_gemm.h)
//   dense   the floor: one cuBLASLt GEMM of all the rows against one weight (M = sum m_e)
// Work: 2 n k sum_e m_e FLOPs. Random inputs (never zero). The table at the end gives TFLOP/s and the ratio to dense;
// then, per kernel (pass x precision), each method's geometric mean ratio over the shapes.
// Usage: grouped_gemm_lab [mixtral|grok1|dsv3] [bf16|fp8] [fwd|dgrad|wgrad|wgrad16]...: each group's names select
// within it (none: all of it); everything takes about 3 minutes on an H200, `mixtral wgrad16` well under a minute.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bench/loop.h"
#include "core/error.h"
#include "ops/cuda/context.h"
#include "ops/cuda/fill.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/grouped_gemm.h"

namespace {

using namespace tb;
using ops::DeviceBuffer;
using ops::GemmLayout;

struct Model {
  const char* name;
  int E;
  std::int64_t d, f;
};
constexpr Model kModels[] = {{"mixtral", 8, 4096, 14336}, {"grok1", 8, 6144, 32768}, {"dsv3", 32, 7168, 2048}};
constexpr const char* kPassNames[] = {"fwd", "dgrad", "wgrad", "wgrad16"};
constexpr GemmLayout kPassLayouts[] = {GemmLayout::abt, GemmLayout::ab, GemmLayout::atb, GemmLayout::atb};
constexpr int kPasses = 4;
constexpr int kWgrad16 = 3;  // BF16 only: bf16 output, accumulated

std::vector<int> zipf_counts(int E, std::int64_t total) {
  double h = 0;
  for (int e = 0; e < E; ++e) h += 1.0 / (e + 1);
  std::vector<int> c(static_cast<std::size_t>(E));
  std::int64_t sum = 0;
  for (int e = 1; e < E; ++e) {
    c[std::size_t(e)] = std::max(16, int(std::lround(double(total) / h / (e + 1) / 16)) * 16);
    sum += c[std::size_t(e)];
  }
  c[0] = int(total - sum);  // the largest, so the total is exact
  return c;
}

double median_ms(cudaStream_t st, const std::function<void()>& body) {
  bench::LoopSpec spec;
  spec.warmup = 1;
  spec.iters = 20;
  return bench::time_stream(spec, 0, st, [&](int) { body(); }).summary().median;
}

void check_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) raise_error(Error::Kind::cublas, std::string(what) + ": " + cublasGetStatusString(s));
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::bf16: return CUDA_R_16BF;
    case DType::e4m3: return CUDA_R_8F_E4M3;
    case DType::e5m2: return CUDA_R_8F_E5M2;
    default: return CUDA_R_32F;
  }
}

// One pass's operands for expert e and for the whole buffer, in the roles of grouped_gemm.h.
struct PassTypes {
  DType a, b, d;
  bool fast;
};
PassTypes pass_types(bool fp8, int pass) {
  if (!fp8) return {DType::bf16, DType::bf16, pass == 2 ? DType::f32 : DType::bf16, false};  // wgrad16: bf16
  if (pass == 0) return {DType::e4m3, DType::e4m3, DType::bf16, true};
  return {DType::e5m2, DType::e4m3, pass == 2 ? DType::f32 : DType::bf16, false};
}

// "coop_128x256_c2" -> "co256c2", "pingpong_128x128_c1" -> "pp128c1": the table's column names.
std::string short_name(ops::GroupedGemmConfig c) {
  const std::string full(ops::grouped_gemm_config_name(c));
  const std::size_t x = full.find('x'), cl = full.rfind('_');
  return full.substr(0, 2) + full.substr(x + 1, cl - x - 1) + full.substr(cl + 1);
}

struct Row {
  std::string label;
  int pass;
  bool fp8;
  std::vector<double> tflops;  // per method, NaN where not run
};

struct Lab {
  ops::DeviceContext dc{0};
  cudaStream_t st = dc.stream();
  cudaStream_t side[4] = {};
  cudaEvent_t fork = nullptr, join[4] = {};
  DeviceBuffer side_ws[4];
  cublasHandle_t blas = nullptr;
  DeviceBuffer unit;  // fp8 unit scales: [0] for a, [64..] one per expert
  ops::GemmScales unit_scales;
  std::vector<std::string> methods;
  std::vector<ops::GroupedGemmConfig> configs;
  std::vector<Row> rows;

  Lab() {
    for (int i = 0; i < 4; ++i) {
      TB_CHECK(cudaStreamCreateWithFlags(&side[i], cudaStreamNonBlocking));
      TB_CHECK(cudaEventCreateWithFlags(&join[i], cudaEventDisableTiming));
      side_ws[i] = DeviceBuffer(0, ops::DeviceContext::kWorkspaceBytes);
    }
    TB_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    check_cublas(cublasCreate(&blas), "cublasCreate");
    check_cublas(cublasSetStream(blas, st), "cublasSetStream");
    std::vector<float> ones(512, 1.0f);
    unit = DeviceBuffer(0, ones.size() * 4);
    TB_CHECK(cudaMemcpy(unit.get(), ones.data(), ones.size() * 4, cudaMemcpyHostToDevice));
    unit_scales = {unit.as<float>(), unit.as<float>() + 64};
    configs = {ops::GroupedGemmConfig::coop_128x128_c1, ops::GroupedGemmConfig::coop_128x256_c1,
               ops::GroupedGemmConfig::coop_128x256_c2, ops::GroupedGemmConfig::pingpong_128x128_c1,
               ops::GroupedGemmConfig::pingpong_128x128_c2};
    methods = {"lt", "lt4", "cublas"};
    for (auto c : configs) methods.emplace_back(short_name(c));
    methods.emplace_back("alongM");
    methods.emplace_back("dense");
  }
  ~Lab() {
    cublasDestroy(blas);
    for (int i = 0; i < 4; ++i) {
      cudaStreamDestroy(side[i]);
      cudaEventDestroy(join[i]);
    }
    cudaEventDestroy(fork);
  }
};

DeviceBuffer random_buffer(Lab& L, DType t, std::int64_t elements, std::uint64_t seed) {
  DeviceBuffer b(0, std::size_t(elements) * dtype_size(t));
  ops::fill_uniform(b.get(), t, std::size_t(elements), seed, -1.0f, 1.0f, L.st);
  return b;
}

// One linear's buffers, for up to R rows (bf16 and fp8 inputs, both outputs).
struct Buffers {
  std::int64_t n = 0, k = 0, R = 0;
  int E = 0;
  DeviceBuffer x, dy, y, dx, xq, dyq, xtq, dytq, dytq_e, xtq_e;  // *_e: the per-expert transposes (lt's fp8 wgrad)
  std::vector<DeviceBuffer> w, wq, wtq, dw;
  ops::GroupPointers w_ptrs, wq_ptrs, wtq_ptrs, dw_ptrs;
};

Buffers make_buffers(Lab& L, int E, std::int64_t n, std::int64_t k, std::int64_t R) {
  Buffers B;
  B.n = n, B.k = k, B.R = R, B.E = E;
  std::uint64_t seed = 1;
  B.x = random_buffer(L, DType::bf16, R * k, ++seed);
  B.dy = random_buffer(L, DType::bf16, R * n, ++seed);
  B.y = DeviceBuffer(0, std::size_t(R * n) * 2);
  B.dx = DeviceBuffer(0, std::size_t(R * k) * 2);
  B.xq = random_buffer(L, DType::e4m3, R * k, ++seed);
  B.dyq = random_buffer(L, DType::e5m2, R * n, ++seed);
  B.xtq = random_buffer(L, DType::e4m3, R * k, ++seed);
  B.dytq = random_buffer(L, DType::e5m2, R * n, ++seed);
  B.xtq_e = random_buffer(L, DType::e4m3, R * k, ++seed);
  B.dytq_e = random_buffer(L, DType::e5m2, R * n, ++seed);
  std::vector<void*> w, wq, wtq, dw;
  for (int e = 0; e < E; ++e) {
    w.push_back(B.w.emplace_back(random_buffer(L, DType::bf16, n * k, ++seed)).get());
    wq.push_back(B.wq.emplace_back(random_buffer(L, DType::e4m3, n * k, ++seed)).get());
    wtq.push_back(B.wtq.emplace_back(random_buffer(L, DType::e4m3, n * k, ++seed)).get());
    dw.push_back(B.dw.emplace_back(DeviceBuffer(0, std::size_t(n * k) * 4)).get());  // f32, or bf16 (wgrad16)
  }
  B.w_ptrs = ops::GroupPointers(0, w);
  B.wq_ptrs = ops::GroupPointers(0, wq);
  B.wtq_ptrs = ops::GroupPointers(0, wtq);
  B.dw_ptrs = ops::GroupPointers(0, dw);
  return B;
}

// Expert e's GEMM as a GemmPlan (gemm.h's m, n, k and layout) and its operands, for rows [s, s + m).
struct ExpertGemm {
  ops::GemmShape shape;
  void* d;
  const void* a;
  const void* b;
};
ExpertGemm expert_gemm(const Buffers& B, bool fp8, int pass, int e, std::int64_t s, std::int64_t m) {
  const PassTypes t = pass_types(fp8, pass);
  ops::GemmShape g;
  g.a = t.a, g.b = t.b, g.d = t.d, g.fast_accum = t.fast;
  auto at = [](const DeviceBuffer& buf, std::int64_t bytes) { return static_cast<char*>(buf.get()) + bytes; };
  const std::int64_t n = B.n, k = B.k;
  if (pass == 0) {  // Y_e = X_e W_e^T
    g.m = m, g.n = n, g.k = k;
    return {g, at(B.y, s * n * 2), fp8 ? at(B.xq, s * k) : at(B.x, s * k * 2),
            fp8 ? B.wq[std::size_t(e)].get() : B.w[std::size_t(e)].get()};
  }
  if (pass == 1) {  // dX_e = dY_e W_e (fp8: abt against Wt_e)
    g.m = m, g.n = k, g.k = n, g.layout = fp8 ? GemmLayout::abt : GemmLayout::ab;
    return {g, at(B.dx, s * k * 2), fp8 ? at(B.dyq, s * n) : at(B.dy, s * n * 2),
            fp8 ? B.wtq[std::size_t(e)].get() : B.w[std::size_t(e)].get()};
  }
  // dW_e (+)= dY_e^T X_e (fp8: abt of the expert's own transposes dYt_e [n, m], Xt_e [k, m])
  g.m = n, g.n = k, g.k = m, g.layout = fp8 ? GemmLayout::abt : GemmLayout::atb, g.accumulate = pass == kWgrad16;
  return {g, B.dw[std::size_t(e)].get(), fp8 ? at(B.dytq_e, s * n) : at(B.dy, s * n * 2),
          fp8 ? at(B.xtq_e, s * k) : at(B.x, s * k * 2)};
}

// cublasGemmGroupedBatchedEx over the experts (column-major: D^T = op(B)^T op(A)^T, as gemm.h explains).
struct CublasGroups {
  std::vector<cublasOperation_t> ta, tb;
  std::vector<int> m, n, k, lda, ldb, ldc, size;
  std::vector<float> alpha, beta;
  DeviceBuffer a, b, c;  // device arrays of pointers
  int groups = 0;
};
CublasGroups cublas_groups(const Buffers& B, int pass, const std::vector<int>& start, const std::vector<int>& count) {
  CublasGroups G;
  std::vector<const void*> a, b;
  std::vector<void*> c;
  const int n = int(B.n), k = int(B.k);
  for (int e = 0; e < B.E; ++e) {
    const std::int64_t s = start[std::size_t(e)], m = count[std::size_t(e)];
    if (m == 0) continue;
    const ExpertGemm x = expert_gemm(B, false, pass, e, s, m);
    if (pass == 0) {  // Y^T [n, m] = W_e (T) · X_e^T
      G.ta.push_back(CUBLAS_OP_T), G.tb.push_back(CUBLAS_OP_N);
      G.m.push_back(n), G.n.push_back(int(m)), G.k.push_back(k);
      G.lda.push_back(k), G.ldb.push_back(k), G.ldc.push_back(n);
    } else if (pass == 1) {  // dX^T [k, m] = W_e^T (N) · dY_e^T
      G.ta.push_back(CUBLAS_OP_N), G.tb.push_back(CUBLAS_OP_N);
      G.m.push_back(k), G.n.push_back(int(m)), G.k.push_back(n);
      G.lda.push_back(k), G.ldb.push_back(n), G.ldc.push_back(k);
    } else {  // dW^T [k, n] (+)= X_e^T (N) · dY_e (T)
      G.ta.push_back(CUBLAS_OP_N), G.tb.push_back(CUBLAS_OP_T);
      G.m.push_back(k), G.n.push_back(n), G.k.push_back(int(m));
      G.lda.push_back(k), G.ldb.push_back(n), G.ldc.push_back(k);
    }
    a.push_back(x.b), b.push_back(x.a), c.push_back(x.d);  // cuBLAS's A is our B
    G.size.push_back(1), G.alpha.push_back(1.0f), G.beta.push_back(pass == kWgrad16 ? 1.0f : 0.0f);
  }
  G.groups = int(G.size.size());
  auto upload = [](const auto& v) {
    DeviceBuffer buf(0, std::max<std::size_t>(v.size() * sizeof(v[0]), 16));
    TB_CHECK(cudaMemcpy(buf.get(), v.data(), v.size() * sizeof(v[0]), cudaMemcpyHostToDevice));
    return buf;
  };
  G.a = upload(a), G.b = upload(b), G.c = upload(c);
  return G;
}

cublasStatus_t run_cublas(Lab& L, const CublasGroups& G, DType d) {
  return cublasGemmGroupedBatchedEx(L.blas, G.ta.data(), G.tb.data(), G.m.data(), G.n.data(), G.k.data(),
                                    G.alpha.data(), static_cast<const void* const*>(G.a.get()), CUDA_R_16BF,
                                    G.lda.data(), static_cast<const void* const*>(G.b.get()), CUDA_R_16BF,
                                    G.ldb.data(), G.beta.data(), static_cast<void* const*>(G.c.get()), cuda_type(d),
                                    G.ldc.data(), G.groups, G.size.data(), CUBLAS_COMPUTE_32F);
}

// Every method for one (linear, counts, precision, pass): TFLOP/s per method.
std::vector<double> measure(Lab& L, const Buffers& B, const std::vector<int>& start, const std::vector<int>& count,
                            bool fp8, int pass) {
  const double nan = std::nan("");
  std::vector<double> out(L.methods.size(), nan);
  std::int64_t total = 0;
  for (int c : count) total += c;
  const double flop = 2.0 * double(B.n) * double(B.k) * double(total);
  const ops::GemmScales scales = fp8 ? L.unit_scales : ops::GemmScales{};
  std::size_t mi = 0;
  if (pass == kWgrad16)  // finite gradients to accumulate into (the fp32 pass left other bytes there)
    for (std::size_t e = 0; e < B.dw.size(); ++e)
      ops::fill_uniform(B.dw[e].get(), DType::bf16, std::size_t(B.n * B.k), 100 + e, -1.0f, 1.0f, L.st);

  // lt and lt4: one GemmPlan per expert.
  std::vector<ExpertGemm> gemms;
  std::vector<ops::GemmPlan*> plans;
  for (int e = 0; e < B.E; ++e) {
    if (count[std::size_t(e)] == 0) continue;
    gemms.push_back(expert_gemm(B, fp8, pass, e, start[std::size_t(e)], count[std::size_t(e)]));
    plans.push_back(&L.dc.gemm_plan(gemms.back().shape));
  }
  out[mi++] = flop / median_ms(L.st, [&] {
    for (std::size_t i = 0; i < gemms.size(); ++i)
      plans[i]->run(gemms[i].d, gemms[i].a, gemms[i].b, L.dc.workspace(), L.st, scales);
  }) * 1e-9;
  out[mi++] = flop / median_ms(L.st, [&] {
    TB_CHECK(cudaEventRecord(L.fork, L.st));
    for (int s = 0; s < 4; ++s) TB_CHECK(cudaStreamWaitEvent(L.side[s], L.fork));
    for (std::size_t i = 0; i < gemms.size(); ++i)
      plans[i]->run(gemms[i].d, gemms[i].a, gemms[i].b, {L.side_ws[i % 4].get(), L.side_ws[i % 4].bytes()},
                    L.side[i % 4], scales);
    for (int s = 0; s < 4; ++s) {
      TB_CHECK(cudaEventRecord(L.join[s], L.side[s]));
      TB_CHECK(cudaStreamWaitEvent(L.st, L.join[s]));
    }
  }) * 1e-9;

  // cublas: bf16 only (cuBLAS's grouped GEMM has no fp8).
  if (!fp8) {
    const CublasGroups G = cublas_groups(B, pass, start, count);
    const DType d = pass_types(false, pass).d;
    if (run_cublas(L, G, d) == CUBLAS_STATUS_SUCCESS)
      out[mi] = flop / median_ms(L.st, [&] { check_cublas(run_cublas(L, G, d), "cublasGemmGroupedBatchedEx"); }) * 1e-9;
    else
      cudaGetLastError();
  }
  ++mi;

  // The grouped GEMM in each configuration.
  ops::DeviceBuffer start_dev(0, start.size() * 4), count_dev(0, count.size() * 4);
  TB_CHECK(cudaMemcpy(start_dev.get(), start.data(), start.size() * 4, cudaMemcpyHostToDevice));
  TB_CHECK(cudaMemcpy(count_dev.get(), count.data(), count.size() * 4, cudaMemcpyHostToDevice));
  const PassTypes t = pass_types(fp8, pass);
  ops::GroupedGemmShape gs;
  gs.n = B.n, gs.k = B.k, gs.groups = B.E, gs.rows = B.R;
  gs.a = t.a, gs.b = t.b, gs.d = t.d, gs.layout = kPassLayouts[pass], gs.fast_accum = t.fast;
  ops::GroupedGemmArgs args;
  args.start = start_dev.as<std::int32_t>(), args.count = count_dev.as<std::int32_t>();
  if (pass == 0) {
    args.a = fp8 ? B.xq.get() : B.x.get(), args.b_groups = fp8 ? B.wq_ptrs.in() : B.w_ptrs.in(), args.d = B.y.get();
  } else if (pass == 1) {
    args.a = fp8 ? B.dyq.get() : B.dy.get(), args.b_groups = fp8 ? B.wtq_ptrs.in() : B.w_ptrs.in();
    args.d = B.dx.get();
  } else {
    args.a = fp8 ? B.dytq.get() : B.dy.get(), args.b = fp8 ? B.xtq.get() : B.x.get(), args.d_groups = B.dw_ptrs.out();
    args.accumulate = pass == kWgrad16;
  }
  if (fp8) args.a_scale = L.unit_scales.a, args.b_scale = L.unit_scales.b;
  const auto compiled = ops::grouped_gemm_configs(gs);
  for (auto c : L.configs) {
    if (std::find(compiled.begin(), compiled.end(), c) != compiled.end()) {
      ops::GroupedGemmPlan plan(0, gs, c);
      out[mi] = flop / median_ms(L.st, [&] { plan.run(args, L.st); }) * 1e-9;
    }
    ++mi;
  }
  {  // alongM: the default configuration walking down M whatever the shape
    ops::GroupedGemmPlan plan(0, gs, std::nullopt, ops::GroupedGemmRaster::along_m);
    out[mi++] = flop / median_ms(L.st, [&] { plan.run(args, L.st); }) * 1e-9;
  }

  // dense: all rows against expert 0's weight.
  ExpertGemm dense = expert_gemm(B, fp8, pass, 0, 0, total);
  if (fp8 && pass == 2) dense.a = B.dytq.get(), dense.b = B.xtq.get();  // [n, total] and [k, total], dense rows
  ops::GemmPlan& plan = L.dc.gemm_plan(dense.shape);
  out[mi] = flop / median_ms(L.st, [&] { plan.run(dense.d, dense.a, dense.b, L.dc.workspace(), L.st, scales); }) *
            1e-9;
  return out;
}

// The command line's names, in groups: a group none of whose names is given is wanted whole.
using Names = std::vector<std::string>;
const std::vector<Names> kArgGroups = {
    {"mixtral", "grok1", "dsv3"}, {"bf16", "fp8"}, {"fwd", "dgrad", "wgrad", "wgrad16"}};

bool has(const Names& names, const std::string& s) { return std::find(names.begin(), names.end(), s) != names.end(); }

bool known(const std::string& arg) {
  return std::any_of(kArgGroups.begin(), kArgGroups.end(), [&](const Names& g) { return has(g, arg); });
}

bool wanted(const Names& args, const std::string& name) {
  for (const Names& g : kArgGroups)
    if (has(g, name))
      return has(args, name) || std::none_of(args.begin(), args.end(), [&](const auto& a) { return has(g, a); });
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const Names args(argv + 1, argv + argc);
  for (const auto& a : args) {
    if (known(a)) continue;
    std::fprintf(stderr, "grouped_gemm_lab: unknown argument '%s'; usage: grouped_gemm_lab "
                         "[mixtral|grok1|dsv3] [bf16|fp8] [fwd|dgrad|wgrad|wgrad16]...\n", a.c_str());
    return 2;
  }
  const auto t0 = std::chrono::steady_clock::now();
  Lab L;
  for (const Model& md : kModels) {
    if (!wanted(args, md.name)) continue;
    const std::int64_t R = std::int64_t(md.E) * 4096;
    const struct {
      const char* name;
      std::int64_t n, k;
    } linears[] = {{"fc1", 2 * md.f, md.d}, {"fc2", md.d, md.f}};
    for (const auto& lin : linears) {
      Buffers B = make_buffers(L, md.E, lin.n, lin.k, R);
      for (int set = 0; set < 3; ++set) {
        std::vector<int> count = set == 0   ? std::vector<int>(std::size_t(md.E), 1024)
                                 : set == 1 ? std::vector<int>(std::size_t(md.E), 4096)
                                            : zipf_counts(md.E, 1024 * std::int64_t(md.E));
        std::vector<int> start;
        int at = 0;
        for (int c : count) start.push_back(at), at += (c + 15) / 16 * 16;
        const char* set_name = set == 0 ? "1024" : set == 1 ? "4096" : "zipf";
        for (bool fp8 : {false, true}) {
          if (!wanted(args, fp8 ? "fp8" : "bf16")) continue;
          for (int pass = 0; pass < kPasses; ++pass) {
            if (!wanted(args, kPassNames[pass]) || (fp8 && pass == kWgrad16)) continue;
            char label[96];
            std::snprintf(label, sizeof label, "%-7s %s %-4s %-7s %-4s", md.name, lin.name, set_name,
                          kPassNames[pass], fp8 ? "fp8" : "bf16");
            L.rows.push_back({label, pass, fp8, measure(L, B, start, count, fp8, pass)});
            std::fprintf(stderr, "%s done (%.0f s)\n", label,
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
          }
        }
      }
    }
  }

  // The table: TFLOP/s and the ratio to dense.
  std::printf("\ngrouped GEMM configurations:");
  for (auto c : L.configs) std::printf(" %s = %s", short_name(c).c_str(), ops::grouped_gemm_config_name(c).data());
  std::printf("\n%-30s", "TFLOP/s, ratio to dense");
  for (const auto& m : L.methods) std::printf(" %10s", m.c_str());
  std::printf("\n");
  for (const Row& r : L.rows) {
    std::printf("%-30s", r.label.c_str());
    const double dense = r.tflops.back();
    for (double v : r.tflops) {
      if (std::isnan(v))
        std::printf(" %10s", "-");
      else
        std::printf(" %5.0f %4.2f", v, v / dense);
    }
    std::printf("\n");
  }
  // Per kernel (pass x precision): each method's geometric mean ratio to dense over the shapes.
  std::printf("\ngeometric mean ratio to dense per kernel (set the best configuration as its default: "
              "grouped_gemm_instances.h)\n");
  for (int pass = 0; pass < kPasses; ++pass) {
    for (bool fp8 : {false, true}) {
      std::string line;
      for (std::size_t m = 0; m + 1 < L.methods.size(); ++m) {
        double log_sum = 0;
        int n = 0;
        for (const Row& r : L.rows) {
          if (r.pass != pass || r.fp8 != fp8 || std::isnan(r.tflops[m])) continue;
          log_sum += std::log(r.tflops[m] / r.tflops.back());
          ++n;
        }
        if (n == 0) continue;
        char cell[32];
        std::snprintf(cell, sizeof cell, "  %s %.3f", L.methods[m].c_str(), std::exp(log_sum / n));
        line += cell;
      }
      if (!line.empty()) std::printf("  %-7s %-4s%s\n", kPassNames[pass], fp8 ? "fp8" : "bf16", line.c_str());
    }
  }
  std::printf("total %.0f s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}
