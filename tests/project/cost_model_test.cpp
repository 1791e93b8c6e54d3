// Tests project/cost_model: the work of a layer on a shard (hand-computed for Llama 3.1 8B; FP8 casts and sequence
// parallelism for 70B), the scaling between shards, the fit of the rates (recovered from synthetic samples; one
// sample; FP8 with the attention rate given), and the fit on the shipped H200 proxies with its leave-one-out error.
#include "project/cost_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "model/config.h"
#include "project/measurement.h"
#include "project/step_model.h"
#include "recipe/recipe.h"
#include "recipe/system.h"

using namespace tb::project;
using tb::model::preset;

TEST(CostModel, Llama8BLayerByHand) {
  const auto& m = preset("llama3.1-8b");
  const Work w = layer_work(m, 1, 1, 8192);
  // 6·s·h·[(A + 2G)·d + A·d + 3·ffn] = 6·8192·4096·(48·128 + 32·128 + 3·14336)
  EXPECT_DOUBLE_EQ(w.gemm_flops, 6.0 * 8192 * 4096 * (48 * 128 + 32 * 128 + 3 * 14336));
  EXPECT_DOUBLE_EQ(w.attn_flops, 7.0 * 8192 * 8192 * 32 * 128);  // causal forward 2·s²·A·d, backward 2.5×
  EXPECT_DOUBLE_EQ(w.mem_bytes, 2.0 * 8192 * (16 * 4096 + 8 * 14336 + 6 * 48 * 128));
  // the layer's GEMMs are the model FLOPs of its projections and MLP (model/flops.h, per token × tokens)
  EXPECT_NEAR(w.gemm_flops / 8192, 6.0 * (4096.0 * 48 * 128 + 32 * 128 * 4096 + 3.0 * 4096 * 14336), 1);
  const Work h = head_work(m, 1, 1, 8192);
  EXPECT_DOUBLE_EQ(h.gemm_flops, 6.0 * 8192 * 4096 * 128256);
  EXPECT_DOUBLE_EQ(layer_params(m, 1).dense, 4096.0 * 48 * 128 + 32.0 * 128 * 4096 + 3.0 * 4096 * 14336 + 2 * 4096);
  EXPECT_EQ(layer_params(m, 1).expert, 0);
}

// A MoE layer is the dense layer at the active width (top_k·expert_ffn + shared_ffn), plus the router and the
// dispatch's copies; a model's layer is the mean over its layers, a proxy's slope one period of its pattern.
TEST(CostModel, MixtureOfExpertsLayerByHand) {
  tb::model::ModelConfig grok = preset("llama3.1-70b");  // Grok-1's shape (recipes/grok1-314b.toml)
  grok.layers = 64, grok.d_model = 6144, grok.ffn = 32768, grok.heads = 48, grok.kv_heads = 8, grok.head_dim = 128;
  grok.moe.experts = 8, grok.moe.top_k = 2;
  tb::model::ModelConfig wide = grok;  // a dense layer as wide as Grok's two active experts
  wide.moe = {}, wide.ffn = 2 * 32768;
  const double s = 4096, h = 6144;
  const Work moe = layer_work(grok, 4, 1, 4096, {false, false, 4}), dense = layer_work(wide, 4, 1, 4096);
  EXPECT_DOUBLE_EQ(moe.gemm_flops, dense.gemm_flops + 6 * s * h * 8 / 4);  // + the router on a tp rank's rows
  EXPECT_DOUBLE_EQ(moe.attn_flops, dense.attn_flops);
  EXPECT_DOUBLE_EQ(moe.mem_bytes, dense.mem_bytes + 8 * s * h * (1 + 2 * 4) / 4);  // + permute and unpermute
  EXPECT_DOUBLE_EQ(layer_work(grok, 4, 1, 4096, {false, false, 1}).mem_bytes,
                   dense.mem_bytes + 8 * s * h * (1 + 2) / 4);  // etp 1: the rank's own k rows per token
  // parameters: a tp 4 rank of ep 2 / etp 4 holds 4 experts of 32768/4; of ep 8 / etp 1 one expert of full width
  const double attention = h * (12 + 2 * 2) * 128 + 12 * 128 * h + 2 * h;
  EXPECT_DOUBLE_EQ(layer_params(grok, 4, 2, 4).dense, attention + 8 * h);
  EXPECT_DOUBLE_EQ(layer_params(grok, 4, 2, 4).expert, 4 * 3 * h * 8192);
  EXPECT_DOUBLE_EQ(layer_params(grok, 4, 8, 1).expert, 3 * h * 32768);
  // Llama 4 Maverick's pattern: the mean of a dense layer (16384) and a MoE layer (8192 routed + 8192 shared)
  tb::model::ModelConfig l4 = grok;
  l4.layers = 48, l4.d_model = 5120, l4.ffn = 16384, l4.heads = 40, l4.kv_heads = 8;
  l4.moe.experts = 128, l4.moe.top_k = 1, l4.moe.expert_ffn = 8192, l4.moe.shared_ffn = 8192, l4.moe.every = 2;
  tb::model::ModelConfig l4dense = l4;
  l4dense.moe = {};
  const Work mean = layer_work(l4, 4, 1, 8192), d = layer_work(l4dense, 4, 1, 8192);
  EXPECT_DOUBLE_EQ(mean.gemm_flops, d.gemm_flops + 0.5 * 6 * 8192.0 * 5120 * 128 / 4);  // the same active width
  EXPECT_DOUBLE_EQ(period_model(l4).layers, 2);
  EXPECT_DOUBLE_EQ(layer_work(period_model(l4), 4, 1, 8192).gemm_flops, mean.gemm_flops);
  tb::model::ModelConfig ds = l4;  // three dense layers first: the model's mean differs from a period's
  ds.moe.every = 1, ds.moe.dense_first = 3;
  EXPECT_LT(layer_params(ds, 4, 64, 1).expert, layer_params(period_model(ds), 4, 64, 1).expert);
}

