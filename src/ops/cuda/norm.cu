// ops/cuda/norm.cu: see norm.h. One block per row in the forward (the row stays in registers between the
// statistics and the output); a persistent grid in the backward, each block striding over rows (loading the next
// row while it reduces this one) and keeping its dw/db partial sums in registers (thread t owns the same columns in
// every row), then a small kernel that sums the [blocks, dim] partials in a fixed order into dw/db. The FP8 forward
// (norm_fp8.cu) runs the forward kernel without y; its output formula lives in norm_common.cuh, shared with the FP8
// cast's source.
#include "ops/cuda/norm.h"

#include <algorithm>
#include <string>
#include <type_traits>

#include "ops/cuda/fp8_cast.cuh"  // OutMax
#include "ops/cuda/kernel_common.cuh"
#include "ops/cuda/norm_common.cuh"

namespace tb::ops {
namespace {

using namespace detail;

constexpr int kMaxThreads = 512;
constexpr int kMaxDim = 8 * 8 * kMaxThreads;  // 8 vectors of 8 per thread: 32768

struct FwdArgs {
  bf16* y;  // null: y not written (the FP8 variants)
  std::int64_t y_stride;
  bf16* r;  // null: r not stored (plain norm)
  std::int64_t r_stride;
  const bf16* x;
  std::int64_t x_stride;
  const bf16* res;  // null: r = x
  std::int64_t res_stride;
  const bf16* w;
  const bf16* b;  // null: no bias
  float* mean;    // null: not written
  float* rstd;
  int dim;
  int kind;
  float eps;
  float* amax;  // null: not recorded
};

struct BwdArgs {
  bf16* dx;  // null: not written
  std::int64_t dx_stride;
  const bf16* dy;
  std::int64_t dy_stride;
  const bf16* x;
  std::int64_t x_stride;
  const bf16* dres;  // null: no residual gradient to add
  std::int64_t dres_stride;
  const bf16* w;
  const float* mean;  // null for rmsnorm
  const float* rstd;
  float* partial;  // [2, gridDim.x, dim]: dw partials, then db partials; null: neither wanted
  std::int64_t rows;
  int dim;
  int kind;
  bool want_dw;  // (the bias gradient's flag is the kernel's HasDb)
  float* amax;  // null: not recorded (dx must be written)
};

template <int V>
__global__ void __launch_bounds__(kMaxThreads) norm_forward_kernel(const FwdArgs a) {
  __shared__ float smem[32];
  const std::int64_t row = blockIdx.x;
  const int T = int(blockDim.x);
  float v[V][8];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int col = (j * T + int(threadIdx.x)) * kVec;
    if (col < a.dim) {
      const uint4 xv = load8(a.x + row * a.x_stride + col);
      unpack8(xv, v[j]);
      if (a.res) {
        float rv[8];
        unpack8(load8(a.res + row * a.res_stride + col), rv);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[j][k] += rv[k];
        const uint4 packed = pack8(v[j]);
        unpack8(packed, v[j]);  // normalise the stored (bf16) r
        if (a.r) store8(a.r + row * a.r_stride + col, packed);
      } else if (a.r) {
        store8(a.r + row * a.r_stride + col, xv);
      }
    } else {
#pragma unroll
      for (int k = 0; k < 8; ++k) v[j][k] = 0.f;
    }
  }
  float mu = 0.f;
  if (a.kind != kNormRms) {
    float s[1] = {0.f};
#pragma unroll
    for (int j = 0; j < V; ++j)
#pragma unroll
      for (int k = 0; k < 8; ++k) s[0] += v[j][k];
    block_sum(s, smem);
    mu = s[0] / float(a.dim);
  }
  float ss[1] = {0.f};
#pragma unroll
  for (int j = 0; j < V; ++j) {
    if ((j * T + int(threadIdx.x)) * kVec >= a.dim) continue;
#pragma unroll
    for (int k = 0; k < 8; ++k) ss[0] += (v[j][k] - mu) * (v[j][k] - mu);
  }
  block_sum(ss, smem);
  const float rs = rsqrtf(ss[0] / float(a.dim) + a.eps);
  if (threadIdx.x == 0) {
    a.rstd[row] = rs;
    if (a.mean) a.mean[row] = mu;
  }
  if (!a.y) return;  // uniform: the FP8 cast tiles compute y (ops/cuda/norm_fp8.cu)
  OutMax om;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int col = (j * T + int(threadIdx.x)) * kVec;
    if (col >= a.dim) continue;
    float w[8], out[8];
    norm_weight8(a.w, col, a.kind, w);
    float b[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (a.b) unpack8(load8(a.b + col), b);
#pragma unroll
    for (int k = 0; k < 8; ++k) out[k] = norm_out(v[j][k], mu, rs, w[k], b[k]);
    const uint4 packed = pack8(out);
    store8(a.y + row * a.y_stride + col, packed);
    if (a.amax) om.add(packed);
  }
  om.record(a.amax);
}

// One row's inputs as loaded (bf16 vectors): dy and x, which the row's sums need first.
template <int V>
struct BwdRow {
  uint4 dy[V], x[V];
};

template <int V>
__device__ __forceinline__ void load_bwd_row(const BwdArgs& a, std::int64_t row, BwdRow<V>& in) {
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int col = (j * int(blockDim.x) + int(threadIdx.x)) * kVec;
    in.dy[j] = in.x[j] = make_uint4(0, 0, 0, 0);
    if (row < a.rows && col < a.dim) {
      in.dy[j] = load8(a.dy + row * a.dy_stride + col);
      in.x[j] = load8(a.x + row * a.x_stride + col);
    }
  }
}

