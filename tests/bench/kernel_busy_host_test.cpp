// bench/kernel_busy.py (the share of each replayed step spent in kernels, from bench/lab/kernel_trace's CSV) on crafted
// traces: per replay the kernels of its cudaGraphLaunch (by correlation id, whatever their order in the file), their
// sum, their busy time with overlaps counted once, the span and the period to the next replay; the medians after the
// skipped warm-up replays; kernels outside any graph ignored; --by-op's sums by kernel name; too few replays refused;
// --top's kernels by time; --eager's window over a trace without graph replays (the torch peer's names sorted too).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../support/shell.h"

namespace fs = std::filesystem;

namespace {

using Out = tb::testing_support::ShellResult;

class KernelBusy : public testing::Test {
 protected:
  fs::path csv = fs::temp_directory_path() / ("tb_kernel_busy_" + std::to_string(::getpid()) + ".csv");
  void TearDown() override { fs::remove(csv); }
  Out run(const std::string& body, const std::string& args = "") {
    std::ofstream(csv) << "kind,start_ns,end_ns,correlation,name\n" << body;
    return tb::testing_support::run_shell("python3 bench/kernel_busy.py " + csv.string() + " " + args + " 2>&1");
  }
};

// One CSV line (name: the fifth column, as written: quoted or not).
std::string line(const char* kind, long long start, long long end, long long corr, const std::string& name = "") {
  return std::string(kind) + "," + std::to_string(start) + "," + std::to_string(end) + "," + std::to_string(corr) +
         (name.empty() ? "" : "," + name) + "\n";
}

// Replay r (correlation 10 + r) starts at r * 10 ms: kernels [0, 4) and [3, b) ms, written out of order after its
// launch; b = 8 by default (overlapping: sum 9, busy 8, span 8: span / sum - 1 = -11.11%), period 10 ms: period / sum -
// 1 = +11.11%. ends[r] replaces b.
std::string replays(int n, std::vector<long long> ends = {}) {
  std::string s;
  for (int r = 0; r < n; ++r) {
    const long long t = r * 10'000'000LL, c = 10 + r, b = r < int(ends.size()) ? ends[std::size_t(r)] : 8;
    s += line("kernel", t + 3'000'000, t + b * 1'000'000, c) + line("graph_launch", t - 50'000, t - 40'000, c) +
         line("kernel", t, t + 4'000'000, c);
  }
  return s + line("kernel", 1, 2, 999);  // an eager kernel: no graph launch of its correlation
}

TEST_F(KernelBusy, SumsBusyTimeSpanAndPeriodPerReplay) {
  const Out o = run(replays(5));
  ASSERT_EQ(o.rc, 0) << o.out;
  const std::string row2 = "     2        2     9.00     8.00     8.00      10.00     -0.1111       +0.1111";
  EXPECT_NE(o.out.find(row2), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("median of replays 2..3: kernels 9.00 ms (busy 8.00), span 8.00, period 10.00; per replay, "
                       "median span / kernel sum - 1 = -11.11%, period / kernel sum - 1 = +11.11%"),
            std::string::npos)
      << o.out;
}

TEST_F(KernelBusy, SkipsTheWarmUpReplaysItIsTold) {
  const Out o = run(replays(5), "--skip 0");
  ASSERT_EQ(o.rc, 0) << o.out;
  EXPECT_NE(o.out.find("median of replays 0..3:"), std::string::npos) << o.out;
}

// Sums 9, 5, 5, 9, 9 ms (b = 8, 4, 4, 8, 8), every period 10 ms: per replay +11.1%, +100%, +100%, +11.1% (the last has
// no period), median +55.56%; the ratio of the medians (10 / 7) would say +42.86%.
TEST_F(KernelBusy, RatiosArePerReplayThenTheirMedian) {
  const Out o = run(replays(5, {8, 4, 4, 8, 8}), "--skip 0");
  ASSERT_EQ(o.rc, 0) << o.out;
  EXPECT_NE(o.out.find("period / kernel sum - 1 = +55.56%"), std::string::npos) << o.out;
}

// --by-op: per replay a GEMM of 4 ms, AdamW's update of 2 and the gradient norm's partials of 1 (its name holds
// "norm": the optimizer's pattern comes first), a cuDNN attention kernel of 1 and an unknown kernel of 2 (with a comma
// in its quoted name): medians 4, 3, 1 and 2 ms of 10.
TEST_F(KernelBusy, ByOpSumsEachReplaysKernelsByTheirNames) {
  std::string s;
  for (int r = 0; r < 4; ++r) {
    const long long t = r * 20'000'000LL, c = 10 + r, ms = 1'000'000;
    s += line("graph_launch", t - 1000, t, c) + line("kernel", t, t + 4 * ms, c, "nvjet_tst_128x256") +
         line("kernel", t + 4 * ms, t + 6 * ms, c, "_ZN2tb3ops12adamw_kernelIffEEvPKNS") +
         line("kernel", t + 6 * ms, t + 7 * ms, c, "_ZN2tb3ops20norm_partials_kernelIfEEv") +
         line("kernel", t + 7 * ms, t + 8 * ms, c, "cudnn_generated_sdpa_bprop") +
         line("kernel", t + 8 * ms, t + 10 * ms, c, "\"mystery<int, 2>\"");
  }
  const Out o = run(s, "--skip 0 --by-op");
  ASSERT_EQ(o.rc, 0) << o.out;
  for (const char* want :
       {"  grad norm + AdamW              3.00 ms   30.0%", "  attention                      1.00 ms   10.0%",
        "  gemm                           4.00 ms   40.0%", "  other                          2.00 ms   20.0%"})
    EXPECT_NE(o.out.find(want), std::string::npos) << want << "\n" << o.out;
}

// --top 2: the kernels with the most time per replay, with their calls per replay, largest first.
TEST_F(KernelBusy, TopListsTheKernelsWithTheMostTime) {
  const Out o = run(replays(4), "--skip 0 --top 1");
  ASSERT_EQ(o.rc, 0) << o.out;
  // both kernels of a replay have no name: one entry, 9 ms and 2 calls per replay
  EXPECT_NE(o.out.find("top 1 kernels (ms per step, calls per step):\n      9.00     2.0  \n"), std::string::npos)
      << o.out;
}

// An eager trace (no graph launches), steps of 10 ms: step 0 is a 9 ms GEMM (outside a 2-step window), steps 1 and 2
// each torch's fused AdamW 2 ms, its clipping multiply 1 ms, a Triton silu 1 ms and a GEMM 4 ms, with a 2 ms gap. The
// window is the last 2 x 10 ms before the last kernel's end: per step 8 ms of kernels, busy 80%.
TEST_F(KernelBusy, EagerReadsTheLastStepsOfATraceWithoutReplays) {
  const long long ms = 1'000'000;
  std::string s = line("kernel", 0, 9 * ms, 1, "nvjet_sm90_tst_256x128");
  for (int r = 1; r <= 2; ++r) {
    const long long t = r * 10 * ms + 2 * ms;  // the last step ends at 30 ms
    s += line("kernel", t, t + 4 * ms, 2, "nvjet_sm90_tst_256x128") +
         line("kernel", t + 4 * ms, t + 6 * ms, 3, "_ZN2at6native19fused_adamw_impl_cu_multi_tensor_apply_kernel") +
         line("kernel", t + 6 * ms, t + 7 * ms, 4, "_ZN2at6native30ForeachBinaryOpScalarTensor_cu") +
         line("kernel", t + 7 * ms, t + 8 * ms, 5, "triton_poi_fused_mul_silu_silu_backward_3");
  }
  const Out o = run(s, "--eager 2 --step-ms 10 --top 1");
  ASSERT_EQ(o.rc, 0) << o.out;
  for (const char* want : {"last 2 steps of 10.00 ms: 4 kernels per step, kernel sum 8.00 ms per step, busy 80.0%",
                           "  grad norm + AdamW              3.00 ms   37.5%",
                           "  activation                     1.00 ms   12.5%",
                           "  gemm                           4.00 ms   50.0%",
                           "      4.00     1.0  nvjet_sm90_tst_256x128"})
    EXPECT_NE(o.out.find(want), std::string::npos) << want << "\n" << o.out;
}

TEST_F(KernelBusy, EagerNeedsTheStepTime) {
  const Out o = run(line("kernel", 0, 10, 1, "nvjet"), "--eager 2");
  EXPECT_NE(o.rc, 0) << o.out;
  EXPECT_NE(o.out.find("--eager needs --step-ms"), std::string::npos) << o.out;
}

TEST_F(KernelBusy, ReadsAGzippedTrace) {
  std::ofstream(csv) << "kind,start_ns,end_ns,correlation,name\n" << replays(5);
  const fs::path gz = csv.string() + ".gz";
  const Out o = tb::testing_support::run_shell("gzip -c " + csv.string() + " > " + gz.string() +
                                               " && python3 bench/kernel_busy.py " + gz.string() + " 2>&1");
  fs::remove(gz);
  ASSERT_EQ(o.rc, 0) << o.out;
  EXPECT_NE(o.out.find("median of replays 2..3: kernels 9.00 ms"), std::string::npos) << o.out;
}

TEST_F(KernelBusy, RefusesTooFewReplays) {
  const Out o = run(replays(3));
  EXPECT_NE(o.rc, 0) << o.out;
  EXPECT_NE(o.out.find("3 graph replays with kernels"), std::string::npos) << o.out;
}

}  // namespace
