// micro/nccl_data.cu: pattern fill and on-the-fly verification kernels (formulas in nccl_data.h), and
// the one place that maps a CollCase onto NCCL calls.
#include "micro/nccl_data.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <nccl.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "comm/nccl.h"
#include "core/error.h"

namespace tb::micro {
namespace {

constexpr int kThreads = 256;
constexpr std::uint64_t kMaxBlocks = 8192;
constexpr int kSentinel = -1000;
constexpr int kMaxAbsValue = 4;

// ---- the pattern ------------------------------------------------------------------------------------
__device__ __forceinline__ int base_value(int rank, std::uint64_t j) {
  std::uint64_t x = (j + 1) * 0x9E3779B97F4A7C15ull ^ (std::uint64_t(rank) + 1) * 0xC2B2AE3D27D4EB4Full;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return int(std::uint32_t(x >> 32) % 9u) - kMaxAbsValue;
}

struct Pattern {
  bool prod;  // {1, 2} values for prod runs
  __device__ __forceinline__ int operator()(int rank, std::uint64_t j) const {
    return prod ? (((j + std::uint64_t(rank)) & 15u) == 0 ? 2 : 1) : base_value(rank, j);
  }
};

// Expected receive-buffer value of one rank (table in nccl_data.h).
struct Expect {
  Pattern value;
  Coll coll;
  ReduceOp op;
  int nranks, rank, root;
  std::uint64_t count;