// Bias gradient partials only when HasDb (registers: RMSNorm and bias-free layernorms keep none). With V <= 2 the next
// row's dy and x are loaded before this row's block reduction, so the loads overlap it (one row in flight per block
// leaves the SM idle while it syncs; wider rows have no registers to spare); the rows each block sums, and their
// order, are the same either way.
template <int V, bool HasDb>
__global__ void __launch_bounds__(kMaxThreads) norm_backward_kernel(const BwdArgs a) {
  constexpr bool kPrefetch = V <= 2;
  __shared__ float smem[2 * 32];
  const int T = int(blockDim.x);
  float dw_acc[V][8], db_acc[HasDb ? V : 1][8];
#pragma unroll
  for (int j = 0; j < V; ++j)
#pragma unroll
    for (int k = 0; k < 8; ++k) dw_acc[j][k] = 0.f;
  if constexpr (HasDb)
#pragma unroll
    for (int j = 0; j < V; ++j)
#pragma unroll
      for (int k = 0; k < 8; ++k) db_acc[j][k] = 0.f;
  OutMax om;  // over all of this thread's rows, recorded once

  BwdRow<V> cur;
  if constexpr (kPrefetch) load_bwd_row(a, blockIdx.x, cur);
  for (std::int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    if constexpr (!kPrefetch) load_bwd_row(a, row, cur);
    const float mu = a.kind == kNormRms ? 0.f : a.mean[row];
    const float rs = a.rstd[row];
    float sums[2] = {0.f, 0.f};  // sum of g, sum of g * xh
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int col = (j * T + int(threadIdx.x)) * kVec;
      if (col >= a.dim) continue;
      float dy[8], x[8], w[8];
      unpack8(cur.dy[j], dy);
      unpack8(cur.x[j], x);
      norm_weight8(a.w, col, a.kind, w);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const float xh = (x[k] - mu) * rs;
        const float g = dy[k] * w[k];
        sums[0] += g;
        sums[1] += g * xh;
        dw_acc[j][k] += dy[k] * xh;
        if constexpr (HasDb) db_acc[j][k] += dy[k];
      }
    }
    uint4 dresv[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int col = (j * T + int(threadIdx.x)) * kVec;
      dresv[j] = make_uint4(0, 0, 0, 0);
      if (a.dres && a.dx && col < a.dim) dresv[j] = load8(a.dres + row * a.dres_stride + col);
    }
    BwdRow<V> next;
    if constexpr (kPrefetch) load_bwd_row(a, row + gridDim.x, next);
    block_sum(sums, smem);
    if (a.dx) {
      const float mean_g = a.kind == kNormRms ? 0.f : sums[0] / float(a.dim);
      const float mean_gxh = sums[1] / float(a.dim);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const int col = (j * T + int(threadIdx.x)) * kVec;
        if (col >= a.dim) continue;
        float dy[8], x[8], w[8], dres[8], out[8];
        unpack8(cur.dy[j], dy);
        unpack8(cur.x[j], x);
        unpack8(dresv[j], dres);  // zeros without dr_next
        norm_weight8(a.w, col, a.kind, w);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const float xh = (x[k] - mu) * rs;
          out[k] = rs * (dy[k] * w[k] - mean_g - xh * mean_gxh) + dres[k];
        }
        const uint4 packed = pack8(out);
        store8(a.dx + row * a.dx_stride + col, packed);
        if (a.amax) om.add(packed);
      }
    }
    if constexpr (kPrefetch) cur = next;
  }
  om.record(a.amax);
  if (!a.partial) return;
  float* pdw = a.partial + std::int64_t(blockIdx.x) * a.dim;
  float* pdb = a.partial + (std::int64_t(gridDim.x) + blockIdx.x) * a.dim;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int col = (j * T + int(threadIdx.x)) * kVec;
    if (col >= a.dim) continue;
    if (a.want_dw) {
      reinterpret_cast<float4*>(pdw + col)[0] = make_float4(dw_acc[j][0], dw_acc[j][1], dw_acc[j][2], dw_acc[j][3]);
      reinterpret_cast<float4*>(pdw + col)[1] = make_float4(dw_acc[j][4], dw_acc[j][5], dw_acc[j][6], dw_acc[j][7]);
    }
    if constexpr (HasDb) {
      reinterpret_cast<float4*>(pdb + col)[0] = make_float4(db_acc[j][0], db_acc[j][1], db_acc[j][2], db_acc[j][3]);
      reinterpret_cast<float4*>(pdb + col)[1] = make_float4(db_acc[j][4], db_acc[j][5], db_acc[j][6], db_acc[j][7]);
    }
  }
}

