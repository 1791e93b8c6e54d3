// ops/cuda/activation.cu: see activation.h. One thread per 8-element vector of a row; a 2-D block of
// (vectors of a row) x (rows) so that narrow rows still fill the block, rows strided over grid.y.
#include "ops/cuda/activation.h"

#include <algorithm>
#include <string>

#include "ops/cuda/fp8_cast.cuh"  // OutMax, record_block_amax
#include "ops/cuda/kernel_common.cuh"

namespace tb::ops {
namespace {

using namespace detail;

constexpr int kThreads = kCastThreads;  // 256, as the cast tiles

// sigmoid(v) = 1 / (1 + e), e = exp(-v); also 1 - sigmoid(v) = e / (1 + e) without cancellation.
struct Sigmoid {
  float s, one_minus_s;
  __device__ __forceinline__ explicit Sigmoid(float v) {
    const float e = __expf(-v);               // inf for v < -88: s = 0, 1 - s = 1
    s = __fdividef(1.f, 1.f + e);             // 0 when 1 + e > 2^126 (sigmoid < 1e-38 there)
    one_minus_s = e < 1.f ? e * s : 1.f - s;  // e < 1: s > 1/2 and 1 - s would cancel
  }
};

// gelu (tanh form): 0.5 (1 + tanh(u)) = sigmoid(2u), 1 - tanh(u)^2 = 4 sigmoid(2u) (1 - sigmoid(2u)), so
// y = x sigmoid(2u) and y' = s + 2 x s (1 - s) c (1 + 3 a x^2), accurate for large |x| as well.
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

struct Gelu {
  __device__ __forceinline__ static float f(float x) { return x * Sigmoid(2.f * kGeluC * (x + kGeluA * x * x * x)).s; }
  __device__ __forceinline__ static float df(float x) {
    const Sigmoid sg(2.f * kGeluC * (x + kGeluA * x * x * x));
    return sg.s + 2.f * x * sg.s * sg.one_minus_s * kGeluC * (1.f + 3.f * kGeluA * x * x);
  }
};
struct SqRelu {
  __device__ __forceinline__ static float f(float x) { return x > 0.f ? x * x : 0.f; }
  __device__ __forceinline__ static float df(float x) { return x > 0.f ? 2.f * x : 0.f; }
};

// Thread (vector v of a row, row group) from the 2-D block; returns false past the row's end.
struct Pos {
  int v;
  std::int64_t row0, row_step;
};
__device__ __forceinline__ bool pos(int nv, Pos& p) {
  p.v = int(blockIdx.x * blockDim.x + threadIdx.x);
  p.row0 = std::int64_t(blockIdx.y) * blockDim.y + threadIdx.y;
  p.row_step = std::int64_t(gridDim.y) * blockDim.y;
  return p.v < nv;
}

template <class Op>
__global__ void __launch_bounds__(kThreads)
    map_forward_kernel(bf16* y, std::int64_t ys, const bf16* x, std::int64_t xs, std::int64_t rows, int nv,
                       float* amax) {
  Pos p;
  const bool active = pos(nv, p);
  OutMax om;
  const int col = p.v * kVec;
  for (std::int64_t r = p.row0; active && r < rows; r += p.row_step) {
    float a[8];
    unpack8(load8(x + r * xs + col), a);
#pragma unroll
    for (int k = 0; k < 8; ++k) a[k] = Op::f(a[k]);
    const uint4 out = pack8(a);
    store8(y + r * ys + col, out);
    if (amax) om.add(out);
  }
  om.record(amax);
}

template <class Op>
__global__ void __launch_bounds__(kThreads)
    map_backward_kernel(bf16* dx, std::int64_t dxs, const bf16* dy, std::int64_t dys, const bf16* x, std::int64_t xs,
                        std::int64_t rows, int nv, float* amax) {
  Pos p;
  const bool active = pos(nv, p);
  OutMax om;
  const int col = p.v * kVec;
  for (std::int64_t r = p.row0; active && r < rows; r += p.row_step) {
    float a[8], g[8];
    unpack8(load8(x + r * xs + col), a);
    unpack8(load8(dy + r * dys + col), g);
#pragma unroll
    for (int k = 0; k < 8; ++k) a[k] = g[k] * Op::df(a[k]);
    const uint4 out = pack8(a);
    store8(dx + r * dxs + col, out);
    if (amax) om.add(out);
  }
  om.record(amax);
}

// nv: vectors of y (f / 8); x holds gate at column c and up at c + f.
__global__ void __launch_bounds__(kThreads)
    swiglu_forward_kernel(bf16* y, std::int64_t ys, const bf16* x, std::int64_t xs, std::int64_t rows, int nv,
                          float* amax) {
  Pos p;
  const bool active = pos(nv, p);
  OutMax om;
  const int col = p.v * kVec, f = nv * kVec;
  for (std::int64_t r = p.row0; active && r < rows; r += p.row_step) {
    float g[8], u[8];
    unpack8(load8(x + r * xs + col), g);
    unpack8(load8(x + r * xs + f + col), u);
#pragma unroll
    for (int k = 0; k < 8; ++k) g[k] = g[k] * Sigmoid(g[k]).s * u[k];
    const uint4 out = pack8(g);
    store8(y + r * ys + col, out);
    if (amax) om.add(out);
  }
  om.record(amax);
}

__global__ void __launch_bounds__(kThreads)
    swiglu_backward_kernel(bf16* dx, std::int64_t dxs, const bf16* dy, std::int64_t dys, const bf16* x, std::int64_t xs,
                           std::int64_t rows, int nv, float* amax) {
  Pos p;
  const bool active = pos(nv, p);
  OutMax om;
  const int col = p.v * kVec, f = nv * kVec;
  for (std::int64_t r = p.row0; active && r < rows; r += p.row_step) {
    float g[8], u[8], d[8], dg[8], du[8];
    unpack8(load8(x + r * xs + col), g);
    unpack8(load8(x + r * xs + f + col), u);
    unpack8(load8(dy + r * dys + col), d);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const Sigmoid sg(g[k]);
      dg[k] = d[k] * u[k] * sg.s * (1.f + g[k] * sg.one_minus_s);
      du[k] = d[k] * g[k] * sg.s;
    }
    const uint4 og = pack8(dg), ou = pack8(du);
    store8(dx + r * dxs + col, og);
    store8(dx + r * dxs + f + col, ou);
    if (amax) om.add(og), om.add(ou);
  }
  om.record(amax);
}


template <class Op>
void map_forward(TensorView<bf16> y, TensorView<const bf16> x, cudaStream_t stream, float* amax,
                 const std::string& what) {
  TB_REQUIRE(x.rank() == 2, what + ": x must be [t, n], got " + x.shape_str());
  const std::int64_t rows = x.size(0), n = x.size(1);
  require_rows16(x, rows, n, what + ": x");
  require_rows16(y, rows, n, what + ": y");
  if (rows == 0 || n == 0) return;
  const RowLaunch l = row_launch(rows, int(n / kVec), kThreads);
  map_forward_kernel<Op>
      <<<l.grid, l.block, 0, stream>>>(y.data(), y.stride(0), x.data(), x.stride(0), rows, int(n / kVec), amax);
  TB_CHECK_LAUNCH();
}

template <class Op>
void map_backward(TensorView<bf16> dx, TensorView<const bf16> dy, TensorView<const bf16> x, cudaStream_t stream,
                  float* amax, const std::string& what) {
  TB_REQUIRE(x.rank() == 2, what + ": x must be [t, n], got " + x.shape_str());
  const std::int64_t rows = x.size(0), n = x.size(1);
  require_rows16(x, rows, n, what + ": x");
  require_rows16(dy, rows, n, what + ": dy");
  require_rows16(dx, rows, n, what + ": dx");
  if (rows == 0 || n == 0) return;
  const RowLaunch l = row_launch(rows, int(n / kVec), kThreads);
  map_backward_kernel<Op><<<l.grid, l.block, 0, stream>>>(dx.data(), dx.stride(0), dy.data(), dy.stride(0), x.data(),
                                                          x.stride(0), rows, int(n / kVec), amax);
  TB_CHECK_LAUNCH();
}

// Sources of the FP8 cast tiles (ops/cuda/fp8_cast.cuh): the activation of x at (r, c), rounded to bf16 as the
// forward kernels store it (round_bf16: kernel_common.cuh).
struct SwigluSource {
  const bf16* x;
  std::int64_t xs, f;  // row stride; gate in columns [0, f), up in [f, 2f)
  __device__ __forceinline__ float at(std::int64_t r, std::int64_t c) const {
    const float g = __bfloat162float(x[r * xs + c]), u = __bfloat162float(x[r * xs + f + c]);
    return round_bf16(g * Sigmoid(g).s * u);
  }
  struct Raw {
    uint4 g, u;
  };
  __device__ __forceinline__ Raw fetch(std::int64_t r, std::int64_t c) const {
    return {detail::load8(x + r * xs + c), detail::load8(x + r * xs + f + c)};
  }
  __device__ __forceinline__ void values(const Raw& raw, std::int64_t, float (&v)[8]) const {
    float u[8];
    unpack8(raw.g, v);
    unpack8(raw.u, u);
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = round_bf16(v[k] * Sigmoid(v[k]).s * u[k]);
  }
};

template <class Op>
struct MapSource {
  const bf16* x;
  std::int64_t xs;
  __device__ __forceinline__ float at(std::int64_t r, std::int64_t c) const {
    return round_bf16(Op::f(__bfloat162float(x[r * xs + c])));
  }
  using Raw = uint4;
  __device__ __forceinline__ Raw fetch(std::int64_t r, std::int64_t c) const { return detail::load8(x + r * xs + c); }
  __device__ __forceinline__ void values(Raw raw, std::int64_t, float (&v)[8]) const {
    unpack8(raw, v);
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = round_bf16(Op::f(v[k]));
  }
};

// Sources of the backward's FP8 cast tiles: dx at (r, c) as the backward kernels store it (the same expressions,
// rounded to bf16). swiglu: dx = [dg | du], columns [0, 2f), dy [t, f]; both halves from one read of g, u and dy.
struct SwigluBackwardSource {
  static constexpr int kHalves = 2;
  const bf16 *x, *dy;
  std::int64_t xs, dys, f;
  __device__ __forceinline__ static float grad(float g, float u, float d, bool gate) {
    const Sigmoid sg(g);
    return round_bf16(gate ? d * u * sg.s * (1.f + g * sg.one_minus_s) : d * g * sg.s);
  }
  __host__ __device__ __forceinline__ std::int64_t half() const { return f; }
  __device__ __forceinline__ float at(std::int64_t r, std::int64_t c) const {
    const std::int64_t j = c < f ? c : c - f;
    return grad(__bfloat162float(x[r * xs + j]), __bfloat162float(x[r * xs + f + j]),
                __bfloat162float(dy[r * dys + j]), c < f);
  }
  struct Raw {
    uint4 g, u, d;
  };
  __device__ __forceinline__ Raw fetch(std::int64_t r, std::int64_t j) const {
    return {detail::load8(x + r * xs + j), detail::load8(x + r * xs + f + j), detail::load8(dy + r * dys + j)};
  }
  __device__ __forceinline__ void values2(const Raw& raw, std::int64_t, float (&dg)[8], float (&du)[8]) const {
    float g[8], u[8], d[8];
    unpack8(raw.g, g);
    unpack8(raw.u, u);
    unpack8(raw.d, d);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      dg[k] = grad(g[k], u[k], d[k], true);
      du[k] = grad(g[k], u[k], d[k], false);
    }
  }
};

