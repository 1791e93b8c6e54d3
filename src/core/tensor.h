// core/tensor.h: TensorView<T>, a non-owning view of a strided array on the host or a device.
//   element (i0, ..., i{r-1}) lives at data + sum_k i_k * stride_k (strides in elements);
//   contiguous (row-major): stride_{r-1} = 1, stride_k = stride_{k+1} * shape_{k+1}.
// Views never allocate; ops take them by value. Rank is at most 4 (batch, sequence, heads, dim).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "core/error.h"

namespace tb {

inline constexpr int kMaxDims = 4;
using Shape = std::array<std::int64_t, kMaxDims>;

std::string shape_string(const Shape& shape, int rank);  // "[8192, 4096]"

template <class T>
class TensorView {
 public:
  TensorView() = default;
  // A contiguous row-major view of `shape` at data.
  TensorView(T* data, std::initializer_list<std::int64_t> shape) : data_(data), rank_(int(shape.size())) {
    TB_REQUIRE(rank_ >= 1 && rank_ <= kMaxDims, "TensorView: rank must be 1 to 4");
    int k = 0;
    for (auto s : shape) {
      TB_REQUIRE(s >= 0, "TensorView: dimensions must be >= 0");
      shape_[k++] = s;
    }
    stride_[rank_ - 1] = 1;
    for (int d = rank_ - 2; d >= 0; --d) stride_[d] = stride_[d + 1] * shape_[d + 1];
  }
  TensorView(T* data, const Shape& shape, const Shape& stride, int rank)
      : data_(data), shape_(shape), stride_(stride), rank_(rank) {
    TB_REQUIRE(rank_ >= 1 && rank_ <= kMaxDims, "TensorView: rank must be 1 to 4");
  }
  // A view of T converts to a view of const T.
  template <class U, class = std::enable_if_t<std::is_same_v<const U, T> && !std::is_same_v<U, T>>>
  TensorView(const TensorView<U>& o) : data_(o.data()), shape_(o.shape()), stride_(o.strides()), rank_(o.rank()) {}

  T* data() const { return data_; }
  int rank() const { return rank_; }
  std::int64_t size(int d) const { return shape_[d]; }
  std::int64_t stride(int d) const { return stride_[d]; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return stride_; }
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (int d = 0; d < rank_; ++d) n *= shape_[d];
    return n;
  }
  bool is_contiguous() const {
    std::int64_t expect = 1;
    for (int d = rank_ - 1; d >= 0; --d) {
      if (shape_[d] != 1 && stride_[d] != expect) return false;
      expect *= shape_[d];
    }
    return true;
  }
  bool same_shape(const TensorView<std::add_const_t<T>>& o) const {
    if (o.rank() != rank_) return false;
    for (int d = 0; d < rank_; ++d)
      if (o.size(d) != shape_[d]) return false;
    return true;
  }
  std::string shape_str() const { return shape_string(shape_, rank_); }

  // Host-side element access (tests, CPU reference): offset of (i0, ...) in elements.
  template <class... I>
  std::int64_t offset(I... idx) const {
    static_assert(sizeof...(I) <= kMaxDims);
    const std::int64_t ix[] = {std::int64_t(idx)...};
    std::int64_t off = 0;
    for (int d = 0; d < int(sizeof...(I)); ++d) off += ix[d] * stride_[d];
    return off;
  }
  template <class... I>
  T& operator()(I... idx) const { return data_[offset(idx...)]; }

  // The view of rows [begin, end) of dimension 0 (no copy).
  TensorView slice0(std::int64_t begin, std::int64_t end) const {
    TB_REQUIRE(0 <= begin && begin <= end && end <= shape_[0], "TensorView::slice0: rows out of range");
    Shape s = shape_;
    s[0] = end - begin;
    return TensorView(data_ + begin * stride_[0], s, stride_, rank_);
  }
  // The same elements with another contiguous shape (the view must be contiguous, numel unchanged).
  TensorView reshape(std::initializer_list<std::int64_t> shape) const {
    TB_REQUIRE(is_contiguous(), "TensorView::reshape: only a contiguous view can be reshaped");
    TensorView v(data_, shape);
    TB_REQUIRE(v.numel() == numel(), "TensorView::reshape: " + shape_str() + " and " + v.shape_str() +
                                         " do not hold the same number of elements");
    return v;
  }

 private:
  T* data_ = nullptr;
  Shape shape_{};
  Shape stride_{};
  int rank_ = 0;
};

}  // namespace tb
