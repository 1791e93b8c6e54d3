// Tests the catalogue as a whole against the DGX Cloud Benchmarking Recipes (NVIDIA/dgxc-benchmarking): every
// workload of it has a recipe, every published row is in references/ (counted per table of the sheet; Grok-1's from
// its READMEs, which print more sizes than the sheet quotes), and `trainbench list` shows them; and the NeMo
// performance summaries' Mixtral rows.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "../support/cli_run.h"
#include "cli/commands.h"
#include "recipe/reference.h"
#include "recipe/system.h"

namespace tr = tb::recipe;

namespace {
tb::testing_support::CliResult run(std::vector<std::string> args) { return tb::testing_support::run_cli(std::move(args)); }

// The fact sheet's workloads (sections 1.1, 2.1-2.4) and their recipe files.
const std::set<std::string> kRecipes = {
    "llama3.1-8b", "llama3.1-70b", "llama3.1-405b", "nemotron4-15b", "nemotron4-340b", "gpt3-175b",
    "grok1-314b", "maxtext-llama2-70b", "maxtext-llama3-70b", "paxml-gpt3-175b", "paxml-gpt3-5b",
    "hf-llama2-70b-lora", "hf-mistral-7b-lora", "llama3-8b-sft", "llama3-8b-lora", "llama3-70b-sft",
    "llama3-70b-lora", "llama4-maverick-400b", "nemotronh-56b", "deepseek-v3-671b", "tiny", "tiny-sft",
    "mixtral-8x7b", "mixtral-8x22b",  // NeMo's performance recipes (sheet section 1.1: never DGXC recipes)
    "mlperf-llama2-70b-lora", "mlperf-gpt3-175b"};  // MLPerf Training (docs/MLPERF.md)

// Rows per table of the fact sheet: (recipe, GPU model, release) -> published rows (precisions x sizes).
using Key = std::tuple<std::string, std::string, std::string>;
const std::map<Key, int> kRows = {
    // 2.3 H100
    {{"llama3.1-8b", "H100", "24.11.1"}, 10},     {{"llama3.1-8b", "H100", "25.02"}, 5},
    {{"llama3.1-8b", "H100", "25.04.02"}, 10},    {{"llama3.1-70b", "H100", "24.11.1"}, 12},
    {{"llama3.1-70b", "H100", "25.02"}, 12},      {{"llama3.1-70b", "H100", "25.04.02"}, 12},
    {{"llama3.1-405b", "H100", "24.11.1"}, 12},   {{"llama3.1-405b", "H100", "25.02"}, 12},
    {{"llama3.1-405b", "H100", "25.04.02"}, 12},  {{"llama3.1-405b", "H100", "25.05.05"}, 2},
    {{"nemotron4-15b", "H100", "24.11.1"}, 8},    {{"nemotron4-15b", "H100", "25.02"}, 4},
    {{"nemotron4-15b", "H100", "25.04.02"}, 8},   {{"nemotron4-15b", "H100", "25.05.05"}, 2},
    {{"nemotron4-340b", "H100", "24.11.1"}, 6},   {{"nemotron4-340b", "H100", "25.04.02"}, 4},
    {{"nemotron4-340b", "H100", "25.05.05"}, 2},  {{"gpt3-175b", "H100", "24.11.1"}, 10},
    {{"gpt3-175b", "H100", "25.04.02"}, 10},      {{"grok1-314b", "H100", "24.11.1"}, 18},
    {{"grok1-314b", "H100", "25.04.02"}, 18},     {{"grok1-314b", "H100", "25.05.01"}, 2},
    {{"grok1-314b", "H100", "25.05.05"}, 2},      {{"maxtext-llama2-70b", "H100", "24.11.1"}, 4},
    {{"maxtext-llama3-70b", "H100", "25.02"}, 4}, {{"paxml-gpt3-175b", "H100", "24.11.1"}, 2},
    {{"paxml-gpt3-5b", "H100", "24.11.1"}, 4},    {{"hf-llama2-70b-lora", "H100", "24.11.1"}, 7},
    {{"hf-mistral-7b-lora", "H100", "24.11.1"}, 6}, {{"llama3-8b-sft", "H100", "25.02"}, 4},
    {{"llama3-8b-lora", "H100", "25.02"}, 4},     {{"llama3-70b-sft", "H100", "25.02"}, 2},
    {{"llama3-70b-lora", "H100", "25.02"}, 6},    {{"llama4-maverick-400b", "H100", "25.05.05"}, 2},
    {{"nemotronh-56b", "H100", "25.05.05"}, 3},   {{"deepseek-v3-671b", "H100", "25.05.05"}, 2},
    // 2.4 GB200 (Nemotron-4 340B: weak and strong scaling)
    {{"llama3.1-405b", "GB200", "25.05.05"}, 6},  {{"grok1-314b", "GB200", "25.05.05"}, 6},
    {{"nemotron4-340b", "GB200", "25.05.05"}, 12}, {{"deepseek-v3-671b", "GB200", "25.05.05"}, 3},
    {{"llama4-maverick-400b", "GB200", "25.05.05"}, 6},
    // NeMo performance summaries: Mixtral, FP8 (no H100 or H200 row; references/nemo-perf.toml)
    {{"mixtral-8x7b", "B200", "25.02"}, 1},       {{"mixtral-8x22b", "B200", "25.02"}, 1},
    {{"mixtral-8x7b", "GB200", "25.04"}, 1},      {{"mixtral-8x22b", "GB200", "25.04"}, 1},
    // NVIDIA's MLPerf Training v4.0 / v4.1 times to train (references/mlperf-training.toml; GPT-3 at 11,616 GPUs is
    // one result listed in both rounds: its newest release is 4.1)
    {{"mlperf-llama2-70b-lora", "H100", "4.0"}, 3}, {{"mlperf-llama2-70b-lora", "H200", "4.0"}, 1},
    {{"mlperf-llama2-70b-lora", "H100", "4.1"}, 3}, {{"mlperf-llama2-70b-lora", "H200", "4.1"}, 1},
    {{"mlperf-gpt3-175b", "H100", "4.0"}, 2},       {{"mlperf-gpt3-175b", "H100", "4.1"}, 3},
};
}  // namespace

