// ops/cpu/linear.cpp: y = x W^T (+ b) and its backward; formulas in linear.h. Inner loops run along
// contiguous rows (dot products of rows for y, row axpys for dx and dW); sums in double for y.
#include "ops/cpu/linear.h"

#include <algorithm>
#include <string>
#include <vector>

namespace tb::ops::cpu {

template <class T>
void linear_forward(TensorView<T> y, In<T> x, In<T> w, In<T> b) {
  require_rows(x, "linear_forward: x");
  require_rows(w, "linear_forward: w");
  const std::int64_t rows = x.size(0), k = x.size(1), n = w.size(0);
  TB_REQUIRE(w.size(1) == k, "linear_forward: x " + x.shape_str() + " and W " + w.shape_str() +
                                 " disagree on the inner dimension (W is [out, in])");
  require_shape(y, {rows, n}, "linear_forward: y");
  require_rows(y, "linear_forward: y");
  if (present(b)) require_shape(b, {n}, "linear_forward: b");
  for (std::int64_t t = 0; t < rows; ++t) {
    const T* xr = row(x, t);
    T* yr = row(y, t);
    for (std::int64_t j = 0; j < n; ++j) {
      const T* wr = row(w, j);
      double acc = present(b) ? double(b(j)) : 0.0;
      for (std::int64_t i = 0; i < k; ++i) acc += double(xr[i]) * double(wr[i]);
      yr[j] = T(acc);
    }
  }
}

template <class T>
void linear_backward(TensorView<T> dx, TensorView<T> dw, TensorView<T> db, In<T> dy, In<T> x, In<T> w) {
  require_rows(x, "linear_backward: x");
  require_rows(w, "linear_backward: w");
  const std::int64_t rows = x.size(0), k = x.size(1), n = w.size(0);
  TB_REQUIRE(w.size(1) == k, "linear_backward: x " + x.shape_str() + " and W " + w.shape_str() +
                                 " disagree on the inner dimension (W is [out, in])");
  require_shape(dy, {rows, n}, "linear_backward: dy");
  require_rows(dy, "linear_backward: dy");
  if (present(dx)) {
    require_shape(dx, {rows, k}, "linear_backward: dx");
    require_rows(dx, "linear_backward: dx");
    std::vector<double> acc(static_cast<std::size_t>(k));
    for (std::int64_t t = 0; t < rows; ++t) {
      std::fill(acc.begin(), acc.end(), 0.0);
      const T* g = row(dy, t);
      for (std::int64_t j = 0; j < n; ++j) {
        const T* wr = row(w, j);
        for (std::int64_t i = 0; i < k; ++i) acc[std::size_t(i)] += double(g[j]) * double(wr[i]);
      }
      T* dxr = row(dx, t);
      for (std::int64_t i = 0; i < k; ++i) dxr[i] = T(acc[std::size_t(i)]);
    }
  }
  if (present(dw)) {
    require_shape(dw, {n, k}, "linear_backward: dW");
    require_rows(dw, "linear_backward: dW");
    std::vector<double> acc(static_cast<std::size_t>(k));
    for (std::int64_t j = 0; j < n; ++j) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (std::int64_t t = 0; t < rows; ++t) {
        const double g = row(dy, t)[j];
        const T* xr = row(x, t);
        for (std::int64_t i = 0; i < k; ++i) acc[std::size_t(i)] += g * double(xr[i]);
      }
      T* dwr = row(dw, j);
      for (std::int64_t i = 0; i < k; ++i) dwr[i] += T(acc[std::size_t(i)]);
    }
  }
  if (present(db)) {
    require_shape(db, {n}, "linear_backward: db");
    for (std::int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (std::int64_t t = 0; t < rows; ++t) acc += row(dy, t)[j];
      db(j) += T(acc);
    }
  }
}

#define TB_INSTANTIATE(T)                                                                          \
  template void linear_forward<T>(TensorView<T>, In<T>, In<T>, In<T>);                             \
  template void linear_backward<T>(TensorView<T>, TensorView<T>, TensorView<T>, In<T>, In<T>, In<T>);
TB_INSTANTIATE(float)
TB_INSTANTIATE(double)
#undef TB_INSTANTIATE

}  // namespace tb::ops::cpu
