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
// Usage: cast_lab [RxC ...] (default: the 8B L8 step's casts 8192x4096 8192x14336 8192x28672 4096x14336 14336x4096)
#include <cuda_runtime_api.h>

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

const Variant kVariants[] = {
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
  }
  return 0;
}