TEST(Catalogue, EveryWorkloadOfTheFactSheetHasARecipe) {
  std::set<std::string> names;
  for (const auto& r : tr::load_recipes(tr::find_recipes_dir(std::nullopt))) names.insert(r.name);
  EXPECT_EQ(names, kRecipes);
}

TEST(Catalogue, EveryPublishedRowIsInReferences) {
  const auto rows = tr::load_reference_dir(tr::find_references_dir(std::nullopt));
  std::map<Key, int> got;
  int published = 0;
  for (const auto& r : rows)
    if (r.gpu != "CPU") ++got[{r.recipe, r.gpu, r.release()}], ++published;  // CPU: our own measured baseline
  EXPECT_EQ(got, kRows);
  int total = 0;
  for (const auto& [k, n] : kRows) total += n;
  EXPECT_EQ(published, total);
}

TEST(Catalogue, ListShowsRecipesAndReferences) {
  auto r = run({"list"});
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const auto& name : kRecipes) EXPECT_NE(r.out.find("  " + name + " "), std::string::npos) << name;
  EXPECT_NE(r.out.find("llama3.1-8b *"), std::string::npos);  // the default
  EXPECT_NE(r.out.find("micro suites"), std::string::npos);
  EXPECT_NE(r.out.find("295 rows"), std::string::npos);  // 293 published + the measured CPU baselines (tiny, tiny-sft)
  EXPECT_NE(r.out.find("25.02+25.04.02"), std::string::npos);  // one GPT-3 table, two releases
  r = run({"list", "recipes"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.find("micro suites"), std::string::npos);
  EXPECT_EQ(r.out.find("references ("), std::string::npos);
  EXPECT_NE(r.out.find("MoE 8/top2"), std::string::npos) << r.out;  // grok1-314b
  r = run({"list", "references"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("full-mha"), std::string::npos);
  EXPECT_NE(r.out.find("GB200 25.05.05 strong"), std::string::npos) << r.out;
  EXPECT_EQ(run({"list", "recipe"}).rc, 2);                               // not one of the choices
  EXPECT_EQ(run({"list", "--recipes", "/no/such/folder"}).rc, 2);         // config error, one line
}
