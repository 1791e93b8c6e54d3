// ops/cpu/common.h: conventions shared by the CPU reference ops (ops/cpu/*.h).
//   T is float or double (each op is explicitly instantiated for both); reductions accumulate in double.
//   Tensors are TensorView<T>, row-major: the last dimension of a 2-D tensor must be contiguous, rows
//   may be strided (a view into a wider buffer). rope and attention take fully strided 4-D views.
//   Outputs come first as TensorView<T>; inputs are In<T> (TensorView<const T> in a non-deduced context,
//   so a TensorView<T> converts and T is deduced from the outputs).
//   Activation gradients (dx) are written; parameter gradients (dW, db, dE) are accumulated (+=), so
//   micro-batches add up and the caller zeroes them.
//   An optional tensor (no bias, a gradient not wanted) is an empty view: data() == nullptr.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>

#include "core/error.h"
#include "core/tensor.h"

namespace tb::ops::cpu {

template <class T>
using In = std::type_identity_t<TensorView<const T>>;

template <class T>
bool present(const TensorView<T>& v) {
  return v.data() != nullptr;
}

// TB_REQUIRE that v has exactly this shape: "linear: x must be [4, 8], got [4, 7]".
template <class T>
void require_shape(const TensorView<T>& v, std::initializer_list<std::int64_t> shape, std::string_view what) {
  Shape want{};
  int rank = 0;
  for (auto s : shape) want[rank++] = s;
  bool same = v.rank() == rank;
  for (int d = 0; same && d < rank; ++d) same = v.size(d) == want[d];
  TB_REQUIRE(same, std::string(what) + " must be " + shape_string(want, rank) + ", got " +
                       (v.data() ? shape_string(v.shape(), v.rank()) : std::string("an empty view")));
}

// TB_REQUIRE that a 2-D view has contiguous rows (stride 1 along the last dimension).
template <class T>
void require_rows(const TensorView<T>& v, std::string_view what) {
  TB_REQUIRE(v.rank() == 2 && (v.stride(1) == 1 || v.size(1) <= 1),
             std::string(what) + " must be a 2-D view with contiguous rows, got " + v.shape_str());
}

// Row r of a 2-D view with contiguous rows.
template <class T>
T* row(const TensorView<T>& v, std::int64_t r) {
  return v.data() + r * v.stride(0);
}

}  // namespace tb::ops::cpu
