// ops/cpu/norm.cpp: RMSNorm / LayerNorm / LayerNorm1p forward and backward, and the fused residual
// form r = x + residual_in, y = norm(r). Formulas in norm.h; statistics in double.
#include "ops/cpu/norm.h"

#include <cmath>
#include <string>

namespace tb::ops::cpu {
namespace {

template <class T>
void check(NormKind kind, const TensorView<const T>& x, const TensorView<const T>& w, const TensorView<const T>& b,
           const TensorView<T>& rstd, const char* what) {
  require_rows(x, std::string(what) + ": x");
  const std::int64_t rows = x.size(0), dim = x.size(1);
  require_shape(w, {dim}, std::string(what) + ": w");
  require_shape(rstd, {rows}, std::string(what) + ": rstd");
  if (kind == NormKind::rmsnorm)
    TB_REQUIRE(!present(b), std::string(what) + ": rmsnorm has no bias");
  else if (present(b))
    require_shape(b, {dim}, std::string(what) + ": b");
}

template <class T>
double weight(NormKind kind, T w) {
  return kind == NormKind::layernorm1p ? 1.0 + double(w) : double(w);
}

}  // namespace

template <class T>
void norm_forward(NormKind kind, TensorView<T> y, TensorView<T> mean, TensorView<T> rstd, In<T> x, In<T> w,
                  In<T> b, double eps) {
  check<T>(kind, x, w, b, rstd, "norm_forward");
  const std::int64_t rows = x.size(0), dim = x.size(1);
  require_shape(y, {rows, dim}, "norm_forward: y");
  require_rows(y, "norm_forward: y");
  if (kind != NormKind::rmsnorm) require_shape(mean, {rows}, "norm_forward: mean");
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = row(x, r);
    T* yr = row(y, r);
    double mu = 0;
    if (kind != NormKind::rmsnorm) {
      for (std::int64_t i = 0; i < dim; ++i) mu += xr[i];
      mu /= double(dim);
      mean(r) = T(mu);
    }
    double ss = 0;  // sum of squares about mu (mu = 0 for rmsnorm)
    for (std::int64_t i = 0; i < dim; ++i) ss += (xr[i] - mu) * (xr[i] - mu);
    const double rs = 1.0 / std::sqrt(ss / double(dim) + eps);
    rstd(r) = T(rs);
    for (std::int64_t i = 0; i < dim; ++i)
      yr[i] = T((xr[i] - mu) * rs * weight(kind, w(i)) + (present(b) ? double(b(i)) : 0.0));
  }
}

template <class T>
void norm_backward(NormKind kind, TensorView<T> dx, TensorView<T> dw, TensorView<T> db, In<T> dy, In<T> x,
                   In<T> w, In<T> mean, In<T> rstd) {
  const std::int64_t rows = x.size(0), dim = x.size(1);
  require_rows(x, "norm_backward: x");
  require_shape(w, {dim}, "norm_backward: w");
  require_shape(rstd, {rows}, "norm_backward: rstd");
  require_shape(dy, {rows, dim}, "norm_backward: dy");
  require_rows(dy, "norm_backward: dy");
  if (present(dx)) {
    require_shape(dx, {rows, dim}, "norm_backward: dx");
    require_rows(dx, "norm_backward: dx");
  }
  if (present(dw)) require_shape(dw, {dim}, "norm_backward: dw");
  if (kind == NormKind::rmsnorm)
    TB_REQUIRE(!present(db), "norm_backward: rmsnorm has no bias (db must be empty)");
  else {
    require_shape(mean, {rows}, "norm_backward: mean");
    if (present(db)) require_shape(db, {dim}, "norm_backward: db");
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = row(x, r);
    const T* dyr = row(dy, r);
    const double mu = kind == NormKind::rmsnorm ? 0.0 : double(mean(r));
    const double rs = rstd(r);
    double sum_g = 0, sum_gxh = 0;  // over i of g_i = dy_i * w_eff_i, and of g_i * xh_i
    for (std::int64_t i = 0; i < dim; ++i) {
      const double xh = (xr[i] - mu) * rs;
      const double gi = dyr[i] * weight(kind, w(i));
      sum_g += gi;
      sum_gxh += gi * xh;
      if (present(dw)) dw(i) += T(dyr[i] * xh);
      if (present(db)) db(i) += dyr[i];
    }
    if (!present(dx)) continue;
    // rmsnorm: xh = x * rstd, and the mean(g) term is absent (no centring).
    const double mean_g = kind == NormKind::rmsnorm ? 0.0 : sum_g / double(dim);
    const double mean_gxh = sum_gxh / double(dim);
    T* dxr = row(dx, r);
    for (std::int64_t i = 0; i < dim; ++i) {
      const double xh = (xr[i] - mu) * rs;
      dxr[i] = T(rs * (dyr[i] * weight(kind, w(i)) - mean_g - xh * mean_gxh));
    }
  }
}