// out[c] += sum over blocks p (in order of p mod 16, then the 16 slices in order) of partial[p, c] (G bf16: the sum
// in fp32, rounded once on store). grid (ceil(dim / 32), 2): y = 0 reduces the dw partials into dw, y = 1 the db
// partials into db.
constexpr int kReduceSlices = 16;
template <class G>
__global__ void __launch_bounds__(32 * kReduceSlices)
    reduce_partials_kernel(G* dw, G* db, const float* partial, int blocks, int dim) {
  __shared__ float sh[kReduceSlices][33];
  G* out = blockIdx.y == 0 ? dw : db;
  if (!out) return;  // uniform over the block
  const float* p = partial + std::int64_t(blockIdx.y) * blocks * dim;
  const int col = int(blockIdx.x) * 32 + int(threadIdx.x);
  float s = 0.f;
  if (col < dim) {
#pragma unroll 4
    for (int b = int(threadIdx.y); b < blocks; b += kReduceSlices) s += p[std::int64_t(b) * dim + col];
  }
  sh[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && col < dim) {
    float t = 0.f;
#pragma unroll
    for (int i = 0; i < kReduceSlices; ++i) t += sh[i][threadIdx.x];
    if constexpr (std::is_same_v<G, float>)
      out[col] += t;
    else
      out[col] = __float2bfloat16_rn(__bfloat162float(out[col]) + t);
  }
}

// Vectors per thread V (a power of two, the smallest that keeps the block at most kMaxThreads) and the block size.
struct RowPlan {
  int vecs, threads;
};

RowPlan plan_rows(std::int64_t dim, const std::string& what) {
  TB_REQUIRE(dim > 0 && dim % kVec == 0 && dim <= kMaxDim,
             what + ": dim must be a positive multiple of 8 (16-byte accesses) and at most " + std::to_string(kMaxDim) +
                 ", got " + std::to_string(dim));
  const int nvec = int(dim / kVec);
  int v = 1;
  while (ceil_div(nvec, v) > kMaxThreads) v *= 2;
  return {v, int(ceil_div(ceil_div(nvec, v), 32) * 32)};
}

