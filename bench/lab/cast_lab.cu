// bench/lab/cast_lab.cu: the FP8 cast + transpose of ops/cuda/fp8_cast.cuh (its vector kernel, through ops::fp8_cast)
// against read-only passes over the same matrix (a lab, not part of trainbench): how near the read side's ceiling
// the cast runs.
// Per element: read 2 bytes (bf16 x), write 2 (q and its transpose qt), so the floor is 4 rows cols / DRAM bandwidth
// (~4.0-4.3 TB/s measured for copies on an H200: 1.7 ms for 8192 x 57344). Delayed scaling (the scale given), E4M3;
// each read-only pass's amax is checked bit for bit against fp8_cast's before it is timed (bench/loop.h, median of 10
// after 3).
// History (measured on an H200 on 2026-12-01; the variants are in git history, this file at commit 79df47f): the 64 x 64 shared-memory tile kernel moved 2.8-3.3 TB/s; persistent blocks, other
// tile orders, no amax and every pass's loads first gained little; 128-row tiles lost (16-byte column gathers from
// shared memory: 8-way bank conflicts, and the loads held as floats: 116 registers). What mattered was bytes in
// flight per SM at few registers per byte (read-only passes: ~64 KB per SM ~3.2 TB/s, ~128 KB ~4.5): 64 x 128 tiles
// staged with cp.async (no registers) and 8 x 8 blocks per thread held as raw bytes, transposed in registers, both
// reached 3.3-3.8 TB/s; the second is the production kernel now (no shared memory).
// Rows: fp8_cast, then read-only passes (R: the read side's ceiling, 2 bytes an element).
// Usage: cast_lab [RxC ...] (default: the 8B L8 step's casts 8192x4096 8192x14336 8192x28672 4096x14336 14336x4096)
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "bench/loop.h"
#include "core/error.h"
#include "ops/cuda/context.h"
#include "ops/cuda/fill.h"
#include "ops/cuda/fp8.h"
#include "ops/cuda/fp8_cast.cuh"

namespace {

using namespace tb::ops::detail;

struct Variant {
  const char* name;
  void (*launch)(const __nv_bfloat16*, CastTarget, cudaStream_t);
};

// Read-only passes: the amax of x, read as TR x TC regions, one per block of 256 threads with
// every load issued before any is used (TR * TC / 2048 loads of 16 bytes per thread), or as one flat stream (Stream:
// a grid of 8 blocks per SM, 4 loads in flight per thread).
template <int TR, int TC>
__global__ void __launch_bounds__(kCastThreads) read_region_kernel(const __nv_bfloat16* x, std::int64_t cols,
                                                                     float* amax) {
  constexpr int kLoads = TR * TC / 8 / kCastThreads;
  const std::int64_t r0 = std::int64_t(blockIdx.y) * TR, c0 = std::int64_t(blockIdx.x) * TC;
  uint4 raw[kLoads];
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int v = k * kCastThreads + int(threadIdx.x), r = v / (TC / 8), cg = (v % (TC / 8)) * 8;
    raw[k] = __ldg(reinterpret_cast<const uint4*>(x + (r0 + r) * cols + c0 + cg));
  }
  float m = 0.0f;
  bool nan = false;
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    float f[8];
    unpack8(raw[k], f);
#pragma unroll
    for (int j = 0; j < 8; ++j) m = fmaxf(m, abs_or_nan(f[j], nan));
  }
  record_block_amax(m, nan, amax);
}

__global__ void __launch_bounds__(kCastThreads) read_stream_kernel(const uint4* x, std::int64_t n16, float* amax) {
  float m = 0.0f;
  bool nan = false;
  const std::int64_t stride = std::int64_t(gridDim.x) * kCastThreads;
  for (std::int64_t i = std::int64_t(blockIdx.x) * kCastThreads + threadIdx.x; i < n16; i += 4 * stride) {
    uint4 raw[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) raw[k] = i + k * stride < n16 ? __ldg(x + i + k * stride) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      float f[8];
      unpack8(raw[k], f);
#pragma unroll
      for (int j = 0; j < 8; ++j) m = fmaxf(m, abs_or_nan(f[j], nan));
    }
  }
  record_block_amax(m, nan, amax);
}

