// ops/cpu/lora.cpp: a LoRA adapter and its dropout (ops/cpu/lora.h), over the linear reference (ops/cpu/linear.h).
#include "ops/cpu/lora.h"

#include <vector>

#include "core/counter_rng.h"
#include "ops/cpu/linear.h"

namespace tb::ops::cpu {

bool DropoutMask::keeps(std::int64_t t, std::int64_t j) const {
  if (p <= 0) return true;
  const std::uint64_t key = dropout_row_key(stream, std::uint64_t(index[std::size_t(t)]));
  return dropout_bits(key, std::uint64_t(col0 + j)) >= dropout_threshold(p);
}

template <class T>
void lora_dropout_forward(TensorView<T> xd, In<T> x, const DropoutMask& m) {
  require_rows(x, "lora_dropout_forward: x");
  require_shape(xd, {x.size(0), x.size(1)}, "lora_dropout_forward: xd");
  require_rows(xd, "lora_dropout_forward: xd");
  TB_REQUIRE(m.p >= 0 && m.p < 1 && std::int64_t(m.index.size()) == x.size(0) && m.col0 + x.size(1) <= m.cols,
             "lora_dropout_forward: p must be in [0, 1) and the mask must index every row and column of x");
  const double keep_scale = m.p > 0 ? dropout_keep_scale(m.p) : 1.0;
  for (std::int64_t t = 0; t < x.size(0); ++t)
    for (std::int64_t j = 0; j < x.size(1); ++j)
      row(xd, t)[j] = m.keeps(t, j) ? T(double(row(x, t)[j]) * keep_scale) : T(0);
}

template <class T>
void lora_dropout_backward(TensorView<T> dx, In<T> dxd, const DropoutMask& m) {
  require_rows(dxd, "lora_dropout_backward: dxd");
  require_shape(dx, {dxd.size(0), dxd.size(1)}, "lora_dropout_backward: dx");
  require_rows(dx, "lora_dropout_backward: dx");
  const double keep_scale = m.p > 0 ? dropout_keep_scale(m.p) : 1.0;
  for (std::int64_t t = 0; t < dxd.size(0); ++t)
    for (std::int64_t j = 0; j < dxd.size(1); ++j)
      if (m.keeps(t, j)) row(dx, t)[j] += T(double(row(dxd, t)[j]) * keep_scale);
}

template <class T>
void lora_forward(TensorView<T> y, TensorView<T> z, In<T> xd, In<T> a, In<T> b, double scale) {
  require_shape(y, {xd.size(0), b.size(0)}, "lora_forward: y");
  require_rows(y, "lora_forward: y");
  linear_forward<T>(z, xd, a);
  std::vector<T> u(std::size_t(y.size(0) * y.size(1)));
  linear_forward<T>(TensorView<T>(u.data(), {y.size(0), y.size(1)}), z, b);
  for (std::int64_t t = 0; t < y.size(0); ++t)
    for (std::int64_t j = 0; j < y.size(1); ++j)
      row(y, t)[j] += T(scale * double(u[std::size_t(t * y.size(1) + j)]));
}

template <class T>
void lora_backward(TensorView<T> dxd, TensorView<T> da, TensorView<T> db, In<T> dy, In<T> xd, In<T> z, In<T> a,
                   In<T> b, double scale) {
  require_rows(dy, "lora_backward: dy");
  const std::int64_t rows = dy.size(0), out = dy.size(1), r = z.size(1);
  std::vector<T> dys(std::size_t(rows * out)), dz(std::size_t(rows * r));
  for (std::int64_t t = 0; t < rows; ++t)
    for (std::int64_t j = 0; j < out; ++j) dys[std::size_t(t * out + j)] = T(scale * double(row(dy, t)[j]));
  const TensorView<T> dz_view(dz.data(), {rows, r});
  linear_backward<T>(dz_view, db, {}, TensorView<const T>(dys.data(), {rows, out}), z, b);  // dz, dB
  linear_backward<T>(dxd, da, {}, dz_view, xd, a);                                          // dxd, dA
}

#define TB_INSTANTIATE(T)                                                                                     \
  template void lora_dropout_forward<T>(TensorView<T>, In<T>, const DropoutMask&);                            \
  template void lora_dropout_backward<T>(TensorView<T>, In<T>, const DropoutMask&);                           \
  template void lora_forward<T>(TensorView<T>, TensorView<T>, In<T>, In<T>, In<T>, double);                   \
  template void lora_backward<T>(TensorView<T>, TensorView<T>, TensorView<T>, In<T>, In<T>, In<T>, In<T>, In<T>, \
                                 double);
TB_INSTANTIATE(float)
TB_INSTANTIATE(double)
#undef TB_INSTANTIATE

}  // namespace tb::ops::cpu