template <class F>
void dispatch_vecs(int vecs, F&& f) {
  switch (vecs) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    default:
      return f(std::integral_constant<int, 8>{});
  }
}

// Calls f(integral_constant V, bool_constant HasDb) for the backward kernel that fits the plan.
template <class F>
void dispatch_backward(int vecs, bool has_db, F&& f) {
  dispatch_vecs(vecs, [&](auto v) {
    if (has_db)
      f(v, std::true_type{});
    else
      f(v, std::false_type{});
  });
}

// Blocks of the persistent backward grid: as many as can be resident at once, at most one per row.
int backward_blocks(std::int64_t rows, const RowPlan& plan, bool has_db) {
  int per_sm = 0;
  dispatch_backward(plan.vecs, has_db, [&](auto v, auto db) {
    TB_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, norm_backward_kernel<decltype(v)::value, decltype(db)::value>, plan.threads, 0));
  });
  return int(std::min<std::int64_t>(rows, std::int64_t(std::max(per_sm, 1)) * sm_count()));
}

// A bias or its gradient (`name`): none for RMSNorm, else optional and [dim].
template <class T>
void check_bias(NormKind kind, std::int64_t dim, const TensorView<T>& b, const std::string& what, const char* name) {
  if (kind == NormKind::rmsnorm)
    TB_REQUIRE(b.data() == nullptr, what + ": rmsnorm has no bias (" + name + " must be an empty view)");
  else if (b.data())
    require_vec(b, dim, true, what + ": " + name);
}

void check_params(NormKind kind, std::int64_t dim, const TensorView<const bf16>& w, const TensorView<const bf16>& b,
                  const std::string& what) {
  require_vec(w, dim, true, what + ": w");
  check_bias(kind, dim, b, what, "b");
}

template <class G>
void backward(NormKind kind, TensorView<bf16> dx, TensorView<G> dw, TensorView<G> db, TensorView<const bf16> dy,
              TensorView<const bf16> dres, TensorView<const bf16> x, TensorView<const bf16> w,
              TensorView<const float> mean, TensorView<const float> rstd, cudaStream_t stream, Workspace workspace,
              float* amax, const std::string& what) {
  TB_REQUIRE(x.rank() == 2, what + ": the normalised input must be [rows, dim], got " + x.shape_str());
  const std::int64_t rows = x.size(0), dim = x.size(1);
  const RowPlan plan = plan_rows(dim, what);
  require_rows16(x, rows, dim, what + ": x");
  require_rows16(dy, rows, dim, what + ": dy");
  if (dx.data()) require_rows16(dx, rows, dim, what + ": dx");
  TB_REQUIRE(!amax || dx.data(), what + ": amax records dx, which is not written (dx is empty)");
  if (dres.data()) require_rows16(dres, rows, dim, what + ": dr_next");
  require_vec(w, dim, true, what + ": w");
  require_vec(rstd, rows, false, what + ": rstd");
  if (kind != NormKind::rmsnorm) require_vec(mean, rows, false, what + ": mean");
  if (dw.data()) require_vec(dw, dim, true, what + ": dw");
  check_bias(kind, dim, db, what, "db");
  const bool want_dw = dw.data() != nullptr, want_db = db.data() != nullptr;
  if (rows == 0 || (!dx.data() && !want_dw && !want_db)) return;

  const int blocks = backward_blocks(rows, plan, want_db);
  const std::size_t partial_bytes =
      (want_dw || want_db) ? std::size_t(2) * std::size_t(blocks) * std::size_t(dim) * sizeof(float) : 0;
  ScratchBuffer scratch(workspace, partial_bytes, stream, what);
  const BwdArgs a{dx.data(),   dx.data() ? dx.stride(0) : 0,
                  dy.data(),   dy.stride(0),
                  x.data(),    x.stride(0),
                  dres.data(), dres.data() ? dres.stride(0) : 0,
                  w.data(),    kind == NormKind::rmsnorm ? nullptr : mean.data(),
                  rstd.data(), partial_bytes ? scratch.as<float>() : nullptr,
                  rows,        int(dim),
                  int(kind),   want_dw,
                  amax};
  dispatch_backward(plan.vecs, want_db, [&](auto v, auto db) {
    norm_backward_kernel<decltype(v)::value, decltype(db)::value><<<unsigned(blocks), plan.threads, 0, stream>>>(a);
  });
  TB_CHECK_LAUNCH();
  if (!partial_bytes) return;
  reduce_partials_kernel<<<dim3(unsigned(ceil_div(dim, 32)), 2), dim3(32, kReduceSlices), 0, stream>>>(
      dw.data(), db.data(), scratch.as<float>(), blocks, int(dim));
  TB_CHECK_LAUNCH();
}

