// bench/lab/cast_lab.cu: the FP8 cast + transpose of ops/cuda/fp8_cast.cuh against variants with other tile shapes and
// wider transposed stores (a lab, not part of trainbench): the question before reworking the tile kernel that every
// FP8 cast, the FP8 weight copies and the fused producers (norms, activations) run on. Tenth session: the fused
// activation backward moved its bytes at ~2.3 TB/s through it, streaming kernels at ~4 TB/s.
// Per element: read 2 bytes (bf16 x), write 2 (q and its transpose qt), so the floor is 4 rows cols / DRAM bandwidth
// (~4.0-4.3 TB/s measured for copies on an H200: 1.7 ms for 8192 x 57344).
// Variants V<TR, TC, SB>: the production kernel (detail::cast_transpose_tiles_kernel) at other geometries, TR x TC
// tiles of x per block of 256 threads, transposed stores of SB bytes (SB consecutive rows of one column of the tile);
// V<64, 64, 8> is what fp8_cast runs. Delayed scaling (the scale given), E4M3. Each variant's q, qt and amax are
// checked bit for bit against ops::fp8_cast before it is timed (bench/loop.h, median of 10 after 3).
// Session 19 (bench/RESULTS.md, "the FP8 cast's ~3 TB/s"): persistent blocks with the next
// tile's loads in flight (P), column-major tile order (C, C1) and the kernel without its amax are no faster than
// V<64,64,8>; even a read-only pass of one tile per block moves ~2.2 TB/s (the "only" rows); the "R" rows read only,
// in regions of other shapes or as one stream.
// Usage: cast_lab [RxC ...] (default: the 8B L8 step's casts 8192x4096 8192x14336 8192x28672 4096x14336 14336x4096)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
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

template <int TR, int TC, int SB>
void launch(const __nv_bfloat16* x, CastTarget p, cudaStream_t st) {
  const dim3 grid(unsigned(p.cols / TC), unsigned(p.rows / TR));
  cast_transpose_tiles_kernel<__NV_E4M3, TR, TC, SB><<<grid, kCastThreads, 0, st>>>(Bf16Source{x, p.cols}, p);
  TB_CHECK_LAUNCH();
}

// Persistent variant P<TR, TC, SB>: a grid of (blocks resident per SM) x SMs, each block looping over tiles in the
// order of the production grid (columns fastest), the next tile's bf16 loads issued into registers before this tile's
// codes are written, so every block keeps reads in flight while it stores (the production kernel's blocks read, then
// wait at the barrier, then store). One amax atomic per block instead of per tile. ColMajor: tiles in column-major
// order (rows fastest; C). WriteQt false: no transposed copy (a diagnostic of where the time goes).
template <__nv_fp8_interpretation_t Kind, int TR, int TC, int SB, bool ColMajor, bool WriteQt = true>
__global__ void __launch_bounds__(kCastThreads) persistent_kernel(const __nv_bfloat16* x, CastTarget p) {
  constexpr int kLoads = TR * TC / 8 / kCastThreads, kStores = TR * TC / SB / kCastThreads;
  __shared__ __align__(16) std::uint8_t tile[TR][TC + 8];
  const float s = cast_scale(p);
  const Rounding rnd = cast_rounding(p, s);
  const int t = threadIdx.x;
  const std::int64_t tiles_c = p.cols / TC, tiles_r = p.rows / TR, tiles = tiles_c * tiles_r;
  auto origin = [&](std::int64_t i, std::int64_t& r0, std::int64_t& c0) {  // tile i's first row and column
    if constexpr (ColMajor)
      r0 = i % tiles_r * TR, c0 = i / tiles_r * TC;
    else
      r0 = i / tiles_c * TR, c0 = i % tiles_c * TC;
  };
  float m = 0.0f;
  bool nan = false;
  uint4 cur[kLoads], nxt[kLoads];
  auto load = [&](std::int64_t i, uint4(&raw)[kLoads]) {
    std::int64_t r0, c0;
    origin(i, r0, c0);
#pragma unroll
    for (int pass = 0; pass < kLoads; ++pass) {
      const int v = pass * kCastThreads + t, r = v / (TC / 8), cg = (v % (TC / 8)) * 8;
      raw[pass] = __ldg(reinterpret_cast<const uint4*>(x + (r0 + r) * p.cols + c0 + cg));
    }
  };
  std::int64_t i = blockIdx.x;
  if (i < tiles) load(i, cur);
  for (; i < tiles; i += gridDim.x) {
    if (i + gridDim.x < tiles) load(i + gridDim.x, nxt);
    std::int64_t r0, c0;
    origin(i, r0, c0);
#pragma unroll
    for (int pass = 0; pass < kLoads; ++pass) {
      const int v = pass * kCastThreads + t, r = v / (TC / 8), cg = (v % (TC / 8)) * 8;
      const std::int64_t row = r0 + r;
      float f[8];
      unpack8(cur[pass], f);
      const uint2 out = cast8<Kind>(f, s, m, nan, rnd, std::uint64_t(row * p.cols + c0 + cg));
      if (p.q) *reinterpret_cast<uint2*>(p.q + row * p.cols + c0 + cg) = out;
      *reinterpret_cast<uint2*>(&tile[r][cg]) = out;
    }
    __syncthreads();
#pragma unroll
    for (int pass = 0; pass < kStores && WriteQt; ++pass) {
      const int v = pass * kCastThreads + t, c = v / (TR / SB), rg = (v % (TR / SB)) * SB;
      store_tile_column<SB>(tile, rg, c, p.qt + (c0 + c) * p.rows + r0 + rg);
    }
    __syncthreads();
#pragma unroll
    for (int pass = 0; pass < kLoads; ++pass) cur[pass] = nxt[pass];
  }
  if (p.amax_out) record_block_amax(m, nan, p.amax_out);
}