template <class T>
void add_norm_forward(NormKind kind, TensorView<T> y, TensorView<T> r, TensorView<T> mean, TensorView<T> rstd,
                      In<T> x, In<T> residual_in, In<T> w, In<T> b, double eps) {
  require_rows(x, "add_norm_forward: x");
  const std::int64_t rows = x.size(0), dim = x.size(1);
  require_shape(r, {rows, dim}, "add_norm_forward: r");
  require_rows(r, "add_norm_forward: r");
  if (present(residual_in)) {
    require_shape(residual_in, {rows, dim}, "add_norm_forward: residual_in");
    require_rows(residual_in, "add_norm_forward: residual_in");
  }
  for (std::int64_t t = 0; t < rows; ++t) {
    const T* xr = row(x, t);
    const T* res = present(residual_in) ? row(residual_in, t) : nullptr;
    T* rr = row(r, t);
    for (std::int64_t i = 0; i < dim; ++i) rr[i] = res ? T(xr[i] + res[i]) : xr[i];
  }
  norm_forward<T>(kind, y, mean, rstd, r, w, b, eps);
}

template <class T>
void add_norm_backward(NormKind kind, TensorView<T> dr, TensorView<T> dw, TensorView<T> db, In<T> dy,
                       In<T> dr_next, In<T> r, In<T> w, In<T> mean, In<T> rstd) {
  TB_REQUIRE(present(dr), "add_norm_backward: dr is required");
  norm_backward<T>(kind, dr, dw, db, dy, r, w, mean, rstd);
  if (!present(dr_next)) return;
  require_shape(dr_next, {dr.size(0), dr.size(1)}, "add_norm_backward: dr_next");
  require_rows(dr_next, "add_norm_backward: dr_next");
  for (std::int64_t t = 0; t < dr.size(0); ++t) {
    const T* g = row(dr_next, t);
    T* out = row(dr, t);
    for (std::int64_t i = 0; i < dr.size(1); ++i) out[i] += g[i];
  }
}

#define TB_INSTANTIATE(T)                                                                                    \
  template void norm_forward<T>(NormKind, TensorView<T>, TensorView<T>, TensorView<T>, In<T>, In<T>, In<T>, \
                                double);                                                                    \
  template void norm_backward<T>(NormKind, TensorView<T>, TensorView<T>, TensorView<T>, In<T>, In<T>, In<T>, \
                                 In<T>, In<T>);                                                             \
  template void add_norm_forward<T>(NormKind, TensorView<T>, TensorView<T>, TensorView<T>, TensorView<T>,    \
                                    In<T>, In<T>, In<T>, In<T>, double);                                    \
  template void add_norm_backward<T>(NormKind, TensorView<T>, TensorView<T>, TensorView<T>, In<T>, In<T>,   \
                                     In<T>, In<T>, In<T>, In<T>);
TB_INSTANTIATE(float)
TB_INSTANTIATE(double)
#undef TB_INSTANTIATE

}  // namespace tb::ops::cpu
