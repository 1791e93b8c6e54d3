// micro/gemm.cpp: the GEMM microbenchmark (suite "gemm"). Cases: input types x (square sizes and
// MxNxK, plus the named shape sets of micro/gemm_shapes.h at each tp), on each chosen GPU. Per case:
//   plan once (ops/cuda/gemm.h), random inputs (fill_uniform over [-1, 1]) rotated among enough copies
//   that the inputs total >= 3x L2 (at most 8), timed with bench::time_stream, then 256 sampled elements
//   checked against ops/cpu/gemm_ref (tolerance there). Unless spec.tune is off, each algorithm the
//   cuBLASLt heuristic offers (up to 8) is timed briefly first and the fastest is measured (autotuning).
//   tflops = 2 m n k / median time;  peak_fraction = tflops / the GPU model's dense peak for the input type.
// Defaults: dtypes bf16 f16 tf32 e4m3 e4m3xe5m2 (quick: bf16 e4m3); sizes 2048 4096 8192 16384 (quick:
// 8192), or none when only shape sets are asked for. Record case: "<dtype>/<m>x<n>x<k>" or "<dtype>/<set name>".
// FP8 runs with per-tensor scales a 0.5, b 4.0 (not 1, so scale handling is checked), fast accumulation
// on square sizes and forward GEMMs (as Transformer Engine does), not on dgrad/wgrad.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <optional>

#include "bench/gemm_tune.h"
#include "bench/loop.h"
#include "core/error.h"
#include "micro/case.h"
#include "micro/gemm_shapes.h"
#include "micro/suite.h"
#include "ops/cuda/context.h"
#include "ops/cuda/fill.h"
#include "recipe/system.h"