template <class Op>
struct MapBackwardSource {
  const bf16 *x, *dy;
  std::int64_t xs, dys;
  __device__ __forceinline__ float at(std::int64_t r, std::int64_t c) const {
    return round_bf16(__bfloat162float(dy[r * dys + c]) * Op::df(__bfloat162float(x[r * xs + c])));
  }
  struct Raw {
    uint4 x, d;
  };
  __device__ __forceinline__ Raw fetch(std::int64_t r, std::int64_t c) const {
    return {detail::load8(x + r * xs + c), detail::load8(dy + r * dys + c)};
  }
  __device__ __forceinline__ void values(const Raw& raw, std::int64_t, float (&v)[8]) const {
    float d[8];
    unpack8(raw.x, v);
    unpack8(raw.d, d);
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = round_bf16(d[k] * Op::df(v[k]));
  }
};

std::int64_t swiglu_width(const TensorView<const bf16>& x, const std::string& what) {
  TB_REQUIRE(x.rank() == 2 && x.size(1) % 16 == 0,
             what + ": x must be [t, 2f] (gate then up) with f a multiple of 8, got " + x.shape_str());
  return x.size(1) / 2;
}

}  // namespace

void swiglu_forward(TensorView<bf16> y, TensorView<const bf16> x, cudaStream_t stream, float* amax) {
  const std::int64_t f = swiglu_width(x, "swiglu_forward");
  const std::int64_t rows = x.size(0);
  require_rows16(x, rows, 2 * f, "swiglu_forward: x");
  require_rows16(y, rows, f, "swiglu_forward: y");
  if (rows == 0 || f == 0) return;
  const RowLaunch l = row_launch(rows, int(f / kVec), kThreads);
  swiglu_forward_kernel<<<l.grid, l.block, 0, stream>>>(y.data(), y.stride(0), x.data(), x.stride(0), rows,
                                                        int(f / kVec), amax);
  TB_CHECK_LAUNCH();
}