TEST(CostModel, Fp8CastsAndSequenceParallelByHand) {
  const auto& m = preset("llama3.1-70b");  // tp 4: 16 heads, 2 kv heads, ffn 7168 per GPU
  const Work bf = layer_work(m, 4, 1, 8192), f8 = layer_work(m, 4, 1, 8192, {true, false});
  const Work sp = layer_work(m, 4, 1, 8192, {false, true}), f8sp = layer_work(m, 4, 1, 8192, {true, true});
  for (const Work& w : {f8, sp, f8sp}) {  // casts and row splits move bytes, not FLOPs
    EXPECT_DOUBLE_EQ(w.gemm_flops, bf.gemm_flops);
    EXPECT_DOUBLE_EQ(w.attn_flops, bf.attn_flops);
  }
  // FP8: 6 bytes per element of every GEMM input (amax read, cast read, the copy and its transpose):
  // inputs qkv 8192, out 16·128, fc1 8192, fc2 7168; output gradients out 8192, fc2 8192, qkv (16 + 4)·128, fc1 2·7168
  const double x = 8192 + 16 * 128 + 8192 + 7168, dy = 8192 + 8192 + 20 * 128 + 2 * 7168;
  EXPECT_DOUBLE_EQ(f8.mem_bytes - bf.mem_bytes, 6.0 * 8192 * (x + dy));
  // sequence parallel: the norms and residual adds (16·h bytes a token) on s/tp rows, and the h-wide casts with them
  EXPECT_DOUBLE_EQ(bf.mem_bytes - sp.mem_bytes, 2.0 * 8192 * 16 * 8192 * (1 - 1.0 / 4));
  EXPECT_DOUBLE_EQ(f8.mem_bytes - f8sp.mem_bytes, bf.mem_bytes - sp.mem_bytes + 6.0 * 8192 * 4 * 8192 * (1 - 1.0 / 4));
  EXPECT_DOUBLE_EQ(layer_work(m, 1, 1, 8192, {false, true}).mem_bytes, layer_work(m, 1, 1, 8192).mem_bytes);
}