namespace tb::micro {
namespace {

constexpr const char* kBench = "micro.gemm";
constexpr float kScales[2] = {0.5f, 4.0f};  // fp8 a_scale, b_scale
constexpr int kVerifySamples = 256;
constexpr int kMaxCopies = 8;

struct Case {
  ops::GemmShape shape;
  std::string types;  // "bf16", "e4m3xe5m2"
  std::string label;  // "8192x8192x8192" or "llama3.1-8b/tp1/qkv.fprop"
  std::string name() const { return types + "/" + label; }
};

// "bf16", "fp16", "tf32", "e4m3", "e4m3xe5m2", ...: the input types, and the output type they imply.
ops::GemmShape parse_types(const std::string& spec) {
  const auto one = [&](std::string_view s) {
    auto t = parse_dtype(s);
    TB_REQUIRE(t, fmt::format("unknown GEMM dtype '{}' in '{}': use bf16, f16, tf32, f32, e4m3, e4m3xe5m2 or "
                              "e5m2xe4m3",
                              s, spec));
    return *t;
  };
  const auto x = spec.find('x');
  ops::GemmShape s;
  s.a = one(std::string_view(spec).substr(0, x));
  s.b = x == std::string::npos ? s.a : one(std::string_view(spec).substr(x + 1));
  s.d = is_fp8(s.a) ? DType::bf16 : (s.a == DType::tf32 || s.a == DType::f32) ? DType::f32 : s.a;
  s.m = s.n = s.k = 16;
  ops::check_gemm_shape(s);  // unsupported combinations fail here, before any GPU work
  return s;
}

// "8192" -> 8192x8192x8192; "MxNxK" as given.
std::array<std::int64_t, 3> parse_gemm_size(const std::string& spec) {
  std::array<std::int64_t, 3> v{};
  int count = 0;
  const char* p = spec.data();
  const char* end = spec.data() + spec.size();
  bool ok = !spec.empty();
  while (ok && p < end && count < 3) {
    auto [q, ec] = std::from_chars(p, end, v[count]);
    ok = ec == std::errc() && v[count] > 0;
    ++count;
    p = q;
    if (p < end) ok = ok && *p++ == 'x' && p < end;
  }
  ok = ok && p == end && (count == 1 || count == 3);
  TB_REQUIRE(ok, fmt::format("bad GEMM size '{}': expected N (an N x N x N GEMM) or MxNxK, e.g. 8192 or "
                             "8192x1024x4096",
                             spec));
  if (count == 1) v[1] = v[2] = v[0];
  return v;
}

// Every case, validated before touching a GPU.
std::vector<Case> build_cases(const Spec& spec) {
  std::vector<std::string> dtypes = spec.dtypes, sizes = spec.sizes;
  if (dtypes.empty())
    dtypes = spec.quick ? std::vector<std::string>{"bf16", "e4m3"}
                        : std::vector<std::string>{"bf16", "f16", "tf32", "e4m3", "e4m3xe5m2"};
  if (sizes.empty() && spec.shapes.empty())
    sizes = spec.quick ? std::vector<std::string>{"8192"} : std::vector<std::string>{"2048", "4096", "8192", "16384"};

  std::vector<Case> cases;
  for (const auto& dt : dtypes) {
    const ops::GemmShape types = parse_types(dt);
    const std::string tname = ops::gemm_types_name(types.a, types.b);
    const bool fp8 = is_fp8(types.a);
    for (const auto& size : sizes) {
      const auto [m, n, k] = parse_gemm_size(size);
      ops::GemmShape s = types;
      s.m = m, s.n = n, s.k = k, s.fast_accum = fp8;
      cases.push_back({s, tname, fmt::format("{}x{}x{}", m, n, k)});
    }
    for (const auto& set : spec.shapes)
      for (int tp : spec.tp)
        for (const auto& g : gemm_shape_set(set, tp)) {
          ops::GemmShape s = types;
          s.m = g.m, s.n = g.n, s.k = g.k, s.fast_accum = fp8 && g.fprop;
          cases.push_back({s, tname, g.name});
        }
  }
  for (const auto& c : cases) ops::check_gemm_shape(c.shape);
  return cases;
}

std::size_t bytes_of(DType t, std::int64_t rows, std::int64_t cols) {
  return std::size_t(rows) * std::size_t(cols) * dtype_size(t);
}

std::string measure(Context& ctx, ops::DeviceContext& dc, const Case& c, Record& r) {
  const ops::GemmShape& s = c.shape;
  const int dev = dc.device();
  const bool fp8 = is_fp8(s.a);
  ops::GemmPlan& plan = dc.gemm_plan(s);

  // Inputs: rotate among copies so that they do not sit in L2 (>= 3x L2 in all, at most kMaxCopies).
  const std::size_t a_bytes = bytes_of(s.a, s.m, s.k), b_bytes = bytes_of(s.b, s.n, s.k);
  const int copies = int(std::clamp<std::size_t>((3 * dc.l2_bytes() + a_bytes + b_bytes - 1) / (a_bytes + b_bytes),
                                                 1, kMaxCopies));
  std::vector<ops::DeviceBuffer> a, b;
  for (int i = 0; i < copies; ++i) {
    a.emplace_back(dev, a_bytes);
    b.emplace_back(dev, b_bytes);
    ops::fill_uniform(a[i].get(), s.a, std::size_t(s.m * s.k), 2 * i + 1, -1.0f, 1.0f, dc.stream());
    ops::fill_uniform(b[i].get(), s.b, std::size_t(s.n * s.k), 2 * i + 2, -1.0f, 1.0f, dc.stream());
  }
  ops::DeviceBuffer d(dev, bytes_of(s.d, s.m, s.n));
  std::optional<ops::DeviceScales> scale_buf;
  ops::GemmScales scales;
  if (fp8) scales = scale_buf.emplace(dev, kScales[0], kScales[1], dc.stream()).scales();

  const ops::Workspace ws = dc.workspace();
  auto body = [&](int iter) {
    const int i = (iter % copies + copies) % copies;  // warmup iterations are negative
    plan.run(d.get(), a[i].get(), b[i].get(), ws, dc.stream(), scales);
  };
  if (ctx.spec.tune) bench::tune_plan(dc, plan, body);
  const bench::Timing timing = bench::time_stream(loop_spec(ctx, 10, 50, 100), dev, dc.stream(), body);
  note_timing(ctx, timing);
  const Summary t = timing.summary();

  const double tflops = plan.flops() / (t.median * 1e-3) / 1e12;
  const auto& algo = plan.algo();
  r.data = {{"m", s.m},
            {"n", s.n},
            {"k", s.k},
            {"dtype", c.types},
            {"out_dtype", dtype_name(s.d)},
            {"copies", copies},
            {"time_us", to_json(scaled(t, 1e3))},
            {"tflops", tflops},
            {"algo",
             {{"id", algo.id},
              {"tile", algo.tile},
              {"stages", algo.stages},
              {"splitk", algo.splitk},
              {"workspace_bytes", algo.workspace_bytes},
              {"heuristic_rank", algo.rank},
              {"candidates", algo.candidates},
              {"desc", algo.describe()}}}};
  if (fp8) {
    r.data["fast_accum"] = s.fast_accum;
    r.data["scales"] = {kScales[0], kScales[1]};
  }
  std::string peak_text;
  const double peak = ctx.system ? ctx.system->peak_tflops(dtype_name(s.a)) : 0.0;
  if (peak > 0) {
    r.data["peak_fraction"] = tflops / peak;
    r.data["peak_tflops"] = peak;
    peak_text = fmt::format("  {:5.1f}% of {:.0f}", 100 * tflops / peak, peak);
  }

  std::string verdict = "not verified";
  if (ctx.spec.verify) {
    plan.run(d.get(), a[0].get(), b[0].get(), ws, dc.stream(), scales);
    const auto elements = ops::sample_elements(s.m, s.n, kVerifySamples);
    const ops::GemmCheck check = ops::verify_gemm(s, d.get(), a[0].get(), b[0].get(), fp8 ? kScales[0] : 1.0,
                                                  fp8 ? kScales[1] : 1.0, elements, dc.stream());
    const double worst = check.max_err_over_tol;
    r.data["verify"] = {{"samples", check.samples},
                        {"max_err_over_tol", std::isfinite(worst) ? nlohmann::json(worst) : nlohmann::json("inf")},
                        {"ok", check.ok()}};
    if (check.ok()) {
      verdict = "verified";
    } else {
      r.status = Status::error;
      r.error_kind = "verify";
      r.error_msg = fmt::format("GEMM {} on gpu{} differs from the CPU reference: {}", ops::describe(s), dev,
                                check.worst_message());
      verdict = fmt::format("VERIFY FAILED: {}", check.worst_message());
    }
  }
  return fmt::format("gemm  {:<10} {:<28} gpu{:<2} {:7.1f} TFLOP/s{}   algo {}  {}", c.types, c.label, dev, tflops,
                     peak_text, algo.id, verdict);
}

void run_on_device(Context& ctx, ops::DeviceContext& dc, const Case& c) {
  if (is_fp8(c.shape.a) && dc.compute_capability() < 89) {
    Record r = Record::skipped(kBench, c.name(),
                               fmt::format("fp8 GEMMs need compute capability 8.9 or newer (Ada, Hopper, Blackwell); "
                                           "gpu{} has {}.{}",
                                           dc.device(), dc.compute_capability() / 10, dc.compute_capability() % 10));
    r.device = dc.device();
    const std::string line =
        fmt::format("gemm  {:<10} {:<28} gpu{:<2} skipped: {}", c.types, c.label, dc.device(), r.reason);
    ctx.out.add(std::move(r), line);
    return;
  }
  Record rec;
  rec.bench = kBench;
  rec.name = c.name();
  rec.device = dc.device();
  run_case(ctx, std::move(rec), {dc.device()}, [&](Record& r) { return measure(ctx, dc, c, r); });
}

}  // namespace

void run_gemm(Context& ctx) {
  const std::vector<Case> cases = build_cases(ctx.spec);
  for (int dev : resolve_devices(ctx.spec)) {
    std::unique_ptr<ops::DeviceContext> dc;
    try {
      dc = std::make_unique<ops::DeviceContext>(dev);
    } catch (const Error& e) {  // this GPU cannot even start: one error record, then the next GPU
      Record r = Record::failed(kBench, "setup", e);
      r.device = dev;
      ctx.out.add(std::move(r), fmt::format("gemm  gpu{}  error: {}", dev, e.detail()));
      if (e.fatal()) throw;
      continue;
    }
    for (const auto& c : cases) run_on_device(ctx, *dc, c);
  }
}

}  // namespace tb::micro