void swiglu_backward(TensorView<bf16> dx, TensorView<const bf16> dy, TensorView<const bf16> x, cudaStream_t stream,
                     float* amax) {
  const std::int64_t f = swiglu_width(x, "swiglu_backward");
  const std::int64_t rows = x.size(0);
  require_rows16(x, rows, 2 * f, "swiglu_backward: x");
  require_rows16(dy, rows, f, "swiglu_backward: dy");
  require_rows16(dx, rows, 2 * f, "swiglu_backward: dx");
  if (rows == 0 || f == 0) return;
  const RowLaunch l = row_launch(rows, int(f / kVec), kThreads);
  swiglu_backward_kernel<<<l.grid, l.block, 0, stream>>>(dx.data(), dx.stride(0), dy.data(), dy.stride(0), x.data(),
                                                         x.stride(0), rows, int(f / kVec), amax);
  TB_CHECK_LAUNCH();
}

void gelu_forward(TensorView<bf16> y, TensorView<const bf16> x, cudaStream_t stream, float* amax) {
  map_forward<Gelu>(y, x, stream, amax, "gelu_forward");
}
void gelu_backward(TensorView<bf16> dx, TensorView<const bf16> dy, TensorView<const bf16> x, cudaStream_t stream,
                   float* amax) {
  map_backward<Gelu>(dx, dy, x, stream, amax, "gelu_backward");
}
void sqrelu_forward(TensorView<bf16> y, TensorView<const bf16> x, cudaStream_t stream, float* amax) {
  map_forward<SqRelu>(y, x, stream, amax, "sqrelu_forward");
}
void sqrelu_backward(TensorView<bf16> dx, TensorView<const bf16> dy, TensorView<const bf16> x, cudaStream_t stream,
                     float* amax) {
  map_backward<SqRelu>(dx, dy, x, stream, amax, "sqrelu_backward");
}
void activation_forward(Activation act, TensorView<bf16> y, TensorView<const bf16> x, cudaStream_t stream,
                        float* amax) {
  switch (act) {
    case Activation::swiglu: return swiglu_forward(y, x, stream, amax);
    case Activation::gelu: return gelu_forward(y, x, stream, amax);
    case Activation::sqrelu: return sqrelu_forward(y, x, stream, amax);
  }
}

