// Tests recipe/recipe and recipe/layout: every shipped recipe loads and validates; layout lookup (exact,
// by release / precision / GPU model / variant, proxies, derived by the scaling rule); layout checks;
// and the exact error of each bad recipe in golden/recipe_errors.txt.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <iterator>

#include "core/error.h"
#include "golden.h"
#include "recipe/recipe.h"

namespace tr = tb::recipe;

namespace {
const std::vector<tr::Recipe>& recipes() {
  static const auto all = tr::load_recipes(tr::find_recipes_dir(std::nullopt));
  return all;
}
const tr::Recipe& recipe(std::string_view name) { return tr::find_recipe(recipes(), name); }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const tb::Error& e) {
    EXPECT_EQ(e.kind(), tb::Error::Kind::config);
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST(Recipes, EveryShippedRecipeLoadsAndValidates) {
  ASSERT_EQ(recipes().size(), 26u);
  for (const auto& r : recipes()) {
    EXPECT_FALSE(r.layouts.empty()) << r.name;
    EXPECT_FALSE(r.sources.empty()) << r.name;
    for (const auto& l : r.layouts) {  // the loader validated each; the derived quantities agree
      EXPECT_EQ(l.dp * l.tp * l.pp * l.cp, l.gpus) << l.where;
      EXPECT_EQ(l.grad_accum() * l.micro_batch * l.dp, l.global_batch) << l.where;
      EXPECT_EQ(l.proxy, l.layers < r.model.layers || l.seq < r.model.seq) << l.where;
    }
  }
  EXPECT_EQ(tr::default_recipe(recipes()).name, "llama3.1-8b");
  EXPECT_TRUE(recipe("grok1-314b").runnable());
  EXPECT_TRUE(recipe("llama4-maverick-400b").runnable());
  EXPECT_TRUE(recipe("deepseek-v3-671b").runnable());
  EXPECT_TRUE(recipe("deepseek-v3-671b").model.is_mla());
  EXPECT_TRUE(recipe("gpt3-175b").runnable());
}

TEST(Recipes, ModelOverridesAndMoe) {
  const auto& grok = recipe("grok1-314b");
  EXPECT_TRUE(grok.shape_overridden);
  EXPECT_EQ(grok.model.layers, 64);
  EXPECT_EQ(grok.model.d_model, 6144);
  EXPECT_EQ(grok.model.moe.experts, 8);
  EXPECT_EQ(grok.model.moe.top_k, 2);
  EXPECT_EQ(grok.model.moe.capacity_factor, 1.0);
  EXPECT_TRUE(grok.model.moe.pad_to_capacity);
  EXPECT_EQ(grok.model.moe.aux_loss, 0.01);
  EXPECT_EQ(grok.model.moe_layers(), 64);
  // Llama 4 Maverick as published (its HF config): 128 experts of 8192 top-1 + a shared expert of 8192 in every second
  // layer, dense layers of 16384, a sigmoid router not normalized; 400B parameters, 17B active
  const auto& l4 = recipe("llama4-maverick-400b").model;
  EXPECT_EQ(l4.moe.experts, 128);
  EXPECT_EQ(l4.moe.top_k, 1);
  EXPECT_EQ(l4.expert_ffn(), 8192);
  EXPECT_EQ(l4.moe.shared_ffn, 8192);
  EXPECT_EQ(l4.ffn, 16384);
  EXPECT_EQ(l4.moe.every, 2);
  EXPECT_EQ(l4.moe.score, tb::model::RouterScore::sigmoid);
  EXPECT_FALSE(l4.moe.normalize);
  EXPECT_NEAR(double(tb::model::param_count(l4)) / 400e9, 1, 0.01);
  EXPECT_NEAR(double(tb::model::active_param_count(l4)) / 17e9, 1, 0.02);
  // DeepSeek-V3's MoE (config_671B.json): 3 dense layers of 18432, then 256 experts of 2048 top-8 + 1 shared
  const auto& ds = recipe("deepseek-v3-671b").model;
  EXPECT_EQ(ds.moe.dense_first, 3);
  EXPECT_EQ(ds.moe_layers(), 58);
  EXPECT_EQ(ds.expert_ffn(), 2048);
  EXPECT_EQ(ds.moe.shared_ffn, 2048);
  EXPECT_EQ(ds.moe.top_k, 8);
  EXPECT_EQ(ds.moe.score, tb::model::RouterScore::sigmoid);
  EXPECT_TRUE(ds.moe.normalize);
  EXPECT_EQ(ds.moe.scale, 2.5);
  EXPECT_EQ(ds.moe.seq_aux_loss, 1e-4);
  EXPECT_EQ(ds.moe.aux_loss, 0);
  // Mixtral presets: every layer MoE, 8 experts top-2; 8x7B has 46.7B parameters, 12.9B active
  const auto& m7 = recipe("mixtral-8x7b").model;
  EXPECT_EQ(m7.moe_layers(), 32);
  EXPECT_NEAR(double(tb::model::param_count(m7)) / 46.7e9, 1, 0.01);
  EXPECT_NEAR(double(tb::model::active_param_count(m7)) / 12.9e9, 1, 0.01);
  EXPECT_EQ(recipe("mixtral-8x22b").model.seq, 65536);
  const auto& mt = recipe("maxtext-llama2-70b");
  EXPECT_EQ(mt.model.vocab, 32000);
  EXPECT_EQ(mt.model.seq, 4096);
  const auto& l8 = recipe("llama3.1-8b");
  EXPECT_FALSE(l8.shape_overridden);
  EXPECT_EQ(l8.model.name, "llama3.1-8b");
}

// The LoRA recipes run, with the adapters their references trained: HF PEFT's (r 8, alpha 16, dropout 0.1 on the seven
// projections) and NeMo 24.12's performance recipes' (linear_qkv only, dropout 0: 8B r 8 alpha 16, 70B r 16 alpha 32).
TEST(Recipes, LoraRecipesRunWithTheirReferencesAdapters) {
  for (const char* hf : {"hf-llama2-70b-lora", "hf-mistral-7b-lora"}) {
    const tr::Recipe& r = recipe(hf);
    EXPECT_TRUE(r.runnable()) << hf;
    EXPECT_EQ(r.task, "lora");
    EXPECT_EQ(r.lora.rank, 8);
    EXPECT_DOUBLE_EQ(r.lora.scale() * r.lora.rank, 16);
    EXPECT_DOUBLE_EQ(r.lora.dropout, 0.1);
    EXPECT_EQ(r.lora.targets, tb::model::kLoraCanonical);
  }
  for (const auto& [name, rank] : {std::pair{"llama3-8b-lora", 8}, std::pair{"llama3-70b-lora", 16}}) {
    const tr::Recipe& r = recipe(name);
    EXPECT_TRUE(r.runnable()) << name;
    EXPECT_EQ(r.lora.rank, rank);
    EXPECT_DOUBLE_EQ(r.lora.scale(), 2.0);
    EXPECT_DOUBLE_EQ(r.lora.dropout, 0);
    EXPECT_EQ(r.lora.targets, tb::model::kLoraQkv);
  }
  for (const auto& r : recipes()) EXPECT_EQ(r.lora.enabled(), r.task == "lora") << r.name;
}

TEST(Layouts, ExactByReleaseAndPrecision) {
  const auto& r = recipe("llama3.1-70b");
  auto l = tr::layout_for(r, {64, "fp8"});  // default release 25.04.02: FP8 moved to PP 8, CP 1
  EXPECT_EQ(l.tp, 4);
  EXPECT_EQ(l.pp, 8);
  EXPECT_EQ(l.cp, 1);
  EXPECT_EQ(l.vp, 5);
  EXPECT_EQ(l.dp, 2);
  EXPECT_EQ(l.grad_accum(), 64);
  EXPECT_TRUE(l.sequence_parallel);
  EXPECT_FALSE(l.derived);
  l = tr::layout_for(r, {64, "bf16"});
  EXPECT_EQ(l.pp, 4);
  EXPECT_EQ(l.cp, 2);
  l = tr::layout_for(r, {64, "fp8", "24.11"});  // "24.11" matches the tag "24.11.1"
  EXPECT_EQ(l.pp, 4);
  EXPECT_EQ(l.cp, 2);
  l = tr::layout_for(r, {64, "fp8", "26.02.01"});
  EXPECT_EQ(l.micro_batch, 2);
  EXPECT_EQ(l.global_batch, 256);
  EXPECT_EQ(l.grad_accum(), 64);
  EXPECT_EQ(tr::layout_gpu_counts(r, {0, "bf16"}), (std::vector<int>{64, 128, 256, 512, 1024, 2048}));
  EXPECT_EQ(tr::layout_gpu_counts(r, {0, "bf16", "26.02"}), (std::vector<int>{64, 128, 256, 512, 1024}));
}

TEST(Layouts, ProxiesOfTheReference) {
  const auto& r = recipe("llama3.1-405b");
  auto l = tr::layout_for(r, {64, "bf16", "25.04"});
  EXPECT_TRUE(l.proxy);
  EXPECT_EQ(l.layers, 30);  // 30 + embedding + loss = 32 = pp 4 x vp 8
  EXPECT_EQ(l.dp, 1);
  EXPECT_EQ(l.grad_accum(), 64);
  l = tr::layout_for(r, {96, "fp8", "24.11"});
  EXPECT_EQ(l.layers, 21);
  EXPECT_EQ(l.pp, 3);
  EXPECT_EQ(l.vp, 7);
  l = tr::layout_for(r, {576, "fp8", "24.11"});
  EXPECT_FALSE(l.proxy);
  EXPECT_EQ(l.layers, 126);
  EXPECT_EQ(l.grad_accum(), 63);
  const auto& grok = recipe("grok1-314b");
  l = tr::layout_for(grok, {8, "bf16"});
  EXPECT_EQ(l.seq, 4096);
  EXPECT_EQ(l.layers, 2);
  EXPECT_EQ(l.ep, 2);
  EXPECT_EQ(l.expert_tp(), 4);
}

TEST(Layouts, GpuModelAndVariant) {
  auto l = tr::layout_for(recipe("llama3.1-405b"), {256, "bf16", "25.05", "GB200"});
  EXPECT_EQ(l.tp, 4);
  EXPECT_EQ(l.global_batch, 128);
  l = tr::layout_for(recipe("llama3.1-405b"), {512, "bf16", "25.05", "GB200"});  // GB200's, not H100's 512
  EXPECT_EQ(l.tp, 4);
  l = tr::layout_for(recipe("llama3.1-405b"), {512, "bf16", "25.05"});
  EXPECT_EQ(l.tp, 8);
  const auto& n = recipe("nemotron4-340b");
  EXPECT_EQ(tr::layout_for(n, {256, "bf16", "25.05", "GB200"}).global_batch, 64);
  EXPECT_EQ(tr::layout_for(n, {256, "bf16", "25.05", "GB200", "strong"}).global_batch, 512);
  const auto g = tr::layout_for(recipe("grok1-314b"), {128, "fp8", "25.05.05", "GB200"});
  EXPECT_EQ(g.ep * g.expert_tp(), 32);
  EXPECT_EQ(g.grad_accum(), 8);
}

TEST(Layouts, DerivedByTheScalingRule) {
  const auto& r = recipe("llama3.1-8b");
  auto l = tr::layout_for(r, {256});  // past the listed 128: weak scaling of the 128-GPU run
  EXPECT_TRUE(l.derived);
  EXPECT_EQ(l.global_batch, 4096);
  EXPECT_EQ(l.dp, 128);
  EXPECT_EQ(l.grad_accum(), 32);
  EXPECT_NE(l.note.find("derived from the 128-GPU layout"), std::string::npos) << l.note;
  l = tr::layout_for(r, {4});  // below the smallest: scaled down from 8
  EXPECT_EQ(l.global_batch, 64);
  l = tr::layout_for(recipe("nemotron4-340b"), {1024, "fp8", "25.05", "GB200", "strong"});
  EXPECT_EQ(l.global_batch, 512);  // strong scaling keeps it
  const auto msg = error_of([] { tr::layout_for(recipe("llama3.1-70b"), {80, "bf16"}); });
  EXPECT_NE(msg.find("recipe 'llama3.1-70b' has no layout for 80 GPUs: the 64-GPU layout"), std::string::npos) << msg;
  EXPECT_NE(msg.find("80 GPUs are not a multiple of tp·pp·cp = 4·4·2 = 32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("listed: 64, 128, 256, 512, 1024, 2048"), std::string::npos) << msg;
  EXPECT_NE(error_of([] { tr::layout_for(recipe("llama3.1-8b"), {8, "fp16"}); }).find("has no precision 'fp16'"),
            std::string::npos);
}

TEST(Layouts, TinyRunsOnOneDevice) {
  const auto l = tr::layout_for(recipe("tiny"), {1});
  EXPECT_EQ(l.tp * l.pp * l.cp * l.dp, 1);
  EXPECT_FALSE(l.sequence_parallel);
  EXPECT_EQ(l.grad_accum(), 2);
  EXPECT_EQ(recipe("tiny").model.name, "tiny");
}

TEST(Layouts, ReleaseTags) {
  EXPECT_TRUE(tr::release_matches("25.04", "25.04.02"));
  EXPECT_TRUE(tr::release_matches("24.11.1", "24.11"));
  EXPECT_TRUE(tr::release_matches("25.4", "25.04.02"));
  EXPECT_FALSE(tr::release_matches("25.04", "25.05.05"));
  EXPECT_FALSE(tr::release_matches("", "25.05"));
  EXPECT_LT(tr::compare_releases("25.02", "25.04.02"), 0);
  EXPECT_LT(tr::compare_releases("25.05.01", "25.05.05"), 0);
  EXPECT_GT(tr::compare_releases("26.02.01", "25.10"), 0);
}

TEST(Recipes, UnknownRecipeSuggestsTheNearest) {
  const auto msg = error_of([] { tr::find_recipe(recipes(), "llama3.1-8bb"); });
  EXPECT_NE(msg.find("unknown recipe 'llama3.1-8bb' (did you mean 'llama3.1-8b'?)"), std::string::npos) << msg;
  EXPECT_THROW(tr::find_recipes_dir(std::filesystem::path("/no/such/dir")), tb::Error);
}

TEST(Recipes, GoldenErrors) {
  tr::golden::run_cases("recipe_errors.txt", [](const std::filesystem::path& file) { tr::load_recipe(file); });
}

TEST(Recipes, SecondDefaultIsAnError) {
  const auto dir = std::filesystem::temp_directory_path() / "tb_recipe_two_defaults";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto src = tr::find_recipes_dir(std::nullopt);
  for (const char* n : {"llama3.1-8b", "tiny"}) std::filesystem::copy_file(src / (std::string(n) + ".toml"), dir / (std::string(n) + ".toml"));
  std::string text;
  {
    std::ifstream in(dir / "tiny.toml");
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  text.replace(text.find("task"), 4, "default = true\ntask");
  std::ofstream(dir / "tiny.toml") << text;
  const auto msg = error_of([&] { tr::load_recipes(dir); });
  EXPECT_NE(msg.find("a second default recipe ('llama3.1-8b' is the default already)"), std::string::npos) << msg;
  std::filesystem::remove_all(dir);
}
