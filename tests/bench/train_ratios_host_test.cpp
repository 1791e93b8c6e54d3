// bench/train_ratios.py (trainbench's training runs against the PyTorch peers of the same run) on a crafted folder:
// runs and peers matched by shape, the peer's runs of one state averaged, speed and memory ratios, the other
// configurations also against trainbench's default, the training-engine targets judged only for the default
// configuration at the engine's target shapes, a shape without peers, unmeasured values shown as "-", and no trainbench records
// refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "../support/shell.h"

namespace fs = std::filesystem;

namespace {

using Out = tb::testing_support::ShellResult;

const char* kShape8b = R"("model":"llama3.1-8b","layers":8,"seq":8192,"micro_batch":1,"global_batch":1)";

class TrainRatios : public testing::Test {
 protected:
  fs::path dir = fs::temp_directory_path() / ("tb_ratios_" + std::to_string(::getpid()));
  void SetUp() override { fs::create_directories(dir / "results"); }
  void TearDown() override { fs::remove_all(dir); }
  // A trainbench run NAME with the given shape and fields (after an unrelated first record).
  void run(const std::string& name, const std::string& shape, const std::string& fields) {
    fs::create_directories(dir / "results" / name);
    std::ofstream(dir / "results" / name / "results.jsonl")
        << R"({"bench":"info"})" << "\n"
        << R"({"bench":"train","status":"ok",)" << shape << "," << fields << "}\n";
  }
  void peer(const std::string& shape, const std::string& state, double step_s, double tps, double gib) {
    std::ofstream(dir / "peers.jsonl", std::ios::app)
        << "{" << shape << R"(,"state":")" << state << R"(","step_s":{"median":)" << step_s
        << R"(},"tokens_per_s":)" << tps << R"(,"max_memory_allocated_gib":)" << gib << "}\n";
  }
  Out ratios() { return tb::testing_support::run_shell("python3 bench/train_ratios.py " + dir.string() + " 2>&1"); }
};

const char* kDefault =
    R"("precision":"bf16","moments":"f32","grads":"f32","recompute":"none","master":"split","step_ms":{"median":200},)"
    R"("tokens_per_s":44000,"peak_alloc_gib":45,"energy_j_per_token":0.02,"telemetry":{"sm_clock_mhz_mean":1500})";

// The default run at 44000 tokens/s against bf16 peers at 40000 and 42000 (mean 41000: 1.073, below 1.10) and an fp32
// peer at 36000 with 50 GiB (memory 0.900: met); a selective-recompute run gets ratios but no target.
TEST_F(TrainRatios, RatiosToEachPeerStateAndTheTargets) {
  run("8b-default", kShape8b, kDefault);
  run("8b-selective", kShape8b,
      R"("precision":"bf16","moments":"f32","grads":"f32","recompute":"selective","step_ms":{"median":210},)"
      R"("tokens_per_s":41000,"peak_alloc_gib":44,"energy_j_per_token":0)");
  peer(kShape8b, "bf16", 0.2, 40000, 28);
  peer(kShape8b, "bf16", 0.19, 42000, 28);
  peer(kShape8b, "fp32", 0.22, 36000, 50);
  const Out o = ratios();
  ASSERT_EQ(o.rc, 0) << o.out;
  for (const char* want :
       {"llama3.1-8b L8 seq 8192 micro-batch 1 global batch 1",
        "  8b-default                           200.0      44000     45.00    0.0200    1500",
        "  8b-selective                         210.0      41000     44.00         -       -",
        "  torch bf16 state #2                  190.0      42000     28.00         -       -",
        "  8b-default: vs torch bf16: speed 1.073, memory 1.607 (target speed >= 1.10: not met); vs torch fp32: "
        "speed 1.222, memory 0.900 (target memory <= 1.00: met)",
        "  8b-selective: vs trainbench's default: speed 0.932, memory 0.978; vs torch bf16: speed 1.000, memory 1.571; "
        "vs torch fp32: speed 1.139, memory 0.880\n",
        "training-engine targets: 1 met, 1 not met"})
    EXPECT_NE(o.out.find(want), std::string::npos) << want << "\n" << o.out;
}

// 70B L2 without a peer: its FP8 run (55000 tokens/s, 48 GiB) still gets its ratio to the default (44000, 45 GiB).
TEST_F(TrainRatios, AShapeWithoutPeersGetsTheRatiosToTheDefault) {
  const char* shape70 = R"("model":"llama3.1-70b","layers":2,"seq":8192,"micro_batch":1,"global_batch":1)";
  run("70b", shape70, kDefault);
  run("70b-fp8", shape70, R"("precision":"fp8","moments":"f32","grads":"f32","recompute":"none",)"
                          R"("step_ms":{"median":160},"tokens_per_s":55000,"peak_alloc_gib":48)");
  peer(kShape8b, "bf16", 0.2, 40000, 28);  // another shape
  const Out o = ratios();
  ASSERT_EQ(o.rc, 0) << o.out;
  EXPECT_NE(o.out.find("  (no peer at this shape)"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("  70b-fp8: vs trainbench's default: speed 1.250, memory 1.067\n"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("  70b:"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("targets:"), std::string::npos) << o.out;
}

TEST_F(TrainRatios, RefusesAFolderWithoutTrainbenchRecords) {
  peer(kShape8b, "bf16", 0.2, 40000, 28);
  const Out o = ratios();
  EXPECT_NE(o.rc, 0) << o.out;
  EXPECT_NE(o.out.find("no trainbench train records"), std::string::npos) << o.out;
}

}  // namespace