// PerSm: blocks per SM (0: as many as fit; -1: one block per tile, no loop).
template <int TR, int TC, int SB, int PerSm, bool ColMajor, bool WriteQt = true>
void launch_persistent(const __nv_bfloat16* x, CastTarget p, cudaStream_t st) {
  constexpr auto kernel = persistent_kernel<__NV_E4M3, TR, TC, SB, ColMajor, WriteQt>;
  static int sms = 0, per_sm = 0;
  if (!sms) {
    TB_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    TB_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kCastThreads, 0));
    std::printf("# P<%d,%d,%d>%s: %d blocks per SM resident\n", TR, TC, SB, ColMajor ? " column-major" : "", per_sm);
  }
  const std::int64_t tiles = (p.rows / TR) * (p.cols / TC);
  const std::int64_t resident = std::int64_t(sms) * (PerSm > 0 ? PerSm : per_sm);
  const unsigned grid = unsigned(PerSm < 0 ? tiles : std::min(tiles, resident));
  kernel<<<grid, kCastThreads, 0, st>>>(x, p);
  TB_CHECK_LAUNCH();
}

// Read-only passes (call 11): the amax of x, read as TR x TC regions, one per block of 256 threads with every load
// issued before any is used (TR * TC / 2048 loads of 16 bytes per thread), or as one flat stream (Stream: a grid of 8
// blocks per SM, 4 loads in flight per thread). Which read pattern holds the tile kernel's read pass at ~2.2 TB/s:
// the tile's rows of 128 bytes (64 x 64) against wider (64 x 256: 512-byte rows) or taller (256 x 64) regions.
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
    {"P<64,64,8>", launch_persistent<64, 64, 8, 0, false>},
    {"P<64,128,8>", launch_persistent<64, 128, 8, 0, false>},
    {"C<64,64,8>", launch_persistent<64, 64, 8, 0, true>},
    {"C<64,128,8>", launch_persistent<64, 128, 8, 0, true>},
    {"C<64,64,16>", launch_persistent<64, 64, 16, 0, true>},
    {"C<128,64,16>", launch_persistent<128, 64, 16, 0, true>},
    {"C1<64,64,8>", launch_persistent<64, 64, 8, -1, true>},
    {"C1<64,128,8>", launch_persistent<64, 128, 8, -1, true>},
    {"C1<128,64,16>", launch_persistent<128, 64, 16, -1, true>},
    {"V<64,64,8>", launch<64, 64, 8>},    {"V<64,64,16>", launch<64, 64, 16>},     {"V<64,128,8>", launch<64, 128, 8>},
    {"V<128,64,16>", launch<128, 64, 16>}, {"V<128,128,16>", launch<128, 128, 16>},
};

