// Tests core/tensor: strides, indexing, contiguity, slicing, reshape, const conversion, errors.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/tensor.h"

TEST(TensorView, RowMajorStridesAndIndexing) {
  std::vector<float> buf(2 * 3 * 4);
  std::iota(buf.begin(), buf.end(), 0.f);
  tb::TensorView<float> t(buf.data(), {2, 3, 4});
  EXPECT_EQ(t.rank(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.stride(0), 12);
  EXPECT_EQ(t.stride(1), 4);
  EXPECT_EQ(t.stride(2), 1);
  EXPECT_EQ(t(1, 2, 3), 23.f);
  EXPECT_EQ(t(1, 0, 2), 14.f);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.shape_str(), "[2, 3, 4]");
}

TEST(TensorView, SliceKeepsStridesAndOffsets) {
  std::vector<int> buf(5 * 4);
  std::iota(buf.begin(), buf.end(), 0);
  tb::TensorView<int> t(buf.data(), {5, 4});
  auto rows = t.slice0(2, 4);
  EXPECT_EQ(rows.size(0), 2);
  EXPECT_EQ(rows(0, 0), 8);
  EXPECT_EQ(rows(1, 3), 15);
  EXPECT_TRUE(rows.is_contiguous());
  EXPECT_THROW(t.slice0(3, 6), tb::Error);
}

TEST(TensorView, NonContiguousViewIsDetected) {
  std::vector<float> buf(4 * 8);
  // every other column of a [4, 8] matrix: shape [4, 4], strides [8, 2]
  tb::TensorView<float> cols(buf.data(), tb::Shape{4, 4, 0, 0}, tb::Shape{8, 2, 0, 0}, 2);
  EXPECT_FALSE(cols.is_contiguous());
  EXPECT_THROW(cols.reshape({16}), tb::Error);
}

TEST(TensorView, ReshapeAndConstConversion) {
  std::vector<float> buf(6, 1.f);
  tb::TensorView<float> t(buf.data(), {2, 3});
  auto flat = t.reshape({6});
  EXPECT_EQ(flat.rank(), 1);
  EXPECT_EQ(flat.data(), buf.data());
  EXPECT_THROW(t.reshape({4}), tb::Error);
  tb::TensorView<const float> c = t;
  EXPECT_TRUE(t.same_shape(c));
  EXPECT_EQ(c(1, 2), 1.f);
}

TEST(TensorView, BadRankOrDimension) {
  float x = 0;
  EXPECT_THROW(tb::TensorView<float>(&x, {1, 1, 1, 1, 1}), tb::Error);
  EXPECT_THROW(tb::TensorView<float>(&x, {-1}), tb::Error);
}
