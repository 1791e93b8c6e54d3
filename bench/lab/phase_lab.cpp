// bench/lab/phase_lab.cpp: under the GPU's power cap, does the power of a memory-bound phase reach the GEMMs after it?
// (a lab, not part of trainbench). A cycle shaped like the 8B L8 training step on one H200: K GEMMs [8192 x 4096] x
// [4096 x 14336]^T (0.96 TFLOP each, random operands), then AdamW over P parameters (fp32 master, moments and
// gradients, bf16 weights: 30 bytes per parameter), on all SMs or on a green context of S SMs (CUDA driver API; the
// idle SMs draw no switching power). Each case runs at least 3 s of cycles before 10 timed ones (bench/loop.h), with
// NVML telemetry over the timed ones: cycle ms, the GEMMs' and AdamW's parts (events inside each cycle), power, clock.
// Reading: the GEMMs' part at a higher clock when AdamW ran on fewer SMs means the step is bound by energy, not by
// each kernel's time, and a memory-bound phase should use as few SMs as keep its bandwidth.
// Then AdamW in N slices, each after K / N of the GEMMs (the optimizer spread over the next forward, layer by layer):
// the low-power phases between GEMMs, as the torch peer's step has them; the parts are then summed over the slices.
// Measured (session 21, one H200 at 700 W, bench/results/2026-12-01-h200-session21/call5): AdamW alone 4.0 TB/s at
// 580 W on all SMs, 3.9 TB/s at 559 W on 48; the cycle 214.7-216.7 ms in every case, its GEMMs 194.0-195.2 ms (alone
// 196.4): the SMs AdamW leaves idle save ~20 W and buy the GEMMs nothing. Green contexts round S up to a multiple of 8.
// Call 6 (another H200): AdamW in 7 / 35 slices 220.0 / 221.1 ms, as one block 220.3-221.9: spreading buys nothing.
// Usage: phase_lab [P_millions=2800] [K=140] [S,S,...=48,66,88] [N,N,...=7,35]
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/loop.h"
#include "bench/telemetry.h"
#include "core/error.h"
#include "ops/cuda/adamw.h"
#include "ops/cuda/context.h"
#include "ops/cuda/fill.h"

