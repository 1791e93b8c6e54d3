// bench/lab/phase_lab.cpp: under the GPU's power cap, does the power of a memory-bound phase reach the GEMMs after it?
// (a lab, not part of trainbench). A cycle shaped like the 8B L8 training step on one H200 (bench/lab/step_parts.h):
// K GEMMs, then AdamW over P parameters (30 bytes each): on all SMs; on a green context of S SMs (the idle SMs draw no
// switching power); or in N slices, slice i after GEMMs [i K / N, (i + 1) K / N) (the optimizer spread over the next
// forward layer by layer: low-power phases between GEMMs, as the torch peer's Triton kernels are). Each case runs at
// least 3 s of cycles before 10 timed ones (bench/loop.h), with NVML telemetry over the timed ones: cycle ms, the AdamW
// parts' sum (events around each), the rest (the GEMMs), power, clock.
// Reading: GEMMs faster beside a cheaper or spread AdamW would mean the step is bound by its energy, not by each
// kernel's time, and worth restructuring.
// Measured (one H200 at 700 W, 2026-12-01): AdamW alone 4.0 TB/s at
// 580 W on all SMs, 3.9 TB/s at 559 W on 48; the cycle 214.7-216.7 ms in every case, its GEMMs 194.0-195.2 ms (alone
// 196.4): the SMs AdamW leaves idle save ~20 W and buy the GEMMs nothing. Green contexts round S up to a multiple of 8.
// On another H200: AdamW in 7 / 35 slices 220.0 / 221.1 ms, as one block 220.3-221.9: spreading buys nothing.
// Usage: phase_lab [P_millions=2800] [K=140] [S,S,...=48,66,88] [N,N,...=7,35]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/loop.h"
#include "bench/telemetry.h"
#include "core/error.h"
#include "core/stats.h"
#include "step_parts.h"

namespace {

std::vector<int> int_list(const char* text) {
  std::vector<int> out;
  std::stringstream list(text);
  for (std::string item; std::getline(list, item, ',');) out.push_back(std::atoi(item.c_str()));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tb;
  const std::size_t P = std::size_t(argc > 1 ? std::atol(argv[1]) : 2800) * 1000000;
  const int K = argc > 2 ? std::atoi(argv[2]) : 140;
  const std::vector<int> splits = int_list(argc > 3 ? argv[3] : "48,66,88");
  const std::vector<int> slicings = int_list(argc > 4 ? argv[4] : "7,35");
  ops::DeviceContext dc(0);
  cudaStream_t st = dc.stream();
  lab::GemmLoad gemm(st);
  lab::AdamWLoad opt(P, st);
  const auto whole = opt.groups(1);
  dc.synchronize();
  cudaEvent_t fork, join;
  TB_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  TB_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  bench::Telemetry tel({0}, std::chrono::milliseconds(20));
  // One case: `cycle` enqueues a cycle on st and returns its events, in pairs around each AdamW part (before the first
  // pair: GEMMs only). Prints the medians of the 10 timed cycles (cycle, the AdamW parts' sum, the rest: GEMMs) and the
  // telemetry over them.
  auto run = [&](const std::string& name, const std::function<void(std::vector<cudaEvent_t>&)>& cycle) {
    std::vector<std::vector<cudaEvent_t>> marks;
    bench::LoopSpec spec;
    spec.warmup = 3, spec.iters = 10, spec.min_warmup_ms = 3000, spec.hold = false, spec.telemetry = &tel;
    const bench::Timing timing = bench::time_stream(spec, 0, st, [&](int) {
      marks.emplace_back();
      cycle(marks.back());
    });
    TB_CHECK(cudaStreamSynchronize(st));
    std::vector<double> a_ms;
    for (std::size_t c = marks.size() - std::min<std::size_t>(marks.size(), 10); c < marks.size(); ++c) {
      double sum = 0;
      for (std::size_t i = 0; i + 1 < marks[c].size(); i += 2) {
        float ms = 0;
        TB_CHECK(cudaEventElapsedTime(&ms, marks[c][i], marks[c][i + 1]));
        sum += ms;
      }
      a_ms.push_back(sum);
    }
    for (auto& ev : marks)
      for (auto e : ev) cudaEventDestroy(e);
    const double cyc = timing.summary().median, am = summarize(a_ms).median, gm = cyc - am;
    std::printf("%-26s cycle %8.2f ms | GEMMs %8.2f ms (%4.0f TFLOP/s) | AdamW %6.2f ms (%.2f TB/s)\n", name.c_str(),
                cyc, gm, gm > 0.01 ? 1e3 * lab::GemmLoad::tflop(K) / gm : 0.0, am, am > 0.01 ? opt.tbps(am) : 0.0);
    if (timing.marked) {
      const auto summary = tel.summary(0, timing.telemetry_from, timing.telemetry_to);
      std::printf("%-26s %s\n", "", bench::describe(summary).c_str());
    }
    std::fflush(stdout);
  };
  auto mark = [&](std::vector<cudaEvent_t>& ev, cudaStream_t s) {
    ev.emplace_back();
    TB_CHECK(cudaEventCreate(&ev.back()));
    TB_CHECK(cudaEventRecord(ev.back(), s));
  };
  // AdamW over group g on `side` (after st's work, before st's next), between two marks.
  auto adamw = [&](std::vector<cudaEvent_t>& ev, const ops::AdamWGroup& g, cudaStream_t side) {
    mark(ev, st);
    if (side != st) {
      TB_CHECK(cudaEventRecord(fork, st));
      TB_CHECK(cudaStreamWaitEvent(side, fork, 0));
    }
    opt.step(g, side);
    if (side != st) {
      TB_CHECK(cudaEventRecord(join, side));
      TB_CHECK(cudaStreamWaitEvent(st, join, 0));
    }
    mark(ev, st);
  };
  std::printf("phase_lab: %d GEMMs of %.2f TFLOP, then AdamW over %zu M parameters (30 B each)\n", K,
              lab::GemmLoad::tflop(1), P / 1000000);
  run("GEMMs alone", [&](auto&) { gemm.run(dc, K); });
  run("AdamW alone, all SMs", [&](auto& ev) { adamw(ev, *whole[0], st); });
  run("cycle, AdamW all SMs", [&](auto& ev) {
    gemm.run(dc, K);
    adamw(ev, *whole[0], st);
  });
  for (int S : splits) {
    const lab::GreenStream green(S, 0);
    if (!green.ok()) {
      std::printf("S %3d: no green context of %d SMs\n", S, S);
      continue;
    }
    const std::string sms = std::to_string(green.sms()) + " SMs";
    run("AdamW alone, " + sms, [&](auto& ev) { adamw(ev, *whole[0], green.stream()); });
    run("cycle, AdamW " + sms, [&](auto& ev) {
      gemm.run(dc, K);
      adamw(ev, *whole[0], green.stream());
    });
  }
  for (int N : slicings) {  // AdamW in N groups of P / N, group i after GEMMs [i K / N, (i + 1) K / N)
    const auto slices = opt.groups(N);
    run("cycle, AdamW in " + std::to_string(N) + " slices", [&](auto& ev) {
      for (int i = 0; i < N; ++i) {
        gemm.run(dc, (i + 1) * K / N - i * K / N);
        adamw(ev, *slices[std::size_t(i)], st);
      }
    });
  }
  run("cycle, AdamW all SMs", [&](auto& ev) {  // again: the GPU's drift over the run
    gemm.run(dc, K);
    adamw(ev, *whole[0], st);
  });
  return 0;
}
