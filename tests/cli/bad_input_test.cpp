// Bad input through the command line, one clear message and the README's exit codes: results files cut by a crash
// (read, with a warning), not records or of the wrong types (file:line, exit 2, never "internal error"); output
// paths that cannot be right (`--out /`, `--out ""`, `report -o <folder>`) refused before any work; arguments that
// are not UTF-8; a symlink loop in the recipes folder; integers out of range in the user's terms; two runs into one
// --out keeping both runs' provenance; `train` without --device where no GPU is.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "../support/cli_run.h"
#include "bench/sysinfo.h"

namespace {
namespace fs = std::filesystem;
using tb::testing_support::run_cli;

fs::path fresh_dir(const std::string& name) {
  const auto d = fs::temp_directory_path() / ("tb_badin_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void spill(const fs::path& f, const std::string& text) { std::ofstream(f, std::ios::binary) << text; }

void expect_clean_usage_error(const tb::testing_support::CliResult& r, const std::string& want) {
  EXPECT_EQ(r.rc, 2) << r.out << r.err;
  EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("json.exception"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(want), std::string::npos) << "want '" << want << "' in:\n" << r.err;
}

const char* kRun =
    R"({"schema":"trainbench.result.v1","run":"r1","bench":"run","case":"tiny","world":1,"status":"ok",)"
    R"("recipe":"tiny","precision":"fp32","backend":"cpu","extrapolated":{"tokens_per_s_per_gpu":1000.0,"step_s":0.1},)"
    R"("tflops_per_gpu":0.001,"mfu":0.0,"layout":{"gpus":1,"tp":1,"pp":1,"cp":1,"micro_batch":2,"global_batch":4,)"
    R"("layers":2,"seq":64}})";

TEST(BadInput, CompareAndReportReadAFileCutByACrash) {
  const auto dir = fresh_dir("cut");
  spill(dir / "results.jsonl", std::string(kRun) + "\n" + R"({"schema":"trainbench.result.v1","run":"r1","be)");
  auto r = run_cli({"compare", dir.string()});
  EXPECT_TRUE(r.rc == 0 || r.rc == 1) << r.err;
  EXPECT_NE(r.err.find("incomplete"), std::string::npos) << r.err;
  r = run_cli({"report", dir.string(), "--format", "md", "-o", (dir / "r.md").string()});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("incomplete"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

TEST(BadInput, WrongRecordsAreFileLineAndExit2) {
  const auto dir = fresh_dir("wrong");
  const auto f = dir / "results.jsonl";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[1]", ":2: not a JSON object"},
      {R"({"schema":"x","run":"r","bench":"run","case":"c","world":1,"status":"ok"})", ":2: not a trainbench"},
      {R"({"schema":"trainbench.result.v1","run":"r","bench":"run","case":"c","world":1,"status":"ok","extrapolated":{"step_s":"slow"}})",
       ":2: "},
      {"{not json}", ":2: not JSON"},
  };
  for (const auto& [line, want] : cases)
    for (const char* cmd : {"compare", "report"}) {
      spill(f, std::string(kRun) + "\n" + line + "\n" + kRun + "\n");
      std::vector<std::string> args{cmd, dir.string()};
      if (std::string(cmd) == "report") args.insert(args.end(), {"--format", "md", "-o", (dir / "r.md").string()});
      expect_clean_usage_error(run_cli(args), f.string() + want);
    }
  spill(f, std::string(kRun) + "\n");
  spill(dir / "run.json", R"({"schema":"trainbench.run.v1","run":"r1","argv":[1,2]})");
  expect_clean_usage_error(run_cli({"report", dir.string(), "--format", "md", "-o", (dir / "r.md").string()}),
                           "'argv'");
  fs::remove_all(dir);
}

TEST(BadInput, OutputPathsAreRefusedBeforeWork) {
  const auto dir = fresh_dir("out");
  const std::vector<std::string> train = {"train", "--model", "tiny", "--device", "cpu", "--steps", "2",
                                          "--warmup-steps", "1"};
  auto with = [&](std::vector<std::string> a, std::vector<std::string> more) {
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  expect_clean_usage_error(run_cli(with(train, {"--out", "/"})), "root folder");
  expect_clean_usage_error(run_cli(with(train, {"--out", ""})), "empty");
  spill(dir / "afile", "x");
  expect_clean_usage_error(run_cli(with(train, {"--out", (dir / "afile").string()})), "not a folder");
  spill(dir / "results.jsonl", std::string(kRun) + "\n");
  fs::create_directories(dir / "adir");
  expect_clean_usage_error(run_cli({"report", dir.string(), "--format", "md", "-o", (dir / "adir").string()}),
                           "is a folder");
  fs::remove_all(dir);
}

TEST(BadInput, TwoRunsIntoOneFolderKeepBothProvenances) {
  const auto dir = fresh_dir("tworuns");
  for (int i = 0; i < 2; ++i) {
    const auto r = run_cli({"train", "--model", "tiny", "--device", "cpu", "--steps", "2", "--warmup-steps", "1",
                            "--out", dir.string()});
    ASSERT_EQ(r.rc, 0) << r.err;
  }
  std::set<std::string> runs_in_files, runs_in_records;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json") {
      std::ifstream in(e.path());
      runs_in_files.insert(nlohmann::json::parse(in)["run"].get<std::string>());
    }
  std::ifstream in(dir / "results.jsonl");
  for (std::string line; std::getline(in, line);) runs_in_records.insert(nlohmann::json::parse(line)["run"]);
  EXPECT_EQ(runs_in_files.size(), 2u);
  EXPECT_EQ(runs_in_files, runs_in_records);
  fs::remove_all(dir);
}

TEST(BadInput, ArgumentsThatAreNotUtf8) {
  expect_clean_usage_error(run_cli({"train", "--model", "tiny", "--device", "cpu", "--out", "/tmp/tb-\xff\xfe"}),
                           "not UTF-8");
  expect_clean_usage_error(run_cli({"report", "caf\xe9"}), "not UTF-8");
}

TEST(BadInput, ASymlinkLoopInTheRecipesFolder) {
  const auto dir = fresh_dir("loop");
  fs::copy("recipes/tiny.toml", dir / "tiny.toml");
  fs::create_symlink("loop.toml", dir / "loop.toml");
  const auto r = run_cli({"k8s", "render", "tiny", "--nodes", "1", "--device", "cpu", "--image", "i", "--recipes",
                          dir.string()});
  expect_clean_usage_error(r, "loop.toml");
  fs::remove_all(dir);
}

TEST(BadInput, IntegersOutOfRangeInTheUsersTerms) {
  auto r = run_cli({"project", "llama3.1-8b", "--gpus", "134217728"});
  expect_clean_usage_error(r, "--gpus");
  EXPECT_EQ(r.err.find("-"), r.err.find("--gpus")) << r.err;  // no negative batch anywhere
  r = run_cli({"train", "--model", "tiny", "--device", "cpu", "--seq", "0"});
  expect_clean_usage_error(r, "0 is less than 1");
  EXPECT_EQ(r.err.find("1797"), std::string::npos) << r.err;
  r = run_cli({"train", "--model", "tiny", "--device", "cpu", "--layers", "x"});
  expect_clean_usage_error(r, "not a whole number");
  r = run_cli({"train", "--model", "tiny", "--device", "cpu", "--steps", "0"});
  expect_clean_usage_error(r, "--steps");
}

// LoRA's options: a rank <= 0 or above min(in, out) of a target, an unknown target (the nearest named), its flags
// without a rank, --freeze-base alone: one message each, exit 2, before any step.
TEST(BadInput, LoraOptions) {
  const std::vector<std::string> train = {"train",   "--model", "tiny",           "--device",
                                          "cpu",     "--steps", "2",              "--warmup-steps", "1"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = train;
    a.insert(a.end(), extra.begin(), extra.end());
    return run_cli(a);
  };
  expect_clean_usage_error(with({"--lora-rank", "0"}), "--lora-rank 0: a LoRA rank must be at least 1");
  expect_clean_usage_error(with({"--lora-rank", "-3"}), "--lora-rank -3: a LoRA rank must be at least 1");
  expect_clean_usage_error(with({"--lora-rank", "33", "--lora-targets", "canonical"}),
                           "LoRA rank 33 is above min(in, out) = 32 of target k");
  expect_clean_usage_error(with({"--lora-rank", "4", "--lora-targets", "q,gat"}), "did you mean 'gate'");
  expect_clean_usage_error(with({"--lora-rank", "4", "--lora-targets", "qkv,q"}), "name either");
  expect_clean_usage_error(with({"--lora-rank", "4", "--lora-dropout", "1"}), "dropout 1 must be in [0, 1)");
  expect_clean_usage_error(with({"--lora-alpha", "16"}), "add --lora-rank R");
  expect_clean_usage_error(with({"--freeze-base"}), "leave nothing to train");
}

TEST(BadInput, TrainWithoutDeviceOnAMachineWithoutAGpu) {
  if (tb::bench::visible_gpu_count() > 0) GTEST_SKIP() << "a GPU is visible";
  const auto r = run_cli({"train"});
  expect_clean_usage_error(r, "needs a GPU");
  EXPECT_NE(r.err.find("--device cpu"), std::string::npos) << r.err;
}

}  // namespace

// A typo in a sweep's values is refused before any point runs (not listed as a point to skip); a --data file that
// does not exist is a usage error; a library's own prefix ("k8s: ...") is not said twice after the command's.
TEST(BadInput, SweepValuesDataFilesAndOnePrefix) {
  expect_clean_usage_error(run_cli({"sweep", "tiny", "--device", "cpu", "--vary", "micro_batch=1,x", "--dry-run"}),
                           "micro_batch=x: micro_batch takes a positive integer");
  expect_clean_usage_error(run_cli({"sweep", "tiny", "--device", "cpu", "--vary", "recompute=some", "--dry-run"}),
                           "recompute=some: recompute takes none, selective or full");
  expect_clean_usage_error(run_cli({"train", "--device", "cpu", "--model", "tiny", "--steps", "3", "--warmup-steps",
                                    "1", "--data", "/nonexistent/tokens.bin"}),
                           "--data '/nonexistent/tokens.bin': no such file");
  const auto r = run_cli({"k8s", "render", "llama3.1-8b", "--nodes", "1", "--image", "x", "--namespace", "Bad_NS"});
  expect_clean_usage_error(r, "trainbench k8s: namespace 'Bad_NS' is not a valid Kubernetes namespace");
}
