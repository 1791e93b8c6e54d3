// ops/cpu/gemm_ref.cpp: see gemm_ref.h. Plain loops in double.
#include "ops/cpu/gemm_ref.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace tb::ops {

DotRef dot_ref(DType a_type, const void* a_row, DType b_type, const void* b_row, std::int64_t k, double a_scale,
               double b_scale) {
  DotRef r;
  for (std::int64_t x = 0; x < k; ++x) {
    const double p = load_as_double(a_type, a_row, std::size_t(x)) * load_as_double(b_type, b_row, std::size_t(x));
    r.value += p;
    r.abs_sum += std::fabs(p);
  }
  const double scale = a_scale * b_scale;
  r.value *= scale;
  r.abs_sum *= std::fabs(scale);
  return r;
}

// tol_acc(k) = u_in + sqrt(k) * u_acc, in units of abs_sum.
//   u_in, rounding of the products: 0 for bf16, f16, e4m3, e5m2 (stored values are exact and their products
//     are exact in fp32); 2^-23 for f32 (one fp32 rounding per product, 2^-24, times 2 for margin);
//     2^-9 for tf32 (both inputs lose 13 mantissa bits, truncated at worst: 2 * 2^-10 per product).
//   u_acc, the accumulation. Tensor cores add a k-step's products into the accumulator with truncation,
//     keeping p bits, so a step errs by up to 2^-(p-1) * |partial sum|. With zero-mean random inputs
//     (fill_uniform over [-1, 1]) partial sums stay below ~3 sqrt(k) rms|a b| <= 4 abs_sum / sqrt(k), so
//     k/s steps of width s err by at most (k/s) * 2^-(p-1) * 4 abs_sum / sqrt(k) = sqrt(k) * 2^(3-p) / s * abs_sum.
//     - fp32 accumulate (bf16, f16, tf32, f32; p = 24, s >= 8): sqrt(k) * 2^-24; taken as 2^-19 (32x margin,
//       covers split-K reductions and the fp32 epilogue).
//     - Hopper FP8 fast accumulation (p ~ 14: DeepSeek-V3 measured ~2% max relative error at k = 4096;
//       s = 32): sqrt(k) * 2^-16; taken as 2^-15. Without fast accumulation cuBLASLt promotes partial sums
//       to fp32 and is far more accurate; the same bound is used (it catches layout, scale and k-slice bugs).
//   Inputs with a non-zero mean grow partial sums like abs_sum, needing k instead of sqrt(k); this project
//   does not feed its GEMMs such data.
double gemm_tol_acc(DType a, DType b, bool fast_accum, std::int64_t k) {
  (void)fast_accum;  // fp8 uses the fast-accumulation bound either way (see above)
  const auto in_rounding = [](DType t) {
    switch (t) {
      case DType::f32: return 0x1p-23;
      case DType::tf32: return 0x1p-9;
      default: return 0.0;
    }
  };
  const double u_in = std::max(in_rounding(a), in_rounding(b));
  const double u_acc = is_fp8(a) || is_fp8(b) ? 0x1p-15 : 0x1p-19;
  return u_in + std::sqrt(double(std::max<std::int64_t>(k, 1))) * u_acc;
}

double gemm_tolerance(DType a, DType b, DType d, bool fast_accum, std::int64_t k, const DotRef& ref) {
  // Below the smallest normal number of d the rounding error is absolute: eps(d) * min_normal(d).
  const double min_normal = d == DType::f16 ? 0x1p-14 : d == DType::f64 ? 0x1p-1022 : 0x1p-126;
  return dtype_eps(d) * std::max(std::fabs(ref.value), min_normal) + gemm_tol_acc(a, b, fast_accum, k) * ref.abs_sum;
}

std::vector<GemmIndex> sample_elements(std::int64_t m, std::int64_t n, int count, std::uint64_t seed) {
  std::vector<GemmIndex> out;
  if (m <= 0 || n <= 0 || count <= 0) return out;
  if (double(count) >= double(m) * double(n)) {
    out.reserve(std::size_t(m * n));
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) out.push_back({i, j});
    return out;
  }
  out = {{0, 0}, {0, n - 1}, {m - 1, 0}, {m - 1, n - 1}};
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> row(0, m - 1), col(0, n - 1);
  while (int(out.size()) < count) out.push_back({row(rng), col(rng)});
  out.resize(std::size_t(count));
  return out;
}

void GemmCheck::add(GemmIndex at, double got, double ref, double tol) {
  ++samples;
  const double err = std::fabs(got - ref);
  const double ratio = std::isnan(err) ? INFINITY : (tol > 0 ? err / tol : (err > 0 ? INFINITY : 0.0));
  if (!(err <= tol)) ++failures;
  if (samples == 1 || ratio > max_err_over_tol) {
    max_err_over_tol = ratio;
    worst = at;
    worst_got = got;
    worst_ref = ref;
    worst_tol = tol;
  }
}

std::string GemmCheck::worst_message() const {
  if (samples == 0) return "no elements checked";
  return fmt::format("D[{},{}] = {:.6g} vs reference {:.6g} (|err| {:.3g} {} tol {:.3g}, {:.2f}x); {} of {} elements "
                     "out of tolerance",
                     worst.i, worst.j, worst_got, worst_ref, std::fabs(worst_got - worst_ref),
                     failures ? ">" : "<=", worst_tol, max_err_over_tol, failures, samples);
}

}  // namespace tb::ops