TEST(CostModel, ScalingBetweenShards) {
  const auto& m = preset("llama3.1-70b");
  const Work t4 = layer_work(m, 4, 1, 8192), t8 = layer_work(m, 8, 1, 8192), t4b2 = layer_work(m, 4, 2, 8192);
  EXPECT_DOUBLE_EQ(t8.gemm_flops / t4.gemm_flops, 0.5);  // heads, kv heads and ffn all halve
  EXPECT_DOUBLE_EQ(t8.attn_flops / t4.attn_flops, 0.5);
  EXPECT_DOUBLE_EQ(t4b2.gemm_flops / t4.gemm_flops, 2.0);  // twice the sequences per micro-batch
  const Work s4k = layer_work(m, 4, 1, 4096);
  EXPECT_DOUBLE_EQ(s4k.gemm_flops / t4.gemm_flops, 0.5);   // GEMMs linear in the sequence
  EXPECT_DOUBLE_EQ(s4k.attn_flops / t4.attn_flops, 0.25);  // attention quadratic
  // KV heads do not shard below one per rank (Nemotron-4 340B: 8 KV heads, tp 8 and 16 hold one each)
  const auto& n = preset("nemotron4-340b");
  const Work n8 = layer_work(n, 8, 1, 4096), n16 = layer_work(n, 16, 1, 4096);
  EXPECT_GT(n16.gemm_flops / n8.gemm_flops, 0.5);
  // a carried time: t' = t · T(w')/T(w); GEMM-bound work scales by its FLOPs, memory-bound parts by bytes
  Rates r{700, 560, 4.25};
  const double ratio = r.time_s(t8) / r.time_s(t4);
  EXPECT_NEAR(ratio, 0.5, 0.03);
  EXPECT_LT(r.mem_time_s(t4) / r.time_s(t4), 0.1);  // the elementwise share of a 70B layer is small
}

TEST(CostModel, FitRecoversTheRates) {
  const Rates truth{650, 480, 4.0};
  std::vector<LayerSample> samples;
  for (const char* name : {"llama3.1-8b", "llama3.1-70b", "nemotron4-15b", "gpt3-175b"})
    for (int tp : {1, 4}) {
      const auto& m = preset(name);
      const Work w = layer_work(m, tp, 1, m.seq);
      samples.push_back({w, truth.time_s(w)});
    }
  const Rates fit = fit_rates(samples, 4.0);
  EXPECT_NEAR(fit.gemm_tflops, 650, 1e-6);
  EXPECT_NEAR(fit.attn_tflops, 480, 1e-6);
  for (double e : leave_one_out_errors(samples, 4.0)) EXPECT_NEAR(e, 0, 1e-9);
  // one sample: R_attn = 0.8 R_gemm, and the sample itself is reproduced
  const Rates one = fit_rates(std::span(samples).first(1), 4.0);
  EXPECT_NEAR(one.attn_tflops / one.gemm_tflops, 0.8, 1e-12);
  EXPECT_NEAR(one.time_s(samples[0].work), samples[0].seconds, 1e-12);
  EXPECT_THROW(fit_rates({}, 4.0), tb::Error);
  // FP8 at a given attention rate (attention stays bf16): the GEMM rate alone is fitted
  const Rates fp8{1100, 480, 4.0};
  std::vector<LayerSample> f8;
  for (const char* name : {"llama3.1-8b", "llama3.1-70b", "nemotron4-340b"}) {
    const auto& m = preset(name);
    const Work w = layer_work(m, 4, 1, m.seq, {true, false});
    f8.push_back({w, fp8.time_s(w)});
  }
  const Rates f = fit_rates(f8, 4.0, 480);
  EXPECT_NEAR(f.gemm_tflops, 1100, 1e-6);
  EXPECT_DOUBLE_EQ(f.attn_tflops, 480);
  const auto loo = leave_one_out_errors(f8, 4.0, 480);
  ASSERT_EQ(loo.size(), 3u);
  for (double e : loo) EXPECT_NEAR(e, 0, 1e-9);
}