// One 8-element vector per thread and iteration (grid-stride): r = x + res in fp32, packed to bf16.
__global__ void residual_add_kernel(bf16* r, const bf16* x, const bf16* res, std::int64_t vecs) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < vecs;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    float a[8], b[8];
    unpack8(load8(x + i * kVec), a);
    unpack8(load8(res + i * kVec), b);
#pragma unroll
    for (int k = 0; k < 8; ++k) a[k] += b[k];
    store8(r + i * kVec, pack8(a));
  }
}

}  // namespace

void detail::norm_forward_rows(NormKind kind, TensorView<bf16> y, TensorView<bf16> r, TensorView<float> mean,
                               TensorView<float> rstd, TensorView<const bf16> x, TensorView<const bf16> residual_in,
                               TensorView<const bf16> w, TensorView<const bf16> b, float eps, cudaStream_t stream,
                               float* amax, const std::string& what) {
  TB_REQUIRE(x.rank() == 2, what + ": x must be [rows, dim], got " + x.shape_str());
  const std::int64_t rows = x.size(0), dim = x.size(1);
  const RowPlan plan = plan_rows(dim, what);
  require_rows16(x, rows, dim, what + ": x");
  if (y.data()) require_rows16(y, rows, dim, what + ": y");
  TB_REQUIRE(!amax || y.data(), what + ": amax records y, which is not written");
  if (r.data()) require_rows16(r, rows, dim, what + ": r");
  if (residual_in.data()) require_rows16(residual_in, rows, dim, what + ": residual_in");
  check_params(kind, dim, w, b, what);
  require_vec(rstd, rows, false, what + ": rstd");
  if (kind != NormKind::rmsnorm || mean.data()) require_vec(mean, rows, false, what + ": mean");
  TB_REQUIRE(eps >= 0.f, what + ": eps must be >= 0");
  if (rows == 0) return;
  const FwdArgs a{y.data(),
                  y.data() ? y.stride(0) : 0,
                  r.data(),
                  r.data() ? r.stride(0) : 0,
                  x.data(),
                  x.stride(0),
                  residual_in.data(),
                  residual_in.data() ? residual_in.stride(0) : 0,
                  w.data(),
                  b.data(),
                  kind == NormKind::rmsnorm ? nullptr : mean.data(),
                  rstd.data(),
                  int(dim),
                  int(kind),
                  eps,
                  amax};
  TB_REQUIRE(rows <= 0x7fffffff, what + ": at most 2^31 - 1 rows");
  dispatch_vecs(plan.vecs, [&](auto v) {
    norm_forward_kernel<decltype(v)::value><<<unsigned(rows), plan.threads, 0, stream>>>(a);
  });
  TB_CHECK_LAUNCH();
}

void residual_add(TensorView<bf16> r, TensorView<const bf16> x, TensorView<const bf16> residual_in,
                  cudaStream_t stream) {
  const std::string what = "residual_add";
  TB_REQUIRE(x.rank() == 2, what + ": x must be [rows, dim], got " + x.shape_str());
  const std::int64_t rows = x.size(0), dim = x.size(1);
  require_rows16(x, rows, dim, what + ": x");
  require_rows16(r, rows, dim, what + ": r");
  require_rows16(residual_in, rows, dim, what + ": residual_in");
  TB_REQUIRE(x.stride(0) == dim && r.stride(0) == dim && residual_in.stride(0) == dim,
             what + ": r, x and residual_in must be contiguous");
  const std::int64_t vecs = rows * dim / kVec;
  if (vecs == 0) return;
  constexpr int kThreads = 256;
  const unsigned blocks = unsigned(std::min<std::int64_t>(ceil_div(vecs, kThreads), 8 * std::int64_t(sm_count())));
  residual_add_kernel<<<blocks, kThreads, 0, stream>>>(r.data(), x.data(), residual_in.data(), vecs);
  TB_CHECK_LAUNCH();
}