std::vector<std::uint8_t> host(const tb::ops::DeviceBuffer& b) {
  std::vector<std::uint8_t> h(b.bytes());
  TB_CHECK(cudaMemcpy(h.data(), b.get(), h.size(), cudaMemcpyDeviceToHost));
  return h;
}

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
    ops::DeviceBuffer x(0, n * 2), q0(0, n), qt0(0, n), q(0, n), qt(0, n);
    ops::fill_uniform(x.get(), DType::bf16, n, 7, -3, 3, st);
    ops::Fp8CastArgs a;
    a.x = x.as<__nv_bfloat16>(), a.rows = rows, a.cols = cols, a.q = q0.get(), a.qt = qt0.get();
    a.scale = scale, a.scale_inv = scale + 1, a.amax_out = scale + 2;
    TB_CHECK(cudaMemcpy(scale, init, sizeof init, cudaMemcpyHostToDevice));
    ops::fp8_cast(a, st);
    dc.synchronize();
    const auto want_q = host(q0), want_qt = host(qt0);
    const float want_amax = host_float(scale + 2);
    const double bytes = 4.0 * double(n);
    const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
    const double t0 = bench::median_ms(0, st, [&] { ops::fp8_cast(a, st); });
    std::printf("%-16s %-14s %9.3f %8.2f  (reference)\n", shape.c_str(), "fp8_cast", t0, bytes / t0 * 1e-9);
    CastTarget p{rows, cols, q.as<std::uint8_t>(), qt.as<std::uint8_t>(), nullptr, scale, scale + 1, scale + 2,
                 448.0f, 0};
    for (const Variant& v : kVariants) {
      TB_CHECK(cudaMemcpy(scale, init, sizeof init, cudaMemcpyHostToDevice));
      TB_CHECK(cudaMemsetAsync(q.get(), 0, n, st));  // on st: the legacy stream does not order a non-blocking one
      TB_CHECK(cudaMemsetAsync(qt.get(), 0, n, st));
      v.launch(x.as<__nv_bfloat16>(), p, st);
      dc.synchronize();
      const bool same = host(q) == want_q && host(qt) == want_qt && host_float(scale + 2) == want_amax;
      const double t = bench::median_ms(0, st, [&] { v.launch(x.as<__nv_bfloat16>(), p, st); });
      std::printf("%-16s %-14s %9.3f %8.2f  %s\n", shape.c_str(), v.name, t, bytes / t * 1e-9,
                  same ? "bit for bit" : "DIFFERS");
    }
    // Where the time goes (calls 4, 5, 11): the production kernel without its amax, writing only qt; one tile per
    // block writing only q, and reading only (amax; neither copy written), also the read-only passes ("R"); each
    // against the bytes it moves.
    struct Part {
      const char* name;
      bool q, qt;
      void (*launch)(const __nv_bfloat16*, CastTarget, cudaStream_t);
    };
    const Part parts[] = {{"V no amax", true, true, launch<64, 64, 8>},
                          {"V qt only", false, true, launch<64, 64, 8>},
                          {"C1 q only", true, false, launch_persistent<64, 64, 8, -1, true, false>},
                          {"C1 read only", false, false, launch_persistent<64, 64, 8, -1, true, false>},
                          {"R 64x64", false, false, launch_read_region<64, 64>},
                          {"R 64x256", false, false, launch_read_region<64, 256>},
                          {"R 256x64", false, false, launch_read_region<256, 64>},
                          {"R 128x128", false, false, launch_read_region<128, 128>},
                          {"R 32x512", false, false, launch_read_region<32, 512>},
                          {"R stream", false, false, launch_read_stream}};
    for (const Part& part : parts) {
      CastTarget pp = p;
      if (!part.q) pp.q = nullptr;
      if (part.q && part.qt) pp.amax_out = nullptr;  // "V no amax"
      TB_CHECK(cudaMemcpy(scale, init, sizeof init, cudaMemcpyHostToDevice));
      TB_CHECK(cudaMemsetAsync(q.get(), 0, n, st));
      TB_CHECK(cudaMemsetAsync(qt.get(), 0, n, st));
      part.launch(x.as<__nv_bfloat16>(), pp, st);
      dc.synchronize();
      const bool same = (!part.q || host(q) == want_q) && (!part.qt || host(qt) == want_qt) &&
                        (!pp.amax_out || host_float(scale + 2) == want_amax);
      const double t = bench::median_ms(0, st, [&] { part.launch(x.as<__nv_bfloat16>(), pp, st); });
      const double b = double(n) * (2 + int(part.q) + int(part.qt));
      std::printf("%-16s %-14s %9.3f %8.2f  %s\n", shape.c_str(), part.name, t, b / t * 1e-9,
                  same ? "its part bit for bit" : "DIFFERS");
    }
  }
  return 0;
}
