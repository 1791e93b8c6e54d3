// Tests cli/: the command table, help, "did you mean" for commands and flags, exit codes, info --json,
// and the one-line "needs a GPU" where there is none.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <fstream>
#include <string>
#include <vector>

#include "bench/sysinfo.h"
#include "../support/cli_run.h"
#include "cli/commands.h"
#include "model/config.h"
#include "model/param_layout.h"

namespace {
tb::testing_support::CliResult run(std::vector<std::string> args) { return tb::testing_support::run_cli(std::move(args)); }
}  // namespace

TEST(Cli, HelpAndVersion) {
  auto r = run({"--help"});
  EXPECT_EQ(r.rc, 0);
  for (const auto& c : tb::cli::commands()) EXPECT_NE(r.out.find(std::string(c.name)), std::string::npos) << c.name;
  EXPECT_EQ(run({}).rc, 2);  // no command is a usage error, with the help shown
  r = run({"--version"});
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("trainbench"), std::string::npos);
}

// Every command's --help: option lines show the type and default only ("--steps INT=10"), never CLI11's validator
// text ("INT:INT >= 1=10", "TEXT:{cuda,cpu}=cuda") or a flag's default ("{false}").
TEST(Cli, HelpHasNoParserArtifacts) {
  std::vector<std::vector<std::string>> helps;
  for (const auto& c : tb::cli::commands()) {
    const std::string name(c.name);
    if (name == "slurm") {
      for (const char* sub : {"run", "sweep", "scale", "check", "status", "collect"})
        helps.push_back({name, sub, "--help"});
    } else if (name == "k8s") {
      helps.push_back({name, "render", "--help"});
    } else {
      helps.push_back({name, "--help"});
    }
  }
  for (const auto& args : helps) {
    const auto r = run(args);
    EXPECT_EQ(r.rc, 0) << args[0] << " " << r.err;
    for (const char* bad : {"INT:", "UINT:", "FLOAT:", "TEXT:", "NUMBER:", "{false}", "{true}", "=false", "=true"})
      EXPECT_EQ(r.out.find(bad), std::string::npos) << args[0] << " " << args[1] << " --help shows '" << bad << "':\n"
                                                    << r.out;
  }
}

