// Tests `trainbench run` and `project` on a mixture of experts, on the CPU: a small MoE recipe (the `tiny-moe` preset:
// 4 experts top-2, a shared expert, the first layer dense) at a layout of tp 2 × ep 2 runs as the one-device proxy of a
// rank (ep_proxy 2, token_share 2; recipe/moe_proxy.h) at whole periods of its layer pattern, writes the run record
// (layout with ep and etp, the proxy's differences, the model's total and active parameters, the full model's FLOPs
// per token), and `project` adds the expert all-to-alls for more CPU ranks; a bad expert layout is refused before any
// work.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../support/cli_run.h"
#include "model/config.h"

namespace fs = std::filesystem;

namespace {
tb::testing_support::CliResult run(std::vector<std::string> args) { return tb::testing_support::run_cli(std::move(args)); }

fs::path write_recipe(const fs::path& dir) {
  fs::create_directories(dir);
  std::ofstream(dir / "moe-cpu.toml") << R"(schema = 1
name = "moe-cpu"
summary = "tiny-moe at tp 2 x ep 2 on CPU ranks"
precisions = ["fp32"]
sources = ["test"]

[model]
preset = "tiny-moe"

[[layout]]
tp = 2
ep = 2
etp = 1
gpus = 4
global_batch = 4
)";
  return dir;
}
}  // namespace

TEST(RunMoe, CpuProxyOfAnExpertParallelRankThenProject) {
  const fs::path base = fs::temp_directory_path() / "tb_run_moe";
  fs::remove_all(base);
  const fs::path recipes = write_recipe(base / "recipes"), out = base / "out";
  const auto measure = [&] {
    fs::remove_all(out);
    return run({"run", "moe-cpu", "--device", "cpu", "--recipes", recipes.string(), "--steps", "8", "--warmup-steps",
                "2", "--out", out.string()});
  };
  auto r = measure();
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("proxy: MoE layers: an ep rank's 2 of 4 experts (ep 2)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1/2 of the micro-batch's rows"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("point: 2 layers"), std::string::npos) << r.out;  // the dense first layer and a MoE one
  EXPECT_NE(r.out.find("point: 3 layers"), std::string::npos) << r.out;
  std::ifstream in(out / "results.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["status"], "ok");
  EXPECT_EQ(j["layout"]["ep"], 2);
  EXPECT_EQ(j["layout"]["etp"], 1);
  const auto& tiny = tb::model::preset("tiny-moe");
  EXPECT_EQ(j["params"]["total"].get<std::int64_t>(), tb::model::param_count(tiny));
  EXPECT_EQ(j["params"]["active"].get<std::int64_t>(), tb::model::active_param_count(tiny));
  EXPECT_LT(j["params"]["active"].get<std::int64_t>(), j["params"]["total"].get<std::int64_t>());
  EXPECT_GT(j["flops_per_token"]["causal"].get<double>(), 0);
  EXPECT_GT(j["extrapolated"]["tokens_per_s_per_gpu"].get<double>(), 0);

  // 8 CPU ranks: the expert all-to-alls of the MoE layers come on top of the measured compute. The fit's per-layer
  // time is the 3- and 2-layer points' difference (~4 ms of ~8 and ~12): a burst of load on a shared machine during
  // one point can leave it negative, which `project` rightly refuses; then the run is measured once more.
  const std::vector<std::string> project_json = {
      "project", "moe-cpu", "--gpus", "8", "--from", out.string(), "--recipes", recipes.string(), "--json"};
  r = run(project_json);
  if (r.rc != 0 && (r.out + r.err).find("per-layer time f1_ms is not positive") != std::string::npos) {
    ASSERT_EQ(measure().rc, 0);
    r = run(project_json);
  }
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  const auto p = nlohmann::json::parse(r.out);
  EXPECT_EQ(p["layout"]["ep"], 2);
  EXPECT_GT(p["comm_ms"]["ep"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(p["breakdown_ms"]["ep_exposed"].get<double>(), p["comm_ms"]["ep"].get<double>());
  r = run({"project", "moe-cpu", "--gpus", "8", "--from", out.string(), "--recipes", recipes.string()});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("EP communication exposed"), std::string::npos) << r.out;

  r = run({"run", "moe-cpu", "--device", "cpu", "--recipes", recipes.string(), "--set", "ep=3"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("experts=4 is not divisible by ep=3"), std::string::npos) << r.err;
  r = run({"run", "moe-cpu", "--device", "cpu", "--recipes", recipes.string(), "--points", "1,2"});
  EXPECT_EQ(r.rc, 2);  // one layer is the dense first one: no MoE layer to measure
  EXPECT_NE(r.err.find("--points 1"), std::string::npos) << r.err;
  fs::remove_all(base);
}
