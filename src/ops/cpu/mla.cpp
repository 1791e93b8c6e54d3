// ops/cpu/mla.cpp: MLA's keys from their per-head and shared parts, and the backward (formulas in mla.h).
#include "ops/cpu/mla.h"

#include <string>

namespace tb::ops::cpu {
namespace {

// T, H, Dn, Dr of k [T, H, Dn + Dr], k_nope [T, H, Dn], k_rope [T, Dr], checked.
struct Dims {
  std::int64_t t, h, dn, dr;
};

template <class A, class B, class C>
Dims check(const TensorView<A>& k, const TensorView<B>& nope, const TensorView<C>& rope, const char* what) {
  const std::string w(what);
  TB_REQUIRE(k.rank() == 3 && nope.rank() == 3 && rope.rank() == 2,
             w + ": k must be [tokens, heads, Dn + Dr], k_nope [tokens, heads, Dn] and k_rope [tokens, Dr], got " +
                 k.shape_str() + ", " + nope.shape_str() + " and " + rope.shape_str());
  const Dims d{k.size(0), k.size(1), nope.size(2), rope.size(1)};
  require_shape(k, {d.t, d.h, d.dn + d.dr}, w + ": k");
  require_shape(nope, {d.t, d.h, d.dn}, w + ": k_nope");
  require_shape(rope, {d.t, d.dr}, w + ": k_rope");
  return d;
}

}  // namespace

template <class T>
void mla_k_forward(TensorView<T> k, In<T> k_nope, In<T> k_rope) {
  const Dims d = check(k, k_nope, k_rope, "mla_k_forward");
  for (std::int64_t t = 0; t < d.t; ++t)
    for (std::int64_t h = 0; h < d.h; ++h) {
      for (std::int64_t i = 0; i < d.dn; ++i) k(t, h, i) = k_nope(t, h, i);
      for (std::int64_t i = 0; i < d.dr; ++i) k(t, h, d.dn + i) = k_rope(t, i);
    }
}

template <class T>
void mla_k_backward(TensorView<T> dk_nope, TensorView<T> dk_rope, In<T> dk) {
  const Dims d = check(dk, dk_nope, dk_rope, "mla_k_backward");
  for (std::int64_t t = 0; t < d.t; ++t) {
    for (std::int64_t h = 0; h < d.h; ++h)
      for (std::int64_t i = 0; i < d.dn; ++i) dk_nope(t, h, i) = dk(t, h, i);
    for (std::int64_t i = 0; i < d.dr; ++i) {
      double sum = 0;
      for (std::int64_t h = 0; h < d.h; ++h) sum += double(dk(t, h, d.dn + i));
      dk_rope(t, i) = T(sum);
    }
  }
}

template void mla_k_forward<float>(TensorView<float>, In<float>, In<float>);
template void mla_k_forward<double>(TensorView<double>, In<double>, In<double>);
template void mla_k_backward<float>(TensorView<float>, TensorView<float>, In<float>);
template void mla_k_backward<double>(TensorView<double>, TensorView<double>, In<double>);

}  // namespace tb::ops::cpu
