// bench/lab/overlap_lab.cpp: how much of a memory-bound optimizer step hides behind compute-bound GEMMs when the two
// run at once (a lab, not part of trainbench): the question before overlapping AdamW with the next forward.
// Work, sized like Llama 3.1 8B with 8 layers on one H200 (bench/lab/step_parts.h): K forward-like GEMMs
// [8192 x 4096] x [4096 x 14336]^T (0.96 TFLOP each, random operands: power-limited rates need real data) on the
// compute stream, and AdamW over P parameters (fp32 master, moments, gradients, bf16 weights: 30 bytes moved per
// parameter) in G groups on a second stream.
// Timed (bench/loop.h, median of 10 after 3): GEMMs alone (T_g), AdamW alone (T_a), both launched together with the
// AdamW stream at high / normal priority (T_both). hidden = (T_g + T_a - T_both) / T_a: the share of the optimizer
// that overlapping could remove from a step. Then the GPU split between the two, for each S in the list:
//   sms S:   the GEMMs planned for (SMs - S) (cuBLASLt's SM count target), AdamW at high priority taking the S left
//   green S: as sms S, AdamW on a stream of a green context holding S SMs (CUDA driver API), so it never takes the
//            GEMMs' SMs either
// Usage: overlap_lab [P_millions=1000] [K=20] [G=8] [S,S,...=8,16,24,32]
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "bench/loop.h"
#include "core/error.h"
#include "step_parts.h"

int main(int argc, char** argv) {
  using namespace tb;
  const std::size_t P = std::size_t(argc > 1 ? std::atol(argv[1]) : 1000) * 1000000;
  const int K = argc > 2 ? std::atoi(argv[2]) : 20, G = argc > 3 ? std::atoi(argv[3]) : 8;
  std::vector<int> splits;
  std::stringstream list(argc > 4 ? argv[4] : "8,16,24,32");
  for (std::string item; std::getline(list, item, ',');) splits.push_back(std::atoi(item.c_str()));
  ops::DeviceContext dc(0);
  cudaStream_t st = dc.stream();
  lab::GemmLoad gemm(st);
  lab::AdamWLoad opt(P, st);
  const auto groups = opt.groups(G);
  dc.synchronize();
  int lowest = 0, highest = 0;
  TB_CHECK(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
  cudaStream_t hi, lo;
  TB_CHECK(cudaStreamCreateWithPriority(&hi, cudaStreamNonBlocking, highest));
  TB_CHECK(cudaStreamCreateWithPriority(&lo, cudaStreamNonBlocking, lowest));
  cudaEvent_t fork, join;
  TB_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  TB_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  int sms = 0;
  TB_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  auto gemms_on = [&](int sm_target) { gemm.run(dc, K, sm_target); };
  auto gemms = [&] { gemms_on(0); };
  auto adamw = [&](cudaStream_t s) {
    for (auto& grp : groups) opt.step(*grp, s);
  };
  auto both = [&](cudaStream_t side, int sm_target = 0, bool with_gemms = true) {  // AdamW on `side`, GEMMs on st
    TB_CHECK(cudaEventRecord(fork, st));
    TB_CHECK(cudaStreamWaitEvent(side, fork, 0));
    adamw(side);
    if (with_gemms) gemms_on(sm_target);
    TB_CHECK(cudaEventRecord(join, side));
    TB_CHECK(cudaStreamWaitEvent(st, join, 0));
  };
  using bench::median_ms;
  const double tg = median_ms(0, st, gemms), ta = median_ms(0, st, [&] { adamw(st); });
  const double th = median_ms(0, st, [&] { both(hi); }), tl = median_ms(0, st, [&] { both(lo); });
  std::printf("GEMMs alone  %8.2f ms  (%d x %.2f TFLOP: %.0f TFLOP/s)\n", tg, K, lab::GemmLoad::tflop(1),
              1e3 * lab::GemmLoad::tflop(K) / tg);
  std::printf("AdamW alone  %8.2f ms  (%zu M params x 30 B: %.2f TB/s)\n", ta, P / 1000000, opt.tbps(ta));
  for (auto [name, t] : {std::pair{"high", th}, std::pair{"normal", tl}})
    std::printf("both, AdamW stream %-6s priority %8.2f ms: hidden %.0f%% of AdamW\n", name, t,
                100.0 * (tg + ta - t) / ta);
  for (int S : splits) {
    const int target = sms - S;
    const double tgs = median_ms(0, st, [&] { gemms_on(target); });
    const double tb = median_ms(0, st, [&] { both(hi, target); });
    std::printf("sms %3d: GEMMs on %3d SMs alone %8.2f ms (%.0f TFLOP/s), with AdamW %8.2f ms: hidden %.0f%%\n", S,
                target, tgs, 1e3 * lab::GemmLoad::tflop(K) / tgs, tb, 100.0 * (tg + ta - tb) / ta);
    const lab::GreenStream green(S, highest);
    if (!green.ok()) {
      std::printf("green %3d: no green context of %d SMs\n", S, S);
      continue;
    }
    const double ta_g = median_ms(0, st, [&] { both(green.stream(), 0, false); });
    const double tb_g = median_ms(0, st, [&] { both(green.stream(), target); });
    std::printf("green %3d (%u SMs): AdamW alone %8.2f ms (%.2f TB/s), with the GEMMs %8.2f ms: hidden %.0f%%\n", S,
                green.sms(), ta_g, opt.tbps(ta_g), tb_g, 100.0 * (tg + ta - tb_g) / ta);
  }
  return 0;
}
