// Tests the README walked through as a new user without a GPU would: an unknown recipe is named as such before the
// GPU is looked for, `train` of a CPU-only preset without --device says it needs a GPU (or --device cpu), `project`
// without --from names the shipped measurements by an absolute path, `compare` reads a folder of result folders,
// `--version` names the libraries it loaded, and the CPU smoke baseline's tolerance keeps its verdict steady.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "../support/cli_run.h"
#include "bench/sysinfo.h"
#include "recipe/reference.h"
#include "recipe/system.h"
#include "report/compare.h"

namespace {
namespace fs = std::filesystem;
tb::testing_support::CliResult run(std::vector<std::string> args) { return tb::testing_support::run_cli(std::move(args)); }
}  // namespace

TEST(Walkthrough, UnknownRecipeIsNamedFirst) {
  for (const char* device : {"cuda", "cpu"}) {
    auto r = run({"run", "nosuch", "--device", device});
    EXPECT_EQ(r.rc, 2) << device;
    EXPECT_NE(r.err.find("unknown recipe 'nosuch'"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("needs a GPU"), std::string::npos) << r.err;
  }
}

TEST(Walkthrough, TrainOfACpuPresetWithoutAGpuSaysSo) {
  if (tb::bench::visible_gpu_count() > 0) GTEST_SKIP() << "a GPU is visible";
  auto r = run({"train", "--model", "tiny"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("needs a GPU: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--device cpu"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("multiple of 128"), std::string::npos) << r.err;
}

TEST(Walkthrough, ProjectWithoutFromNamesTheShippedMeasurementsAbsolutely) {
  auto r = run({"project", "llama3.1-70b", "--gpus", "1024"});
  EXPECT_EQ(r.rc, 2);
  const std::string key = "--from ";
  const auto at = r.err.rfind(key);
  ASSERT_NE(at, std::string::npos) << r.err;
  const std::string dir = r.err.substr(at + key.size(), r.err.find('\n', at) - at - key.size());
  EXPECT_TRUE(fs::path(dir).is_absolute()) << dir;
  EXPECT_TRUE(fs::is_directory(dir)) << dir;
  EXPECT_EQ(fs::path(dir).filename(), "h200-recipes");
  r = run({"project", "llama3.1-70b", "--gpus", "1024", "--from", dir});
  EXPECT_EQ(r.rc, 0) << r.err;
}

TEST(Walkthrough, CompareReadsSubfolders) {
  const fs::path measured = tb::recipe::find_references_dir(std::nullopt) / "measured";
  auto r = run({"compare", measured.string()});  // h200-recipes/, h200-fp8/, ... below it
  EXPECT_EQ(r.rc, 0) << r.err;
  for (const char* recipe : {"llama3.1-8b", "llama3.1-405b", "nemotron4-340b", "gpt3-175b"})
    EXPECT_NE(r.out.find(recipe), std::string::npos) << recipe << "\n" << r.out;
  r = run({"compare", (measured / "nosuch").string()});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err.find("compare: compare:"), std::string::npos) << r.err;  // one prefix, not two
}

TEST(Walkthrough, VersionNamesTheLibrariesLoaded) {
  auto r = run({"--version"});
  EXPECT_EQ(r.rc, 0);
  for (const char* lib : {"CUDA runtime", "CUDA driver", "cuBLASLt", "cuDNN", "NCCL", "NVML"})
    EXPECT_NE(r.out.find(lib), std::string::npos) << lib << "\n" << r.out;
  if (tb::bench::visible_gpu_count() == 0) {
    EXPECT_NE(r.out.find("none: "), std::string::npos) << r.out;
  }
}

TEST(Walkthrough, TheCpuBaselineHasAWideTolerance) {
  EXPECT_EQ(tb::report::ref_verdict_for(0.5, 0.75), tb::report::RefVerdict::meets);
  EXPECT_EQ(tb::report::ref_verdict_for(0.2, 0.75), tb::report::RefVerdict::below);
  EXPECT_EQ(tb::report::ref_verdict_for(0.94), tb::report::RefVerdict::below);  // GPU references keep ±5%
  const auto rows = tb::recipe::load_reference_dir(tb::recipe::find_references_dir(std::nullopt));
  const auto* cpu = tb::recipe::find_reference(rows, {"tiny", 1, "fp32", "CPU"});
  ASSERT_NE(cpu, nullptr);
  EXPECT_DOUBLE_EQ(cpu->tolerance, 0.75);
  const auto* gpu = tb::recipe::find_reference(rows, {"llama3.1-8b", 8, "bf16", "H100"});
  ASSERT_NE(gpu, nullptr);
  EXPECT_DOUBLE_EQ(gpu->tolerance, 0.05);
}