template <int TR, int TC>
void launch_read_region(const __nv_bfloat16* x, CastTarget p, cudaStream_t st) {
  read_region_kernel<TR, TC><<<dim3(unsigned(p.cols / TC), unsigned(p.rows / TR)), kCastThreads, 0, st>>>(
      x, p.cols, p.amax_out);
  TB_CHECK_LAUNCH();
}

void launch_read_stream(const __nv_bfloat16* x, CastTarget p, cudaStream_t st) {
  int sms = 0;
  TB_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  read_stream_kernel<<<unsigned(8 * sms), kCastThreads, 0, st>>>(reinterpret_cast<const uint4*>(x),
                                                                   p.rows * p.cols / 8, p.amax_out);
  TB_CHECK_LAUNCH();
}

const Variant kVariants[] = {
    {"R 64x64", launch_read_region<64, 64>}, {"R 128x128", launch_read_region<128, 128>},
    {"R stream", launch_read_stream},
};

float host_float(const float* p) {
  float v = 0;
  TB_CHECK(cudaMemcpy(&v, p, sizeof v, cudaMemcpyDeviceToHost));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tb;
  std::vector<std::pair<std::int64_t, std::int64_t>> shapes;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto x = a.find('x');
    TB_REQUIRE(x != std::string::npos, "cast_lab: shapes are RxC, e.g. 8192x4096; got " + a);
    shapes.emplace_back(std::atoll(a.substr(0, x).c_str()), std::atoll(a.substr(x + 1).c_str()));
  }
  if (shapes.empty()) shapes = {{8192, 4096}, {8192, 14336}, {8192, 28672}, {4096, 14336}, {14336, 4096}};
  ops::DeviceContext dc(0);
  cudaStream_t st = dc.stream();
  ops::DeviceBuffer meta(0, 256);  // scale, scale_inv, amax
  float* scale = meta.as<float>();
  const float init[3] = {64.0f, 0.0f, 0.0f};
  std::printf("%-16s %-14s %9s %8s  %s\n", "shape", "kernel", "ms", "TB/s", "check");
  for (auto [rows, cols] : shapes) {
    TB_REQUIRE(rows % 128 == 0 && cols % 128 == 0, "cast_lab: rows and cols must be multiples of 128");
    const std::size_t n = std::size_t(rows * cols);
    ops::DeviceBuffer x(0, n * 2), q(0, n), qt(0, n);
    ops::fill_uniform(x.get(), DType::bf16, n, 7, -3, 3, st);
    ops::Fp8CastArgs a;
    a.x = x.as<__nv_bfloat16>(), a.rows = rows, a.cols = cols, a.q = q.get(), a.qt = qt.get();
    a.scale = scale, a.scale_inv = scale + 1, a.amax_out = scale + 2;
    TB_CHECK(cudaMemcpy(scale, init, sizeof init, cudaMemcpyHostToDevice));
    ops::fp8_cast(a, st);
    dc.synchronize();
    const float want_amax = host_float(scale + 2);
    const double bytes = 4.0 * double(n);
    const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
    const double t0 = bench::median_ms(0, st, [&] { ops::fp8_cast(a, st); });
    std::printf("%-16s %-14s %9.3f %8.2f  (reference)\n", shape.c_str(), "fp8_cast", t0, bytes / t0 * 1e-9);
    const CastTarget p{rows, cols, nullptr, nullptr, nullptr, scale, scale + 1, scale + 2, 448.0f, 0};  // amax only
    for (const Variant& v : kVariants) {
      TB_CHECK(cudaMemcpy(scale, init, sizeof init, cudaMemcpyHostToDevice));
      v.launch(x.as<__nv_bfloat16>(), p, st);
      dc.synchronize();
      const bool same = host_float(scale + 2) == want_amax;
      const double t = bench::median_ms(0, st, [&] { v.launch(x.as<__nv_bfloat16>(), p, st); });
      std::printf("%-16s %-14s %9.3f %8.2f  %s\n", shape.c_str(), v.name, t, bytes / 2 / t * 1e-9,
                  same ? "amax bit for bit" : "DIFFERS");
    }
  }
  return 0;
}