namespace {

struct Parts {  // events around one cycle's GEMMs and AdamW
  cudaEvent_t start, mid, end;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tb;
  const std::size_t P = std::size_t(argc > 1 ? std::atol(argv[1]) : 2800) * 1000000;
  const int K = argc > 2 ? std::atoi(argv[2]) : 140;
  std::vector<int> splits;
  std::stringstream list(argc > 3 ? argv[3] : "48,66,88");
  for (std::string item; std::getline(list, item, ',');) splits.push_back(std::atoi(item.c_str()));
  std::vector<int> slicings;
  std::stringstream list2(argc > 4 ? argv[4] : "7,35");
  for (std::string item; std::getline(list2, item, ',');) slicings.push_back(std::atoi(item.c_str()));
  ops::DeviceContext dc(0);
  cudaStream_t st = dc.stream();
  const std::int64_t m = 8192, n = 14336, k = 4096;
  ops::DeviceBuffer x(0, m * k * 2), w(0, n * k * 2), y(0, m * n * 2);
  ops::fill_uniform(x.get(), DType::bf16, std::size_t(m * k), 1, -1, 1, st);
  ops::fill_uniform(w.get(), DType::bf16, std::size_t(n * k), 2, -1, 1, st);
  ops::GemmShape g;
  g.m = m, g.n = n, g.k = k, g.a = g.b = g.d = DType::bf16, g.layout = ops::GemmLayout::abt;
  ops::DeviceBuffer master(0, P * 4), grad(0, P * 4), mom(0, P * 8), model(0, P * 2);
  ops::fill_uniform(master.get(), DType::f32, P, 3, -1, 1, st);
  ops::fill_uniform(grad.get(), DType::f32, P, 4, -1e-3f, 1e-3f, st);
  TB_CHECK(cudaMemsetAsync(mom.get(), 0, mom.bytes(), st));
  ops::AdamWTensor t;
  t.master = master.as<float>(), t.grad = grad.as<float>(), t.exp_avg = mom.as<float>();
  t.exp_avg_sq = mom.as<float>() + P, t.model = model.as<__nv_bfloat16>(), t.numel = std::int64_t(P);
  ops::AdamWGroup group(0, std::span<const ops::AdamWTensor>(&t, 1));
  ops::AdamWStepScalars host{1e-4f, 0, 1};
  ops::DeviceBuffer scalars(0, sizeof host);
  TB_CHECK(cudaMemcpy(scalars.get(), &host, sizeof host, cudaMemcpyHostToDevice));
  const auto* sc = scalars.as<ops::AdamWStepScalars>();
  dc.synchronize();
  cudaEvent_t fork, join;
  TB_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  TB_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  bench::Telemetry tel({0}, std::chrono::milliseconds(20));
  std::vector<Parts> parts;
  // One case: each cycle enqueues `gemms` then `adamw` on st between three events (parts[]); prints the medians of the
  // timed cycles and the telemetry over them.
  auto run = [&](const char* name, const std::function<void()>& gemms, const std::function<void()>& adamw) {
    for (auto& p : parts) {
      cudaEventDestroy(p.start), cudaEventDestroy(p.mid), cudaEventDestroy(p.end);
    }
    parts.clear();
    bench::LoopSpec spec;
    spec.warmup = 3, spec.iters = 10, spec.min_warmup_ms = 3000, spec.hold = false, spec.telemetry = &tel;
    const bench::Timing timing = bench::time_stream(spec, 0, st, [&](int) {
      Parts p;
      TB_CHECK(cudaEventCreate(&p.start));
      TB_CHECK(cudaEventCreate(&p.mid));
      TB_CHECK(cudaEventCreate(&p.end));
      TB_CHECK(cudaEventRecord(p.start, st));
      if (gemms) gemms();
      TB_CHECK(cudaEventRecord(p.mid, st));
      if (adamw) adamw();
      TB_CHECK(cudaEventRecord(p.end, st));
      parts.push_back(p);
    });
    TB_CHECK(cudaStreamSynchronize(st));
    std::vector<double> g_ms, a_ms;
    for (std::size_t i = parts.size() - std::min<std::size_t>(parts.size(), 10); i < parts.size(); ++i) {
      float a = 0, b = 0;
      TB_CHECK(cudaEventElapsedTime(&a, parts[i].start, parts[i].mid));
      TB_CHECK(cudaEventElapsedTime(&b, parts[i].mid, parts[i].end));
      g_ms.push_back(a), a_ms.push_back(b);
    }
    const auto s = timing.summary();
    const double gm = median(g_ms), am = median(a_ms);
    std::printf("%-22s cycle %8.2f ms | GEMMs %8.2f ms (%4.0f TFLOP/s) | AdamW %6.2f ms (%.2f TB/s)\n", name, s.median,
                gm, gm > 0.01 ? 2e-9 * m * n * k * K / gm : 0.0, am, am > 0.01 ? 30e-9 * P / am : 0.0);
    if (timing.marked)
      std::printf("%-22s %s\n", "", bench::describe(tel.summary(0, timing.telemetry_from, timing.telemetry_to)).c_str());
    std::fflush(stdout);
  };
  auto gemms = [&] {
    for (int i = 0; i < K; ++i) dc.gemm(g, y.get(), x.get(), w.get());
  };
  auto adamw_on = [&](cudaStream_t side) {  // AdamW on `side`, ordered after st's work and before st's next
    if (side == st) return ops::adamw_step(group, {}, sc, nullptr, st);
    TB_CHECK(cudaEventRecord(fork, st));
    TB_CHECK(cudaStreamWaitEvent(side, fork, 0));
    ops::adamw_step(group, {}, sc, nullptr, side);
    TB_CHECK(cudaEventRecord(join, side));
    TB_CHECK(cudaStreamWaitEvent(st, join, 0));
  };
  std::printf("phase_lab: %d GEMMs of %.2f TFLOP, then AdamW over %zu M parameters (30 B each)\n", K,
              2e-12 * m * n * k, P / 1000000);
  run("GEMMs alone", gemms, nullptr);
  run("AdamW alone, all SMs", nullptr, [&] { adamw_on(st); });
  run("cycle, AdamW all SMs", gemms, [&] { adamw_on(st); });
  for (int S : splits) {
    CUdevice dev;
    CUdevResource all, part, rest;
    unsigned n_groups = 1;
    CUdevResourceDesc desc;
    CUgreenCtx green;
    CUstream gs;
    const bool ok = cuDeviceGet(&dev, 0) == CUDA_SUCCESS &&
                    cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM) == CUDA_SUCCESS &&
                    cuDevSmResourceSplitByCount(&part, &n_groups, &all, &rest, 0, unsigned(S)) == CUDA_SUCCESS &&
                    cuDevResourceGenerateDesc(&desc, &part, 1) == CUDA_SUCCESS &&
                    cuGreenCtxCreate(&green, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM) == CUDA_SUCCESS &&
                    cuGreenCtxStreamCreate(&gs, green, CU_STREAM_NON_BLOCKING, 0) == CUDA_SUCCESS;
    if (!ok) {
      std::printf("S %3d: no green context of %d SMs\n", S, S);
      continue;
    }
    const auto side = reinterpret_cast<cudaStream_t>(gs);
    const std::string a = "AdamW alone, " + std::to_string(part.sm.smCount) + " SMs";
    const std::string c = "cycle, AdamW " + std::to_string(part.sm.smCount) + " SMs";
    run(a.c_str(), nullptr, [&] { adamw_on(side); });
    run(c.c_str(), gemms, [&] { adamw_on(side); });
    cuStreamDestroy(gs);
    cuGreenCtxDestroy(green);
  }
  for (int N : slicings) {  // AdamW in N groups of P / N, group i after GEMMs [i K / N, (i + 1) K / N)
    std::vector<std::unique_ptr<ops::AdamWGroup>> slices;
    const std::size_t per = P / std::size_t(N);
    for (int i = 0; i < N; ++i) {
      ops::AdamWTensor part = t;
      const std::size_t at = std::size_t(i) * per;
      part.master += at, part.model += at;  // the others are untyped: fp32 here
      part.grad = static_cast<const float*>(t.grad) + at;
      part.exp_avg = static_cast<float*>(t.exp_avg) + at, part.exp_avg_sq = static_cast<float*>(t.exp_avg_sq) + at;
      part.numel = std::int64_t(i + 1 == N ? P - at : per);
      slices.push_back(std::make_unique<ops::AdamWGroup>(0, std::span<const ops::AdamWTensor>(&part, 1)));
    }
    std::vector<std::vector<cudaEvent_t>> marks;  // per cycle: before and after each slice's AdamW
    bench::LoopSpec spec;
    spec.warmup = 3, spec.iters = 10, spec.min_warmup_ms = 3000, spec.hold = false, spec.telemetry = &tel;
    const bench::Timing timing = bench::time_stream(spec, 0, st, [&](int) {
      std::vector<cudaEvent_t> ev(2 * std::size_t(N));
      for (int i = 0; i < N; ++i) {
        for (int j = i * K / N; j < (i + 1) * K / N; ++j) dc.gemm(g, y.get(), x.get(), w.get());
        for (int e = 0; e < 2; ++e) {
          TB_CHECK(cudaEventCreate(&ev[std::size_t(2 * i + e)]));
          TB_CHECK(cudaEventRecord(ev[std::size_t(2 * i + e)], st));
          if (e == 0) ops::adamw_step(*slices[std::size_t(i)], {}, sc, nullptr, st);
        }
      }
      marks.push_back(std::move(ev));
    });
    TB_CHECK(cudaStreamSynchronize(st));
    std::vector<double> a_ms;
    for (std::size_t c = marks.size() - std::min<std::size_t>(marks.size(), 10); c < marks.size(); ++c) {
      double sum = 0;
      for (int i = 0; i < N; ++i) {
        float ms = 0;
        TB_CHECK(cudaEventElapsedTime(&ms, marks[c][std::size_t(2 * i)], marks[c][std::size_t(2 * i + 1)]));
        sum += ms;
      }
      a_ms.push_back(sum);
    }
    for (auto& ev : marks)
      for (auto e : ev) cudaEventDestroy(e);
    const double cyc = timing.summary().median, am = median(a_ms), gm = cyc - am;
    std::printf("cycle, AdamW in %2d slices cycle %8.2f ms | GEMMs %8.2f ms (%4.0f TFLOP/s) | AdamW %6.2f ms (%.2f TB/s)\n",
                N, cyc, gm, 2e-9 * m * n * k * K / gm, am, 30e-9 * P / am);
    if (timing.marked)
      std::printf("%-22s %s\n", "", bench::describe(tel.summary(0, timing.telemetry_from, timing.telemetry_to)).c_str());
    std::fflush(stdout);
  }
  run("cycle, AdamW all SMs", gemms, [&] { adamw_on(st); });  // again: the GPU's drift over the run
  return 0;
}