void activation_backward(Activation act, TensorView<bf16> dx, TensorView<const bf16> dy, TensorView<const bf16> x,
                         cudaStream_t stream, float* amax) {
  switch (act) {
    case Activation::swiglu: return swiglu_backward(dx, dy, x, stream, amax);
    case Activation::gelu: return gelu_backward(dx, dy, x, stream, amax);
    case Activation::sqrelu: return sqrelu_backward(dx, dy, x, stream, amax);
  }
}

void activation_forward_fp8(Activation act, TensorView<const bf16> x, const Fp8CastArgs& cast, cudaStream_t stream) {
  const std::string what = str("activation_forward_fp8(", dtype_name(cast.type), ")");
  TB_REQUIRE(x.rank() == 2, what + ": x must be [t, n] (swiglu: [t, 2f]), got " + x.shape_str());
  const std::int64_t rows = x.size(0), n = act == Activation::swiglu ? swiglu_width(x, what) : x.size(1);
  require_rows16(x, rows, x.size(1), what + ": x");
  const detail::CastTarget p = detail::fused_cast_target(cast, rows, n, what);
  if (rows == 0 || n == 0) return;
  const bool e4 = cast.type == DType::e4m3, vec = aligned16(x.data()) && x.stride(0) % kVec == 0;
  switch (act) {
    case Activation::swiglu:
      detail::launch_cast_transpose(SwigluSource{x.data(), x.stride(0), n}, p, e4, vec, what, stream);
      break;
    case Activation::gelu:
      detail::launch_cast_transpose(MapSource<Gelu>{x.data(), x.stride(0)}, p, e4, vec, what, stream);
      break;
    case Activation::sqrelu:
      detail::launch_cast_transpose(MapSource<SqRelu>{x.data(), x.stride(0)}, p, e4, vec, what, stream);
      break;
  }
}