TEST(Cli, UnknownCommandSuggestsTheNearest) {
  auto r = run({"chek"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("unknown command 'chek' (did you mean 'check'?)"), std::string::npos) << r.err;
  r = run({"zzzzzz"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err.find("did you mean"), std::string::npos) << r.err;
}

TEST(Cli, UnknownFlagSuggestsTheNearest) {
  auto r = run({"micro", "gemm", "--dtpe", "bf16"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("unknown option '--dtpe' (did you mean '--dtype'?)"), std::string::npos) << r.err;
  r = run({"check", "--gpu", "2"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("did you mean '--gpus'"), std::string::npos) << r.err;
}

TEST(Cli, BadValuesAreUsageErrors) {
  EXPECT_EQ(run({"micro", "gemmm"}).rc, 2);                      // unknown suite
  EXPECT_EQ(run({"micro", "nccl", "--op", "median"}).rc, 2);     // unknown reduction
  EXPECT_EQ(run({"micro", "gemm", "--gpus", "0"}).rc, 2);        // not a positive count
  EXPECT_EQ(run({"micro", "gemm", "--iters", "-3"}).rc, 2);
  EXPECT_EQ(run({"micro", "membw", "--sizes", "12Q"}).rc, 2);    // bad unit (or no GPU): 2 either way
}

TEST(Cli, ListNamesEverySuite) {
  auto r = run({"list"});
  EXPECT_EQ(r.rc, 0);
  for (const char* s : {"gemm", "membw", "nccl", "links"}) EXPECT_NE(r.out.find(s), std::string::npos) << s;
}

TEST(Cli, InfoJsonIsOneObjectWithTheGpus) {
  auto r = run({"info", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j.contains("host"));
  EXPECT_TRUE(j.contains("versions"));
  ASSERT_TRUE(j["system"]["gpus"].is_array());
  EXPECT_EQ(int(j["system"]["gpus"].size()), tb::bench::visible_gpu_count());
  EXPECT_TRUE(j["build"].contains("git"));
}

TEST(Cli, CommandsNeedingAGpuSaySoInOneLine) {
  if (tb::bench::visible_gpu_count() > 0) GTEST_SKIP() << "a GPU is visible";
  for (std::vector<std::string> args : {std::vector<std::string>{"check"}, {"micro", "gemm"}, {"micro", "nccl"}}) {
    auto r = run(args);
    EXPECT_EQ(r.rc, 2) << args[0];
    EXPECT_NE(r.err.find("needs a GPU: "), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

TEST(Cli, TrainTinyOnTheCpuWritesARecord) {
  const auto dir = std::filesystem::temp_directory_path() / "tb_cli_train";
  std::filesystem::remove_all(dir);
  auto r = run({"train", "--model", "tiny", "--device", "cpu", "--steps", "4", "--warmup-steps", "1", "--seq", "16",
                "--micro-batch", "2", "--global-batch", "4", "--out", dir.string()});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("step 4/4 | loss "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("over 3 steps (2 micro-batches each: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" | GFLOP/s "), std::string::npos) << r.out;  // a CPU's rate, not "TFLOP/s/GPU 0.0"
  EXPECT_EQ(r.out.find("TFLOP/s"), std::string::npos) << r.out;
  // One "train.step" record per step as it finishes (a killed run keeps them), then the "train" record.
  std::ifstream in(dir / "results.jsonl");
  std::vector<nlohmann::json> recs;
  for (std::string line; std::getline(in, line);) recs.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(recs.size(), 6u);  // 4 steps, the train record, rank_steps
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(recs[i]["bench"], "train.step");
    EXPECT_EQ(recs[i]["step"], i + 1);
    EXPECT_EQ(recs[i]["measured"], i > 0);
  }
  const auto& j = recs[4];
  EXPECT_EQ(j["bench"], "train");
  EXPECT_EQ(j["status"], "ok");
  EXPECT_EQ(j["global_batch"], 4);
  EXPECT_EQ(j["loss"].size(), 4u);
  EXPECT_EQ(j["step_ms"]["n"], 3);  // 4 steps, 1 not measured
  EXPECT_EQ(j["flop_convention"], "full");
  EXPECT_TRUE(std::filesystem::exists(dir / "run.json"));
  std::filesystem::remove_all(dir);
}

// LoRA fine-tuning on the CPU: the header line says so, the record carries the adapters' settings, the trainable and
// frozen counts (the adapters; the base model) and the FLOPs of the DGXC fine-tuning convention (2/3 of full
// training's).
TEST(Cli, TrainLoraRecordsItsCountsAndFlopTask) {
  const auto dir = std::filesystem::temp_directory_path() / "tb_cli_train_lora";
  std::filesystem::remove_all(dir);
  const std::vector<std::string> base = {"train", "--model", "tiny", "--device", "cpu", "--steps", "3",
                                         "--warmup-steps", "1", "--seq", "16"};
  auto with = [&](std::vector<std::string> extra, const std::filesystem::path& out) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    a.insert(a.end(), {"--out", out.string()});
    return run(a);
  };
  auto r = with({"--lora-rank", "8", "--lora-alpha", "16", "--lora-dropout", "0.1", "--lora-targets", "mlperf"},
                dir / "lora");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("LoRA r 8 alpha 16 dropout 0.1 on mlperf"), std::string::npos) << r.out;
  ASSERT_EQ(with({}, dir / "full").rc, 0);
  auto train_record = [](const std::filesystem::path& d) {
    std::ifstream in(d / "results.jsonl");
    for (std::string line; std::getline(in, line);)
      if (auto j = nlohmann::json::parse(line); j["bench"] == "train") return j;
    return nlohmann::json();
  };
  const auto lora = train_record(dir / "lora"), full = train_record(dir / "full");
  tb::model::ModelConfig m = tb::model::preset("tiny");
  m.seq = 16;
  m.lora = {.rank = 8, .alpha = 16, .dropout = 0.1, .targets = tb::model::kLoraMlperf};
  EXPECT_EQ(lora["params_trainable"], tb::model::trainable_param_count(m));
  EXPECT_EQ(lora["params_frozen"], tb::model::param_count(m));
  EXPECT_EQ(full["params_frozen"], 0);
  EXPECT_EQ(full["params_trainable"], full["params"]);
  EXPECT_EQ(lora["lora"]["targets"], "mlperf");
  EXPECT_EQ(lora["lora"]["rank"], 8);
  EXPECT_EQ(lora["flop_task"], "lora");
  EXPECT_EQ(full["flop_task"], "pretrain");
  EXPECT_NEAR(lora["flops_per_step"].get<double>(), full["flops_per_step"].get<double>() * 2 / 3,
              1e-9 * full["flops_per_step"].get<double>());
  std::filesystem::remove_all(dir);
}

TEST(Cli, TrainSetChangesTheShapeAndNamesIt) {
  const auto dir = std::filesystem::temp_directory_path() / "tb_cli_train_set";
  std::filesystem::remove_all(dir);
  auto r = run({"train", "--model", "tiny", "--device", "cpu", "--steps", "2", "--warmup-steps", "1", "--set",
                "d_model=32", "--set", "act=gelu", "--out", dir.string()});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("train tiny[d_model=32,act=gelu] on cpu: 2 layers, d_model 32,"), std::string::npos) << r.out;
  std::ifstream in(dir / "results.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(in, line));  // the first step's record
  EXPECT_EQ(nlohmann::json::parse(line)["case"], "tiny[d_model=32,act=gelu]/L2/s64/mb1/gb1/cpu");
  std::filesystem::remove_all(dir);
  r = run({"train", "--model", "tiny", "--device", "cpu", "--set", "dmodel=32"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("did you mean 'd_model'?"), std::string::npos) << r.err;
  r = run({"train", "--model", "small", "--device", "cuda", "--set", "head_dim=100"});  // refused on the host, GPU or not
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("head_dim 100 is not a multiple of 8"), std::string::npos) << r.err;
}

TEST(Cli, TrainRejectsBadConfigurationsBeforeWork) {
  auto r = run({"train", "--model", "tiny", "--device", "cpu", "--micro-batch", "3", "--global-batch", "4"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("multiple of --micro-batch"), std::string::npos) << r.err;
  r = run({"train", "--model", "tiny", "--device", "cpu", "--steps", "2", "--warmup-steps", "2"});
  EXPECT_EQ(r.rc, 2);
  r = run({"train", "--model", "llama3.1-8"});
  EXPECT_EQ(r.rc, 2);
  r = run({"train", "--model", "tiny", "--device", "cpu", "--data", "/no/such/tokens.bin"});
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("/no/such/tokens.bin"), std::string::npos) << r.err;
  r = run({"train", "--model", "small-hd128", "--device", "cuda", "--fp8-attention"});  // needs --precision fp8
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--fp8-attention needs --precision fp8"), std::string::npos) << r.err;
  for (const char* cmd : {"train", "run"}) {  // the FP8 formats are hybrid and e4m3 only
    r = run({cmd, "--precision", "fp8", "--fp8-format", "e5m2"});
    EXPECT_EQ(r.rc, 2) << cmd;
    EXPECT_NE(r.err.find("--fp8-format"), std::string::npos) << cmd << ": " << r.err;
  }
}

TEST(Cli, TrainNamesEveryLayoutProblemBeforeStartingRanks) {
  // tiny: 4 heads, 2 kv-heads, 2 layers, seq 64, vocab 256: tp 4 and pp 4 fail, and the ranks do not multiply out.
  auto r = run({"train", "--model", "tiny", "--device", "cpu", "--tp", "4", "--pp", "4", "--cp", "2"});
  EXPECT_EQ(r.rc, 2);
  for (const char* problem : {"parallel layout dp1 cp2 pp4 tp4 vp1 sp does not fit tiny on 1 rank",
                              "= 32 ranks, but the job has 1", "kv_heads (2) is not divisible by tp (4)",
                              "layers (2) is not divisible by pp·vp (4)"})
    EXPECT_NE(r.err.find(problem), std::string::npos) << problem << "\n" << r.err;
  // The interleaved schedule on GPUs: layers must divide by pp·vp and the micro-batches by pp (here 3 of 1 sequence).
  r = run({"train", "--model", "small", "--gpus", "2", "--pp", "2", "--vp", "2", "--layers", "6", "--global-batch",
           "3"});
  EXPECT_EQ(r.rc, 2);
  for (const char* problem : {"layers (6) is not divisible by pp·vp (4)",
                              "micro-batch count per step (3) to be a multiple of pp (2)"})
    EXPECT_NE(r.err.find(problem), std::string::npos) << problem << "\n" << r.err;
  r = run({"train", "--model", "tiny", "--device", "cpu", "--gpus", "2"});  // CPU ranks come from mpirun
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("mpirun -np N trainbench train --device cpu"), std::string::npos) << r.err;
  r = run({"train", "--model", "tiny", "--device", "cpu", "--graph", "sometimes"});
  EXPECT_EQ(r.rc, 2);
}

TEST(Cli, RunTinyOnTheCpuThenCompare) {
  const auto dir = std::filesystem::temp_directory_path() / "tb_cli_run";
  std::filesystem::remove_all(dir);
  auto r = run({"run", "tiny", "--device", "cpu", "--steps", "3", "--warmup-steps", "1", "--out", dir.string()});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("ours, CPU"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CPU measured"), std::string::npos) << r.out;
  std::ifstream in(dir / "results.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["bench"], "run");
  EXPECT_EQ(j["status"], "ok");
  EXPECT_GT(j["extrapolated"]["tokens_per_s_per_gpu"].get<double>(), 0);
  EXPECT_EQ(j["comparison"]["reference_gpu"], "CPU");
  // compare: exit 0 unless a verdict is below; a reference far above ours makes it below (exit 1).
  auto c = run({"compare", dir.string()});
  EXPECT_TRUE(c.rc == 0 || c.rc == 1) << c.err;
  const auto refs = std::filesystem::temp_directory_path() / "tb_cli_refs";
  std::filesystem::create_directories(refs);
  std::ofstream(refs / "fast.toml") << "schema = 1\nsummary = \"x\"\nsource = \"test\"\n[[group]]\nrecipe = \"tiny\"\n"
                                       "gpu = \"CPU\"\nrelease = \"t\"\nsource = \"test\"\n"
                                       "rows = [ { gpus = 1, precision = \"fp32\", tokens_per_s = 1e12 } ]\n";
  c = run({"compare", dir.string(), "--references", refs.string()});
  EXPECT_EQ(c.rc, 1) << c.out << c.err;
  EXPECT_NE(c.out.find("below"), std::string::npos) << c.out;
  c = run({"compare", "/no/such/results"});
  EXPECT_EQ(c.rc, 2);
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(refs);
}

TEST(Cli, RunRefusesBeforeWork) {
  auto r = run({"run", "nemotronh-56b", "--device", "cpu"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("needs mamba"), std::string::npos) << r.err;
  r = run({"run", "grok1-314b", "--device", "cpu"});  // runnable, but its reference runs are bf16 and fp8
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("no fp32 runs"), std::string::npos) << r.err;
  r = run({"run", "tiny", "--device", "cpu", "--set", "layer=3"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("did you mean 'layers'"), std::string::npos) << r.err;
  r = run({"run", "lama3.1-8b", "--device", "cpu"});
  EXPECT_EQ(r.rc, 2);
}

// An injected straggler: three launcher ranks of one run id (as mpirun or srun would set them), rank 1 delayed by
// --debug-delay-rank; each writes its rank_steps record and `report` names rank 1 as the slowest.
TEST(Cli, ReportNamesTheInjectedSlowRank) {
  const auto dir = std::filesystem::temp_directory_path() / "tb_cli_straggler";
  std::filesystem::remove_all(dir);
  setenv("TRAINBENCH_RUN_ID", "straggler-test", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
  for (int rank = 0; rank < 3; ++rank) {
    setenv("OMPI_COMM_WORLD_RANK", std::to_string(rank).c_str(), 1);
    const auto r = run({"train", "--model", "tiny", "--device", "cpu", "--steps", "6", "--warmup-steps", "1", "--seq",
                        "16", "--debug-delay-rank", "1:40", "--out", dir.string()});
    ASSERT_EQ(r.rc, 0) << r.err;
  }
  unsetenv("TRAINBENCH_RUN_ID");
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("OMPI_COMM_WORLD_RANK");
  const auto md = dir / "report.md";
  const auto r = run({"report", dir.string(), "--format", "md", "-o", md.string()});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::ifstream in(md);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("slowest rank 1 "), std::string::npos) << text;
  std::filesystem::remove_all(dir);
}
