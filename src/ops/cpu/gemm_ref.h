// ops/cpu/gemm_ref.h: the CPU reference for single elements of a GEMM, and its tolerance.
//   D[i,j] = a_scale * b_scale * sum_k A[i,k] * B[j,k]        (row-major A[m,k], B[n,k]: ops/cuda/gemm.h)
//   ref     = that sum in double, A and B decoded exactly from any DType (tb::load_as_double)
//   abs_sum = |a_scale * b_scale| * sum_k |A[i,k] * B[j,k]|    (the scale of every rounding error)
// An element passes when |D - ref| <= tol, where
//   tol = eps(d) * max(|ref|, min_normal(d)) + tol_acc(a, b, fast_accum, k) * abs_sum
// (eps(d): rounding of the stored result; tol_acc: rounding inside the GEMM, see gemm_tol_acc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace tb::ops {

struct DotRef {
  double value = 0;    // ref
  double abs_sum = 0;  // abs_sum
};

// a_row, b_row: host copies of row i of A and row j of B (k elements each, of types a_type, b_type).
DotRef dot_ref(DType a_type, const void* a_row, DType b_type, const void* b_row, std::int64_t k,
               double a_scale = 1, double b_scale = 1);

// Rounding inside the GEMM, relative to abs_sum: tol_acc = u_in + sqrt(k) * u_acc (formulas in the .cpp).
double gemm_tol_acc(DType a, DType b, bool fast_accum, std::int64_t k);
double gemm_tolerance(DType a, DType b, DType d, bool fast_accum, std::int64_t k, const DotRef& ref);

struct GemmIndex {
  std::int64_t i = 0, j = 0;  // row of D (of A), column of D (row of B)
};

// Which elements of an m x n result to check: all of them (row-major) when count >= m*n, else the four
// corners and count - 4 pseudo-random ones (deterministic in seed).
std::vector<GemmIndex> sample_elements(std::int64_t m, std::int64_t n, int count, std::uint64_t seed = 1);

// The outcome of checking elements: how many, the worst |err| / tol, and where it was.
struct GemmCheck {
  int samples = 0;
  int failures = 0;  // elements with |err| > tol (or NaN)
  double max_err_over_tol = 0;
  GemmIndex worst;
  double worst_got = 0, worst_ref = 0, worst_tol = 0;

  void add(GemmIndex at, double got, double ref, double tol);
  bool ok() const { return samples > 0 && failures == 0; }
  // "D[3,17] = 1.25 vs reference 1.5 (|err| 0.25 > tol 0.01, 25.0x); 2 of 256 elements out of tolerance"
  std::string worst_message() const;
};

}  // namespace tb::ops