  __device__ double reduce(std::uint64_t j) const {
    int acc = value(0, j);
    for (int k = 1; k < nranks; ++k) {
      const int v = value(k, j);
      switch (op) {
        case ReduceOp::sum:
        case ReduceOp::avg: acc += v; break;
        case ReduceOp::prod: acc *= v; break;
        case ReduceOp::max: acc = max(acc, v); break;
        case ReduceOp::min: acc = min(acc, v); break;
      }
    }
    return op == ReduceOp::avg ? double(acc) / nranks : double(acc);
  }
  __device__ double operator()(std::uint64_t j) const {
    switch (coll) {
      case Coll::all_reduce: return reduce(j);
      case Coll::reduce_scatter: return reduce(std::uint64_t(rank) * count + j);
      case Coll::all_gather: return value(int(j / count), j % count);
      case Coll::alltoall: return value(int(j / count), std::uint64_t(rank) * count + j % count);
      case Coll::broadcast: return value(root, j);
      case Coll::sendrecv: return value((rank + nranks - 1) % nranks, j);
    }
    return 0;
  }
};

// ---- element conversions ----------------------------------------------------------------------------
template <class T> __device__ __forceinline__ T from_int(int v) { return T(v); }
template <> __device__ __forceinline__ __half from_int<__half>(int v) { return __float2half_rn(float(v)); }
template <> __device__ __forceinline__ __nv_bfloat16 from_int<__nv_bfloat16>(int v) {
  return __float2bfloat16_rn(float(v));
}
template <class T> __device__ __forceinline__ double to_double(T v) { return double(v); }
template <> __device__ __forceinline__ double to_double<__half>(__half v) { return double(__half2float(v)); }
template <> __device__ __forceinline__ double to_double<__nv_bfloat16>(__nv_bfloat16 v) {
  return double(__bfloat162float(v));
}

// V elements per 16-byte access (V = 1: the unaligned fallback).
template <class T, int V> struct alignas(sizeof(T) * V) Pack {
  T x[V];
};

// ---- kernels (grid-stride; vectorised body, scalar tail) ---------------------------------------------
struct SendGen {
  Pattern value;
  int rank;
  __device__ __forceinline__ int operator()(std::uint64_t j) const { return value(rank, j); }
};
struct SentinelGen {
  __device__ __forceinline__ int operator()(std::uint64_t) const { return kSentinel; }
};

template <class T, int V, class Gen>
__global__ void fill_kernel(T* __restrict__ out, std::uint64_t n, Gen gen) {
  const std::uint64_t stride = std::uint64_t(gridDim.x) * blockDim.x;
  const std::uint64_t tid = std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::uint64_t nvec = n / V;
  for (std::uint64_t v = tid; v < nvec; v += stride) {
    Pack<T, V> p;
#pragma unroll
    for (int k = 0; k < V; ++k) p.x[k] = from_int<T>(gen(v * V + k));
    reinterpret_cast<Pack<T, V>*>(out)[v] = p;
  }
  for (std::uint64_t i = nvec * V + tid; i < n; i += stride) out[i] = from_int<T>(gen(i));
}

// result[0] += mismatches, result[1] = min(result[1], first bad index)
template <class T, int V>
__global__ void verify_kernel(const T* __restrict__ in, std::uint64_t n, Expect expect, double tol,
                              unsigned long long* result) {
  const std::uint64_t stride = std::uint64_t(gridDim.x) * blockDim.x;
  const std::uint64_t tid = std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::uint64_t nvec = n / V;
  unsigned long long bad = 0, first = ~0ull;
  auto check = [&](std::uint64_t i, T got) {
    const double diff = fabs(to_double(got) - expect(i));
    if (!(diff <= tol)) {  // NaN counts as bad
      ++bad;
      first = min(first, (unsigned long long)i);
    }
  };
  for (std::uint64_t v = tid; v < nvec; v += stride) {
    const Pack<T, V> p = reinterpret_cast<const Pack<T, V>*>(in)[v];
#pragma unroll
    for (int k = 0; k < V; ++k) check(v * V + k, p.x[k]);
  }
  for (std::uint64_t i = nvec * V + tid; i < n; i += stride) check(i, in[i]);
  if (bad) {
    atomicAdd(&result[0], bad);
    atomicMin(&result[1], first);
  }
}

// ---- host side -----------------------------------------------------------------------------------------
unsigned grid_for(std::uint64_t work) {
  return unsigned(std::clamp<std::uint64_t>((work + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

template <class T, class Gen>
void launch_fill(void* out, std::uint64_t n, Gen gen, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int V = 16 / sizeof(T);
  if (aligned16(out))
    fill_kernel<T, V><<<grid_for(n / V + 1), kThreads, 0, stream>>>(static_cast<T*>(out), n, gen);
  else
    fill_kernel<T, 1><<<grid_for(n), kThreads, 0, stream>>>(static_cast<T*>(out), n, gen);
  TB_CHECK_LAUNCH();
}

template <class T>
void launch_verify(const void* in, std::uint64_t n, const Expect& e, double tol, unsigned long long* result,
                   cudaStream_t stream) {
  if (n == 0) return;
  constexpr int V = 16 / sizeof(T);
  if (aligned16(in))
    verify_kernel<T, V><<<grid_for(n / V + 1), kThreads, 0, stream>>>(static_cast<const T*>(in), n, e, tol, result);
  else
    verify_kernel<T, 1><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(in), n, e, tol, result);
  TB_CHECK_LAUNCH();
}

// Calls f(T{}) with the element type of t.
template <class F>
void with_type(DType t, F&& f) {
  switch (t) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::f16: return f(__half{});
    case DType::bf16: return f(__nv_bfloat16{});
    case DType::i32: return f(std::int32_t{});
    default: raise_config("nccl data: dtype " + std::string(dtype_name(t)) + " is not one the nccl suite moves");
  }
}

Pattern pattern_of(const CollCase& c) { return Pattern{coll_info(c.coll).reduces && c.op == ReduceOp::prod}; }

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    default: raise_config("nccl: dtype " + std::string(dtype_name(t)) + " has no NCCL type in the nccl suite");
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::prod: return ncclProd;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
    case ReduceOp::avg: return ncclAvg;
  }
  return ncclSum;
}

}  // namespace

void fill_send(const CollCase& c, int rank, void* send, cudaStream_t stream) {
  const SendGen gen{pattern_of(c), rank};
  with_type(c.dtype, [&](auto tag) { launch_fill<decltype(tag)>(send, c.counts().send_count, gen, stream); });
}

void fill_sentinel(const CollCase& c, void* recv, cudaStream_t stream) {
  with_type(c.dtype, [&](auto tag) { launch_fill<decltype(tag)>(recv, c.counts().recv_count, SentinelGen{}, stream); });
}

Mismatches verify_recv(const CollCase& c, int rank, const void* recv, cudaStream_t stream) {
  TB_REQUIRE(c.count > 0 && c.nranks > 0 && rank >= 0 && rank < c.nranks, "nccl verify: bad case (count or rank)");
  const Expect e{pattern_of(c), c.coll, c.op, c.nranks, rank, c.root, c.count};
  const bool approx = coll_info(c.coll).reduces && c.op == ReduceOp::avg;
  const double tol = approx ? 2 * dtype_eps(c.dtype) * c.nranks * kMaxAbsValue : 0.0;  // see nccl_data.h
  unsigned long long* d_result = nullptr;
  TB_CHECK(cudaMallocAsync(&d_result, 2 * sizeof(unsigned long long), stream));
  unsigned long long h_result[2] = {0, ~0ull};
  Mismatches m;
  try {
    TB_CHECK(cudaMemcpyAsync(d_result, h_result, sizeof(h_result), cudaMemcpyHostToDevice, stream));
    with_type(c.dtype, [&](auto tag) {
      launch_verify<decltype(tag)>(recv, c.counts().recv_count, e, tol, d_result, stream);
    });
    TB_CHECK(cudaMemcpyAsync(h_result, d_result, sizeof(h_result), cudaMemcpyDeviceToHost, stream));
    TB_CHECK(cudaStreamSynchronize(stream));
  } catch (...) {
    cudaFreeAsync(d_result, stream);
    throw;
  }
  TB_CHECK(cudaFreeAsync(d_result, stream));
  m.count = h_result[0];
  m.first = m.count ? std::int64_t(h_result[1]) : -1;
  return m;
}

void enqueue(comm::LocalComms& comms, const CollCase& c, std::span<void* const> send, std::span<void* const> recv) {
  const int n = comms.size();
  TB_REQUIRE(n == c.nranks && int(send.size()) == n && int(recv.size()) == n,
             "nccl enqueue: one send and one receive buffer per rank, and as many ranks as communicators");
  const ncclDataType_t type = nccl_type(c.dtype);
  const std::size_t chunk = c.count * dtype_size(c.dtype);  // bytes per peer (alltoall)
  comms.group([&](int r) {
    const ncclComm_t comm = comms.comm(r);
    const cudaStream_t s = comms.stream(r);
    auto* sb = static_cast<char*>(send[r]);
    auto* rb = static_cast<char*>(recv[r]);
    switch (c.coll) {
      case Coll::all_reduce: TB_CHECK(ncclAllReduce(sb, rb, c.count, type, nccl_op(c.op), comm, s)); break;
      case Coll::all_gather: TB_CHECK(ncclAllGather(sb, rb, c.count, type, comm, s)); break;
      case Coll::reduce_scatter: TB_CHECK(ncclReduceScatter(sb, rb, c.count, type, nccl_op(c.op), comm, s)); break;
      case Coll::alltoall:
        for (int p = 0; p < n; ++p) {
          TB_CHECK(ncclSend(sb + p * chunk, c.count, type, p, comm, s));
          TB_CHECK(ncclRecv(rb + p * chunk, c.count, type, p, comm, s));
        }
        break;
      case Coll::broadcast: TB_CHECK(ncclBroadcast(sb, rb, c.count, type, c.root, comm, s)); break;
      case Coll::sendrecv:
        TB_CHECK(ncclSend(sb, c.count, type, (r + 1) % n, comm, s));
        TB_CHECK(ncclRecv(rb, c.count, type, (r + n - 1) % n, comm, s));
        break;
    }
  });
}

}  // namespace tb::micro