void norm_forward(NormKind kind, TensorView<bf16> y, TensorView<float> mean, TensorView<float> rstd,
                  TensorView<const bf16> x, TensorView<const bf16> w, TensorView<const bf16> b, float eps,
                  cudaStream_t stream, float* amax) {
  TB_REQUIRE(y.data() != nullptr, "norm_forward: y is required (norm_forward_fp8 writes FP8 instead)");
  detail::norm_forward_rows(kind, y, {}, mean, rstd, x, {}, w, b, eps, stream, amax, "norm_forward");
}

void add_norm_forward(NormKind kind, TensorView<bf16> y, TensorView<bf16> r, TensorView<float> mean,
                      TensorView<float> rstd, TensorView<const bf16> x, TensorView<const bf16> residual_in,
                      TensorView<const bf16> w, TensorView<const bf16> b, float eps, cudaStream_t stream, float* amax) {
  TB_REQUIRE(r.data() != nullptr, "add_norm_forward: r (the next residual) is required");
  TB_REQUIRE(y.data() != nullptr, "add_norm_forward: y is required (add_norm_forward_fp8 writes FP8 instead)");
  detail::norm_forward_rows(kind, y, r, mean, rstd, x, residual_in, w, b, eps, stream, amax, "add_norm_forward");
}

std::size_t norm_backward_workspace_bytes(std::int64_t rows, std::int64_t dim) {
  if (rows <= 0) return 0;
  const RowPlan plan = plan_rows(dim, "norm_backward_workspace_bytes");
  const int blocks = std::max(backward_blocks(rows, plan, false), backward_blocks(rows, plan, true));
  return std::size_t(2) * std::size_t(blocks) * std::size_t(dim) * sizeof(float);
}

template <class G>
void norm_backward(NormKind kind, TensorView<bf16> dx, TensorView<G> dw, std::type_identity_t<TensorView<G>> db,
                   TensorView<const bf16> dy, TensorView<const bf16> x, TensorView<const bf16> w,
                   TensorView<const float> mean, TensorView<const float> rstd, cudaStream_t stream, Workspace workspace,
                   float* amax) {
  backward(kind, dx, dw, db, dy, {}, x, w, mean, rstd, stream, workspace, amax, "norm_backward");
}

template <class G>
void add_norm_backward(NormKind kind, TensorView<bf16> dr, TensorView<G> dw, std::type_identity_t<TensorView<G>> db,
                       TensorView<const bf16> dy, TensorView<const bf16> dr_next, TensorView<const bf16> r,
                       TensorView<const bf16> w, TensorView<const float> mean, TensorView<const float> rstd,
                       cudaStream_t stream, Workspace workspace, float* amax) {
  TB_REQUIRE(dr.data() != nullptr, "add_norm_backward: dr is required");
  backward(kind, dr, dw, db, dy, dr_next, r, w, mean, rstd, stream, workspace, amax, "add_norm_backward");
}

#define TB_NORM_BACKWARD(G)                                                                                           \
  template void norm_backward<G>(NormKind, TensorView<bf16>, TensorView<G>, TensorView<G>, TensorView<const bf16>,   \
                                 TensorView<const bf16>, TensorView<const bf16>, TensorView<const float>,            \
                                 TensorView<const float>, cudaStream_t, Workspace, float*);                          \
  template void add_norm_backward<G>(NormKind, TensorView<bf16>, TensorView<G>, TensorView<G>,                       \
                                     TensorView<const bf16>, TensorView<const bf16>, TensorView<const bf16>,         \
                                     TensorView<const bf16>, TensorView<const float>, TensorView<const float>,       \
                                     cudaStream_t, Workspace, float*);
TB_NORM_BACKWARD(float)
TB_NORM_BACKWARD(bf16)
#undef TB_NORM_BACKWARD

}  // namespace tb::ops
