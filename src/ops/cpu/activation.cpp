// ops/cpu/activation.cpp: swiglu, gelu (tanh) and squared ReLU forward and backward; formulas in activation.h.
#include "ops/cpu/activation.h"

#include <cmath>
#include <numbers>
#include <string>

namespace tb::ops::cpu {
namespace {

double sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }

const double kGeluC = std::sqrt(2.0 / std::numbers::pi);
constexpr double kGeluA = 0.044715;

double gelu(double x) { return 0.5 * x * (1.0 + std::tanh(kGeluC * (x + kGeluA * x * x * x))); }
double gelu_grad(double x) {
  const double th = std::tanh(kGeluC * (x + kGeluA * x * x * x));
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * kGeluC * (1.0 + 3.0 * kGeluA * x * x);
}

// Shapes of an elementwise op: y and x the same [t, n].
template <class T>
void check_same(const TensorView<T>& y, const TensorView<const T>& x, const char* what) {
  require_rows(x, std::string(what) + ": x");
  require_shape(y, {x.size(0), x.size(1)}, std::string(what) + ": output");
  require_rows(y, std::string(what) + ": output");
}

// y[t,i] = f(x[t,i]);  dx[t,i] = dy[t,i] * f'(x[t,i])
template <class T, class F>
void map_forward(TensorView<T> y, TensorView<const T> x, F f, const char* what) {
  check_same(y, x, what);
  for (std::int64_t t = 0; t < x.size(0); ++t) {
    const T* xr = row(x, t);
    T* yr = row(y, t);
    for (std::int64_t i = 0; i < x.size(1); ++i) yr[i] = T(f(double(xr[i])));
  }
}
template <class T, class F>
void map_backward(TensorView<T> dx, TensorView<const T> dy, TensorView<const T> x, F fprime, const char* what) {
  check_same(dx, x, what);
  require_shape(dy, {x.size(0), x.size(1)}, std::string(what) + ": dy");
  require_rows(dy, std::string(what) + ": dy");
  for (std::int64_t t = 0; t < x.size(0); ++t) {
    const T* xr = row(x, t);
    const T* g = row(dy, t);
    T* dxr = row(dx, t);
    for (std::int64_t i = 0; i < x.size(1); ++i) dxr[i] = T(double(g[i]) * fprime(double(xr[i])));
  }
}

}  // namespace

template <class T>
void swiglu_forward(TensorView<T> y, In<T> x) {
  require_rows(x, "swiglu_forward: x");
  TB_REQUIRE(x.size(1) % 2 == 0, "swiglu_forward: x must be [t, 2f] (gate then up), got " + x.shape_str());
  const std::int64_t f = x.size(1) / 2;
  require_shape(y, {x.size(0), f}, "swiglu_forward: y");
  require_rows(y, "swiglu_forward: y");
  for (std::int64_t t = 0; t < x.size(0); ++t) {
    const T* gate = row(x, t);
    const T* up = gate + f;
    T* yr = row(y, t);
    for (std::int64_t i = 0; i < f; ++i) yr[i] = T(gate[i] * sigmoid(gate[i]) * up[i]);
  }
}

template <class T>
void swiglu_backward(TensorView<T> dx, In<T> dy, In<T> x) {
  require_rows(x, "swiglu_backward: x");
  TB_REQUIRE(x.size(1) % 2 == 0, "swiglu_backward: x must be [t, 2f] (gate then up), got " + x.shape_str());
  const std::int64_t f = x.size(1) / 2;
  require_shape(dy, {x.size(0), f}, "swiglu_backward: dy");
  require_rows(dy, "swiglu_backward: dy");
  require_shape(dx, {x.size(0), 2 * f}, "swiglu_backward: dx");
  require_rows(dx, "swiglu_backward: dx");
  for (std::int64_t t = 0; t < x.size(0); ++t) {
    const T* gate = row(x, t);
    const T* up = gate + f;
    const T* g = row(dy, t);
    T* dgate = row(dx, t);
    T* dup = dgate + f;
    for (std::int64_t i = 0; i < f; ++i) {
      const double sg = sigmoid(gate[i]);
      dgate[i] = T(double(g[i]) * up[i] * sg * (1.0 + gate[i] * (1.0 - sg)));
      dup[i] = T(double(g[i]) * gate[i] * sg);
    }
  }
}

template <class T>
void gelu_forward(TensorView<T> y, In<T> x) {
  map_forward<T>(y, x, gelu, "gelu_forward");
}
template <class T>
void gelu_backward(TensorView<T> dx, In<T> dy, In<T> x) {
  map_backward<T>(dx, dy, x, gelu_grad, "gelu_backward");
}

template <class T>
void sqrelu_forward(TensorView<T> y, In<T> x) {
  map_forward<T>(y, x, [](double v) { return v > 0 ? v * v : 0.0; }, "sqrelu_forward");
}
template <class T>
void sqrelu_backward(TensorView<T> dx, In<T> dy, In<T> x) {
  map_backward<T>(dx, dy, x, [](double v) { return v > 0 ? 2.0 * v : 0.0; }, "sqrelu_backward");
}

#define TB_INSTANTIATE(T)                                                   \
  template void swiglu_forward<T>(TensorView<T>, In<T>);                    \
  template void swiglu_backward<T>(TensorView<T>, In<T>, In<T>);            \
  template void gelu_forward<T>(TensorView<T>, In<T>);                      \
  template void gelu_backward<T>(TensorView<T>, In<T>, In<T>);              \
  template void sqrelu_forward<T>(TensorView<T>, In<T>);                    \
  template void sqrelu_backward<T>(TensorView<T>, In<T>, In<T>);
TB_INSTANTIATE(float)
TB_INSTANTIATE(double)
#undef TB_INSTANTIATE

}  // namespace tb::ops::cpu