TEST(CostModel, ShippedProxiesFitWithinTenPercentLeaveOneOut) {
  namespace fs = std::filesystem;
  const auto recipes = tb::recipe::load_recipes(tb::recipe::find_recipes_dir(std::nullopt));
  const fs::path from =
      tb::recipe::find_references_dir(std::nullopt) / "measured/h200-recipes";
  const std::vector<fs::path> paths{from};
  const Inputs in = load_inputs(paths);
  ASSERT_EQ(in.runs.size(), 5u);
  std::vector<LayerSample> samples;
  std::vector<std::string> names;
  for (const Measurement& m : in.runs) {
    const auto& r = tb::recipe::find_recipe(recipes, m.recipe);
    tb::model::ModelConfig mc = r.model;
    samples.push_back({layer_work(mc, m.layout.tp, m.layout.micro_batch, m.layout.seq), m.f1_s});
    names.push_back(m.recipe);
  }
  const Rates r = fit_rates(samples, 4.25);
  std::printf("fit on the H200 proxies: GEMM %.0f TFLOP/s, attention %.0f TFLOP/s, memory 4.25 TB/s\n", r.gemm_tflops,
              r.attn_tflops);
  const auto loo = leave_one_out_errors(samples, 4.25);
  ASSERT_EQ(loo.size(), samples.size());
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const double flop_rate = (samples[i].work.gemm_flops + samples[i].work.attn_flops) / samples[i].seconds / 1e12;
    std::printf("  %-15s F1 %6.2f ms  fit %+5.1f%%  leave-one-out %+5.1f%%  (GEMM+attention %.0f TFLOP/s)\n",
                names[i].c_str(), 1e3 * samples[i].seconds, 100 * (r.time_s(samples[i].work) / samples[i].seconds - 1),
                100 * loo[i], flop_rate);
    EXPECT_LT(std::abs(loo[i]), 0.10) << names[i];
  }
  EXPECT_GT(r.gemm_tflops, 550);
  EXPECT_LT(r.gemm_tflops, 850);
}

TEST(CostModel, ShippedProxiesFitOneModelPerPrecision) {
  namespace fs = std::filesystem;
  const auto recipes = tb::recipe::load_recipes(tb::recipe::find_recipes_dir(std::nullopt));
  const fs::path refs = tb::recipe::find_references_dir(std::nullopt), results = refs / "measured";
  const std::vector<fs::path> paths{results / "h200-recipes", results / "h200-fp8",
                                    results / "h200-fp8-more"};
  const auto systems = tb::recipe::load_systems(refs / "systems");
  const Context ctx =
      make_context(recipes, load_inputs(paths), systems, *tb::recipe::match_system(systems, "H100 SXM"));
  const CostModel &bf = ctx.cost_model("bf16"), &f8 = ctx.cost_model("fp8");
  EXPECT_EQ(bf.samples.size(), 8u);  // the five of h200-recipes, 8B and 70B again, 340B
  EXPECT_EQ(f8.samples.size(), 6u);  // 8B, 70B, 405B, 15B, 340B, GPT-3
  EXPECT_DOUBLE_EQ(f8.rates.attn_tflops, bf.rates.attn_tflops);  // attention stays bf16 in FP8 runs
  std::printf("bf16: GEMM %.0f attention %.0f TFLOP/s; fp8: GEMM %.0f TFLOP/s\n", bf.rates.gemm_tflops,
              bf.rates.attn_tflops, f8.rates.gemm_tflops);
  EXPECT_GT(f8.rates.gemm_tflops, 1.3 * bf.rates.gemm_tflops);
  EXPECT_LT(f8.rates.gemm_tflops, 2.0 * bf.rates.gemm_tflops);
  EXPECT_DOUBLE_EQ(f8.attn_given_tflops, bf.rates.attn_tflops);
  for (const auto* cm : {&bf, &f8}) {
    const auto loo = leave_one_out_errors(cm->samples, 4.25, cm->attn_given_tflops);
    ASSERT_EQ(loo.size(), cm->samples.size());
    for (std::size_t i = 0; i < loo.size(); ++i) {
      std::printf("  %s %-60s fit %+5.1f%%  leave-one-out %+5.1f%%\n", cm == &f8 ? "fp8 " : "bf16",
                  cm->where[i].c_str(), 100 * (cm->rates.time_s(cm->samples[i].work) / cm->samples[i].seconds - 1),
                  100 * loo[i]);
      EXPECT_LT(std::abs(loo[i]), 0.20) << cm->where[i];  // Nemotron-4 340B's FP8 runs slowest (docs/PROJECTION.md)
    }
  }
}