void activation_backward_fp8(Activation act, TensorView<const bf16> dy, TensorView<const bf16> x,
                             const Fp8CastArgs& cast, cudaStream_t stream) {
  const std::string what = str("activation_backward_fp8(", dtype_name(cast.type), ")");
  TB_REQUIRE(x.rank() == 2 && dy.rank() == 2,
             what + ": x must be [t, n] (swiglu: [t, 2f]) and dy [t, n] (swiglu: [t, f]), got " + x.shape_str() +
                 " and " + dy.shape_str());
  const std::int64_t rows = x.size(0), n = x.size(1), f = act == Activation::swiglu ? swiglu_width(x, what) : n;
  require_rows16(x, rows, n, what + ": x");
  require_rows16(dy, rows, f, what + ": dy");
  const detail::CastTarget p = detail::fused_cast_target(cast, rows, n, what);
  if (rows == 0 || n == 0) return;
  const bool e4 = cast.type == DType::e4m3, vec = aligned16(x.data()) && x.stride(0) % kVec == 0 &&
                                                  aligned16(dy.data()) && dy.stride(0) % kVec == 0;
  switch (act) {
    case Activation::swiglu:
      detail::launch_cast_transpose(SwigluBackwardSource{x.data(), dy.data(), x.stride(0), dy.stride(0), f}, p, e4,
                                    vec, what, stream);
      break;
    case Activation::gelu:
      detail::launch_cast_transpose(MapBackwardSource<Gelu>{x.data(), dy.data(), x.stride(0), dy.stride(0)}, p, e4,
                                    vec, what, stream);
      break;
    case Activation::sqrelu:
      detail::launch_cast_transpose(MapBackwardSource<SqRelu>{x.data(), dy.data(), x.stride(0), dy.stride(0)}, p, e4,
                                    vec, what, stream);
      break;
  }
}

}  // namespace tb::ops
