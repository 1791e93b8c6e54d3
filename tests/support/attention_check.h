// tests/support/attention_check.h: what the attention GPU tests (bf16 and FP8) share: [b, s, heads, d] views into host
// copies of the fused QKV layout (ops/cuda/attention.h), the error summary of a GPU result against the CPU reference
// (relative L2 = ||got - ref|| / ||ref||, max |got - ref|, max |ref|, non-finite count), and the reference forward
// and backward on the host copies (ops/cpu/attention.h, in double). Each test fills the host copies its own way.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/tensor.h"
#include "ops/cpu/attention.h"
#include "ops/cuda/attention.h"

namespace tb::testing_support {

// [b, s, heads, d] view with the given strides, starting `col` elements into v.
inline TensorView<double> heads_view(std::vector<double>& v, std::int64_t col, const ops::AttentionShape& s,
                                     std::int64_t heads, const ops::HeadStrides& t) {
  return TensorView<double>(v.data() + col, Shape{s.batch, s.seq, heads, s.head_dim}, Shape{t.batch, t.seq, t.head, 1},
                            4);
}

struct Err {
  double rel_l2 = 0, max_abs = 0, max_ref = 0;
  std::int64_t nonfinite = 0;
};

// Over every element of two views of the same shape (rank 3 or 4); non-finite results make the errors infinite.
inline Err compare(const TensorView<double>& got, const TensorView<double>& ref) {
  Err e;
  double num = 0, den = 0;
  const auto n = [&](int d) { return d < got.rank() ? got.size(d) : std::int64_t(1); };
  for (std::int64_t a = 0; a < n(0); ++a)
    for (std::int64_t b = 0; b < n(1); ++b)
      for (std::int64_t c = 0; c < n(2); ++c)
        for (std::int64_t d = 0; d < n(3); ++d) {
          const double g = got.rank() == 4 ? got(a, b, c, d) : got(a, b, c);
          const double r = ref.rank() == 4 ? ref(a, b, c, d) : ref(a, b, c);
          if (!std::isfinite(g)) ++e.nonfinite;
          num += (g - r) * (g - r);
          den += r * r;
          e.max_abs = std::max(e.max_abs, std::abs(g - r));
          e.max_ref = std::max(e.max_ref, std::abs(r));
        }
  e.rel_l2 = std::sqrt(num / den);
  if (e.nonfinite) e.rel_l2 = e.max_abs = std::numeric_limits<double>::infinity();
  return e;
}

// Host copies of one call's tensors (qkv and dqkv fused, o and dout [b, s, H, d], lse [b, H, s]) and the reference.
struct AttentionHostCheck {
  ops::AttentionShape s;
  std::int64_t qd, kvd;
  std::vector<double> qkv, o, lse, dout, dqkv;   // from the GPU (the test fills them)
  std::vector<double> o_ref, lse_ref, dqkv_ref;  // CPU reference (reference_forward / reference)

  explicit AttentionHostCheck(const ops::AttentionShape& shape)
      : s(shape), qd(s.heads * s.head_dim), kvd(s.kv_heads * s.head_dim) {}
  // Views of a fused (d)QKV host buffer, of an o-shaped one, of an lse-shaped one.
  TensorView<double> q(std::vector<double>& buf) { return heads_view(buf, 0, s, s.heads, s.q); }
  TensorView<double> k(std::vector<double>& buf) { return heads_view(buf, qd, s, s.kv_heads, s.k); }
  TensorView<double> v(std::vector<double>& buf) { return heads_view(buf, qd + kvd, s, s.kv_heads, s.v); }
  TensorView<double> out(std::vector<double>& buf) { return heads_view(buf, 0, s, s.heads, s.o); }
  TensorView<double> stats(std::vector<double>& buf) { return TensorView<double>(buf.data(), {s.batch, s.heads, s.seq}); }

  void reference_forward() {
    o_ref.assign(o.size(), 0.0);
    lse_ref.assign(lse.size(), 0.0);
    ops::cpu::attention_forward<double>(out(o_ref), stats(lse_ref), q(qkv), k(qkv), v(qkv));
  }
  void reference() {
    reference_forward();
    dqkv_ref.assign(dqkv.size(), 0.0);
    ops::cpu::attention_backward<double>(q(dqkv_ref), k(dqkv_ref), v(dqkv_ref), out(dout), q(qkv), k(qkv), v(qkv),
                                         out(o), stats(lse_ref));
  }
};

}  // namespace tb::testing_support
