// Tests recipe/plan: proxies of the real recipes have the per-GPU shard shapes of their reference layouts
// (heads, kv heads, ffn and vocab divided by tp; d_model, head_dim, sequence unchanged); the points; --set
// overrides (validated like layouts); refusals (needs, precision); and the extrapolation arithmetic on timings
// made from known F0, F1, O0, O1 (recovered exactly, and the step and tokens/s per GPU by the formula). A distributed
// plan trains the whole model at the layout for its rank count (the reference's own proxy layers where it has them),
// is the reference run unless --set changes it, and refuses rank counts without a layout, --ref-gpus of another count
// and --points. A mixture of experts' proxy is one rank of the layout's expert grid (recipe/moe_proxy.h): its experts
// / ep experts of width expert_ffn / etp on a tp·cp/etp share of the rows, points in whole periods of the layer
// pattern, the experts' optimizer state over the expert data-parallel group; bad expert layouts are refused. A LoRA
// recipe's plan carries its adapters (the shard's on a proxy). A GPU model picks the layout a recipe lists for it;
// --set tp=1 turns sequence parallel off.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "recipe/plan.h"

namespace {

namespace tr = tb::recipe;

const std::vector<tr::Recipe>& recipes() {
  static const auto r = tr::load_recipes(tr::find_recipes_dir(std::nullopt));
  return r;
}

TEST(Plan, Llama8bProxyIsTheFullWidthModelAtCp2) {
  const auto p = tr::plan_run(tr::find_recipe(recipes(), "llama3.1-8b"), {});
  EXPECT_EQ(p.layout.gpus, 8);
  EXPECT_EQ(p.layout.cp, 2);
  EXPECT_TRUE(p.proxy);
  EXPECT_EQ(p.shard.heads, 32);
  EXPECT_EQ(p.shard.kv_heads, 8);
  EXPECT_EQ(p.shard.ffn, 14336);
  EXPECT_EQ(p.shard.vocab, 128256);
  EXPECT_EQ(p.shard.seq, 8192);
  EXPECT_EQ(p.shard.layers, 32);
  EXPECT_EQ(p.points, (std::vector<int>{2, 4}));
  EXPECT_EQ(p.precision, "bf16");
}

TEST(Plan, Llama70bShardDividesByTp) {
  const auto& r = tr::find_recipe(recipes(), "llama3.1-70b");
  const auto p = tr::plan_run(r, {});
  const int tp = p.layout.tp;
  ASSERT_GT(tp, 1);
  EXPECT_EQ(p.shard.heads, r.model.heads / tp);
  EXPECT_EQ(p.shard.kv_heads, std::max(1, r.model.kv_heads / tp));
  EXPECT_EQ(p.shard.ffn, r.model.ffn / tp);
  EXPECT_EQ(p.shard.vocab, (r.model.vocab + tp - 1) / tp);
  EXPECT_EQ(p.shard.d_model, r.model.d_model);
  EXPECT_EQ(p.shard.head_dim, r.model.head_dim);
  EXPECT_EQ(p.shard.layers, p.layers / p.layout.pp);
}

TEST(Plan, SetOverridesAreValidatedLikeLayouts) {
  const auto& r = tr::find_recipe(recipes(), "llama3.1-8b");
  tr::RunOptions o;
  o.sets = {{"layers", "8"}, {"global_batch", "64"}};
  const auto p = tr::plan_run(r, o);
  EXPECT_EQ(p.layers, 8);
  EXPECT_EQ(p.layout.global_batch, 64);
  o.sets = {{"tp", "3"}};
  EXPECT_THROW(tr::plan_run(r, o), tb::Error);  // 32 heads are not divisible by 3; 8 GPUs not by 3*2
  o.sets = {{"tpp", "2"}};
  try {
    tr::plan_run(r, o);
    ADD_FAILURE();
  } catch (const tb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'tp'"), std::string::npos) << e.what();
  }
}

TEST(Plan, AnUnlistedCountFitsWithOverrides) {
  tr::RunOptions o;
  o.ref_gpus = 1;  // the 8B layouts have cp 2: one GPU fits only with cp 1
  EXPECT_THROW(tr::plan_run(tr::find_recipe(recipes(), "llama3.1-8b"), o), tb::Error);
  o.sets = {{"cp", "1"}};
  const auto p = tr::plan_run(tr::find_recipe(recipes(), "llama3.1-8b"), o);
  EXPECT_EQ(p.layout.gpus, 1);
  EXPECT_EQ(p.layout.cp, 1);
  EXPECT_EQ(p.layout.dp, 1);
  EXPECT_EQ(p.layout.global_batch, 16);  // weak scaling: 128 per 8 GPUs
}

// DeepSeek-V3 at its smallest layout (512 H100, tp 2 ep 64) on one device: an MLA model with half the heads, an ep
// rank's 4 of 256 experts on half the micro-batch's rows.
TEST(Plan, DeepSeekV3ProxyIsOneRankOfItsExpertGrid) {
  const tr::RunPlan p = tr::plan_run(tr::find_recipe(recipes(), "deepseek-v3-671b"), {});
  EXPECT_TRUE(p.proxy);
  EXPECT_TRUE(p.shard.is_mla());
  EXPECT_EQ(p.shard.heads, 64);
  EXPECT_EQ(p.shard.moe.ep_proxy, 64);
  EXPECT_EQ(p.shard.moe.local_experts(), 4);
  EXPECT_EQ(p.shard.moe.token_share, 2);
  EXPECT_EQ(p.shard.moe.dense_first, 3);
  p.shard.validate();
}

// The LoRA recipes train their adapters in every mode: the proxy's shard holds a tp rank's (hf-llama2-70b-lora: tp 2,
// the canonical targets on heads 32 / kv 4 and ffn 14336), a distributed plan the whole model's. A rank that fits the
// model but not the shard's k block (kv_dim 1024 / tp 2) is refused before any work.
TEST(Plan, LoraRecipesTrainTheirAdaptersOnTheShard) {
  auto p = tr::plan_run(tr::find_recipe(recipes(), "hf-llama2-70b-lora"), {});
  EXPECT_TRUE(p.proxy);
  EXPECT_EQ(p.shard.heads, 32);
  EXPECT_EQ(p.shard.kv_heads, 4);
  EXPECT_EQ(p.shard.lora.rank, 8);
  EXPECT_DOUBLE_EQ(p.shard.lora.scale(), 2.0);
  EXPECT_DOUBLE_EQ(p.shard.lora.dropout, 0.1);
  EXPECT_EQ(p.shard.lora.targets, tb::model::kLoraCanonical);
  EXPECT_EQ(p.model.lora.rank, 8);
  tr::RunOptions o;
  o.ranks = 8;
  EXPECT_EQ(tr::plan_run(tr::find_recipe(recipes(), "llama3-8b-lora"), o).model.lora.targets, tb::model::kLoraQkv);
  EXPECT_EQ(tr::plan_run(tr::find_recipe(recipes(), "llama3-70b-lora"), {}).shard.lora.rank, 16);
  tr::Recipe wide = tr::find_recipe(recipes(), "hf-llama2-70b-lora");
  wide.lora.rank = 600;  // <= min(8192, 1024) of the model's k block, above the shard's 512
  try {
    tr::plan_run(wide, {});
    ADD_FAILURE();
  } catch (const tb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("LoRA rank 600 is above min(in, out) = 512 of target k"), std::string::npos)
        << e.what();
  }
}

TEST(Plan, RefusesWhatCannotRun) {
  try {
    tr::plan_run(tr::find_recipe(recipes(), "nemotronh-56b"), {});
    ADD_FAILURE();
  } catch (const tb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs mamba"), std::string::npos) << e.what();
  }
  tr::RunOptions o;
  o.precision = "fp32";
  EXPECT_THROW(tr::plan_run(tr::find_recipe(recipes(), "llama3.1-8b"), o), tb::Error);
}

TEST(Plan, DistributedIsTheWholeModelAtTheLayoutOfItsRanks) {
  const auto& r = tr::find_recipe(recipes(), "llama3.1-8b");
  tr::RunOptions o;
  o.ranks = 16;
  const auto p = tr::plan_run(r, o);
  EXPECT_TRUE(p.distributed);
  EXPECT_FALSE(p.proxy);
  EXPECT_TRUE(p.points.empty());
  EXPECT_EQ(p.layout.gpus, 16);
  EXPECT_EQ(p.layout.cp, 2);
  EXPECT_EQ(p.layout.dp, 8);
  EXPECT_EQ(p.layout.global_batch, 256);
  EXPECT_EQ(p.model.layers, 32);
  EXPECT_EQ(p.model.heads, 32);  // not a shard
  EXPECT_EQ(p.model.vocab, 128256);
  EXPECT_EQ(p.reference.global_batch, 256);
  EXPECT_TRUE(p.differences.empty());

  o.sets = {{"layers", "4"}};
  const auto q = tr::plan_run(r, o);
  EXPECT_TRUE(q.proxy);  // not the reference run: compare labels it, the differences say why
  EXPECT_EQ(q.model.layers, 4);
  EXPECT_EQ(q.reference.layers, 32);
  EXPECT_EQ(q.differences.size(), 2u);

  tr::RunOptions big;
  big.ranks = 32;
  const auto b = tr::plan_run(tr::find_recipe(recipes(), "llama3.1-405b"), big);  // the reference trained 8 layers
  EXPECT_EQ(b.model.layers, 8);
  EXPECT_FALSE(b.proxy);
  ASSERT_EQ(b.differences.size(), 1u);
  EXPECT_NE(b.differences[0].find("the reference's own proxy"), std::string::npos) << b.differences[0];
}

TEST(Plan, DistributedRefusesWhatItCannotSplit) {
  const auto& r = tr::find_recipe(recipes(), "llama3.1-8b");
  auto message = [&](const tr::RunOptions& o) {
    try {
      tr::plan_run(r, o);
    } catch (const tb::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  tr::RunOptions o;
  o.ranks = 3;  // cp 2 does not divide 3 ranks
  EXPECT_NE(message(o), "no error");
  o.ranks = 8, o.ref_gpus = 16;
  EXPECT_NE(message(o).find("--ref-gpus 16 but the job has 8 ranks"), std::string::npos) << message(o);
  o.ref_gpus = 0, o.points = {2, 4};
  EXPECT_NE(message(o).find("--points"), std::string::npos) << message(o);
}

TEST(Plan, TinyIsOneDeviceMeasuredAsItIs) {
  const auto p = tr::plan_run(tr::find_recipe(recipes(), "tiny"), {});
  EXPECT_FALSE(p.proxy);
  EXPECT_EQ(p.points, (std::vector<int>{1, 2}));  // its own 2 layers, and 1 for the fit `project --from` needs
  const tr::PointTiming t{2, 0.02, 0.001};
  const auto x = tr::extrapolate(p, std::span(&t, 1));
  EXPECT_EQ(x.grad_accum, 2);  // global 4 / (micro 2 x dp 1)
  EXPECT_DOUBLE_EQ(x.step_s, 2 * 0.02 + 0.001);
  EXPECT_DOUBLE_EQ(x.tokens_per_s_per_gpu, 4.0 * 64 / x.step_s);
}

// Fine-tuning recipes (SFT and LoRA) train on packed documents (SQuAD-like by default), pretraining recipes on the
// markov tokens; --data replaces either, and the plan says so among its differences.
TEST(Plan, FineTuningRecipesTrainOnPackedData) {
  for (const char* name : {"llama3-8b-sft", "llama3-70b-sft", "tiny-sft", "llama3-8b-lora", "llama3-70b-lora",
                           "hf-llama2-70b-lora", "hf-mistral-7b-lora"}) {
    const auto& r = tr::find_recipe(recipes(), name);
    EXPECT_NE(r.task, "pretrain") << name;
    EXPECT_EQ(tr::plan_run(r, {}).data, "packed-squad") << name;
  }
  EXPECT_EQ(tr::plan_run(tr::find_recipe(recipes(), "llama3.1-8b"), {}).data, "markov");
  tr::RunOptions o;
  o.data = "packed-govreport";
  const auto p = tr::plan_run(tr::find_recipe(recipes(), "llama3-8b-sft"), o);
  EXPECT_EQ(p.data, "packed-govreport");
  EXPECT_NE(std::find(p.differences.begin(), p.differences.end(),
                      "data packed-govreport instead of the recipe's packed-squad"),
            p.differences.end());
}

TEST(Plan, TinyFitsTwoLayerCounts) {
  const auto p = tr::plan_run(tr::find_recipe(recipes(), "tiny"), {});
  const std::vector<tr::PointTiming> pts{{1, 0.012, 0.0006}, {2, 0.02, 0.001}};
  const auto x = tr::extrapolate(p, pts);
  EXPECT_NEAR(x.f1, 0.008, 1e-12);
  EXPECT_NEAR(x.f0, 0.004, 1e-12);
  EXPECT_NEAR(x.step_s, 2 * 0.02 + 0.001, 1e-12);  // the line passes through the measured 2-layer point
}

// Known numbers: points at 2 and 4 layers, se 1 ms and 2 ms, extrapolated to 32 layers. The line through two points
// is fb(L) = fb_2 (2 - L/2) + fb_4 (L/2 - 1): c = (-14, 15) at L = 32, se = sqrt(14^2 1^2 + 15^2 2^2) = sqrt(1096) ms.
TEST(Plan, UncertaintyPropagatesThroughTheFit) {
  std::vector<tr::PointTiming> pts{{2, 0.09, 0.01, 0.001}, {4, 0.13, 0.016, 0.002}};
  EXPECT_NEAR(tr::fit_standard_error(pts, 32), std::sqrt(1096.0) * 1e-3, 1e-12);
  EXPECT_NEAR(tr::fit_standard_error(pts, 3), std::sqrt(0.25 + 0.25 * 4) * 1e-3, 1e-12);  // midway: c = (1/2, 1/2)
  const auto p = tr::plan_run(tr::find_recipe(recipes(), "llama3.1-8b"), {});  // 8 GPUs, cp 2, dp 4, GA 32, L 32
  const auto x = tr::extrapolate(p, pts);
  EXPECT_NEAR(x.microbatch_se_s, std::sqrt(1096.0) * 1e-3 / 2, 1e-12);  // / (pp cp)
  EXPECT_NEAR(x.step_se_s, 32 * x.microbatch_se_s, 1e-12);              // x GA
  EXPECT_NEAR(x.tokens_per_s_per_gpu_se, x.tokens_per_s_per_gpu * x.step_se_s / x.step_s, 1e-9);
  // Least squares over three points: c_i(L) = 1/3 + (L_i - 4)(L - 4) / 8; equal se 1 ms at L = 4: sqrt(3) / 3 ms.
  pts = {{2, 0.09, 0.01, 0.001}, {4, 0.13, 0.016, 0.001}, {6, 0.17, 0.022, 0.001}};
  EXPECT_NEAR(tr::fit_standard_error(pts, 4), std::sqrt(3.0) / 3 * 1e-3, 1e-12);
  const double c2 = 1.0 / 3 - 2.0 * 28 / 8, c4 = 1.0 / 3, c6 = 1.0 / 3 + 2.0 * 28 / 8;  // at L = 32
  EXPECT_NEAR(tr::fit_standard_error(pts, 32), std::sqrt(c2 * c2 + c4 * c4 + c6 * c6) * 1e-3, 1e-12);
  const tr::PointTiming one{2, 0.02, 0.001, 0.0005};
  EXPECT_DOUBLE_EQ(tr::fit_standard_error(std::span(&one, 1), 2), 0.0005);  // the run itself
}

TEST(Plan, ExtrapolationRecoversTheLinearModel) {
  const auto p = tr::plan_run(tr::find_recipe(recipes(), "llama3.1-8b"), {});
  const double F0 = 0.05, F1 = 0.02, O0 = 0.004, O1 = 0.003;
  std::vector<tr::PointTiming> pts;
  for (int l : {2, 4, 6}) pts.push_back({l, F0 + F1 * l, O0 + O1 * l});
  const auto x = tr::extrapolate(p, pts);
  EXPECT_NEAR(x.f0, F0, 1e-12);
  EXPECT_NEAR(x.f1, F1, 1e-12);
  EXPECT_NEAR(x.o0, O0, 1e-12);
  EXPECT_NEAR(x.o1, O1, 1e-12);
  const auto& l = p.layout;  // 8 GPUs, tp 1 pp 1 cp 2 -> dp 4, micro 1, global 128 -> GA 32
  EXPECT_EQ(x.grad_accum, 32);
  const double mb = (F0 + F1 * 32) / 2, opt = (O0 + O1 * 32) / (4 * 2);
  EXPECT_NEAR(x.step_s, 32 * mb + opt, 1e-12);
  EXPECT_NEAR(x.tokens_per_s_per_gpu, double(l.global_batch) * l.seq / (x.step_s * l.gpus), 1e-9);
  EXPECT_THROW(tr::extrapolate(p, std::span(pts.data(), 1)), tb::Error);  // one point, not the whole run
}

TEST(Plan, EveryRunnableRecipePlansAValidShard) {
  for (const auto& r : recipes()) {
    if (!r.runnable()) continue;
    for (const auto& prec : r.precisions) {
      if (prec == "fp8") continue;
      tr::RunOptions o;
      o.precision = prec;
      const auto p = tr::plan_run(r, o);
      std::printf("%-20s %-4s ref %4d GPUs tp%d pp%d cp%d vp%d dp%d: shard L%d heads %d/%d ffn %d vocab %d, points %d..%d\n",
                  r.name.c_str(), prec.c_str(), p.layout.gpus, p.layout.tp, p.layout.pp, p.layout.cp, p.layout.vp,
                  p.layout.dp, p.shard.layers, p.shard.heads, p.shard.kv_heads, p.shard.ffn, p.shard.vocab,
                  p.points.front(), p.points.back());
      EXPECT_GE(p.points.size(), 1u) << r.name;
      EXPECT_LE(p.points.back(), std::max(p.shard.layers, 2)) << r.name;
    }
  }
}

std::string plan_error(const tr::Recipe& r, const tr::RunOptions& o) {
  try {
    tr::plan_run(r, o);
  } catch (const tb::Error& e) {
    return e.what();
  }
  return "no error";
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

// Grok-1 on one device: the smallest reference layout, 8 GPUs of tp 4, ep 2 (experts over the tp group: etp = tp),
// 2 layers at seq 4096. The ep rank holds 4 of the 8 experts at width 32768 / 4 and, etp = tp, every row of the
// micro-batch (its tp group's gathered tokens).
TEST(Plan, Grok1ProxyIsAnEpRankOfTheSmallestLayout) {
  const auto& r = tr::find_recipe(recipes(), "grok1-314b");
  const auto p = tr::plan_run(r, {});
  EXPECT_EQ(p.layout.gpus, 8);
  EXPECT_EQ(p.layout.tp, 4);
  EXPECT_EQ(p.layout.ep, 2);
  EXPECT_EQ(p.layout.expert_tp(), 4);
  EXPECT_EQ(p.layout.seq, 4096);
  EXPECT_EQ(p.layers, 2);
  EXPECT_EQ(p.shard.heads, 12);
  EXPECT_EQ(p.shard.kv_heads, 2);
  EXPECT_EQ(p.shard.moe.experts, 8);
  EXPECT_EQ(p.shard.moe.ep_proxy, 2);
  EXPECT_EQ(p.shard.moe.local_experts(), 4);
  EXPECT_EQ(p.shard.moe.token_share, 1);
  EXPECT_EQ(p.shard.expert_ffn(), 8192);
  EXPECT_EQ(p.points, (std::vector<int>{1, 2}));
  EXPECT_EQ(p.edp, 1);  // tp·cp·dp / (ep·etp) = 4·1·2 / 8
  EXPECT_GT(p.expert_share, 0.9);
  const std::string d = joined(p.differences);
  EXPECT_NE(d.find("4 of 8 experts (ep 2)"), std::string::npos) << d;
  EXPECT_NE(d.find("without the all-to-all and the etp all-gather"), std::string::npos) << d;
  EXPECT_NE(d.find("32768/4 = 8192"), std::string::npos) << d;
}

// 25.05 on H100: experts unsplit (etp 1), so each tp rank routes its own quarter of the tokens (token_share 4), and
// with ep 8 an ep rank holds one expert of full width.
TEST(Plan, Grok1ExpertTensorParallelOne) {
  tr::RunOptions o;
  o.release = "25.05.05", o.ref_gpus = 512;
  const auto p = tr::plan_run(tr::find_recipe(recipes(), "grok1-314b"), o);
  EXPECT_EQ(p.layout.expert_tp(), 1);
  EXPECT_EQ(p.shard.moe.token_share, 4);
  EXPECT_EQ(p.shard.moe.local_experts(), 1);
  EXPECT_EQ(p.shard.expert_ffn(), 32768);
  EXPECT_EQ(p.shard.ffn, 8192);  // a dense layer's shard (none in Grok-1)
  EXPECT_EQ(p.shard.layers, 8);  // 64 layers over pp 8
  EXPECT_EQ(p.points, (std::vector<int>{2, 4}));
  EXPECT_EQ(p.edp, 8);  // tp·cp·dp / (ep·etp) = 4·2·8 / 8
  const std::string d = joined(p.differences);
  EXPECT_NE(d.find("1/4 of the micro-batch's rows"), std::string::npos) << d;
}

// Llama 4 Maverick: 128 experts of 8192 top-1 and a shared expert of 8192 in every second layer, dense ffn 16384.
TEST(Plan, Llama4ProxyAndItsLayerPattern) {
  const auto& r = tr::find_recipe(recipes(), "llama4-maverick-400b");
  EXPECT_EQ(r.model.moe_layers(), 24);
  EXPECT_FALSE(r.model.is_moe_layer(0));
  EXPECT_TRUE(r.model.is_moe_layer(1));
  auto p = tr::plan_run(r, {});  // H100 512: tp 4, ep 128, etp 4
  EXPECT_EQ(p.shard.ffn, 4096);
  EXPECT_EQ(p.shard.moe.local_experts(), 1);
  EXPECT_EQ(p.shard.expert_ffn(), 2048);
  EXPECT_EQ(p.shard.moe.shared_ffn, 2048);
  EXPECT_EQ(p.shard.moe.token_share, 1);
  EXPECT_EQ(p.points, (std::vector<int>{2, 4}));  // whole periods: a dense and a MoE layer each
  tr::RunOptions o;
  o.points = {3, 4};
  EXPECT_NE(plan_error(r, o).find("--points 3"), std::string::npos) << plan_error(r, o);
  o.points = {2, 6};
  EXPECT_EQ(tr::plan_run(r, o).points, (std::vector<int>{2, 6}));
  o = {};
  o.gpu_model = "GB200";  // tp 1, pp 2 x vp 12, ep 64, etp 1: two experts of full width, shared of full width
  p = tr::plan_run(r, o);
  EXPECT_EQ(p.layout.gpus, 128);
  EXPECT_EQ(p.shard.moe.local_experts(), 2);
  EXPECT_EQ(p.shard.expert_ffn(), 8192);
  EXPECT_EQ(p.shard.moe.shared_ffn, 8192);
  EXPECT_EQ(p.shard.layers, 24);
}

// Mixtral 8x22B on H100: tp 4, cp 8, etp 1 at seq 65536: a quarter of the rows, the cp split extrapolated.
TEST(Plan, Mixtral8x22bShareOfTheRows) {
  const auto p = tr::plan_run(tr::find_recipe(recipes(), "mixtral-8x22b"), {});
  EXPECT_EQ(p.layout.cp, 8);
  EXPECT_EQ(p.shard.moe.token_share, 4);
  EXPECT_EQ(p.shard.moe.local_experts(), 1);
  const std::string d = joined(p.differences);
  EXPECT_NE(d.find("tp·cp/etp = 4·8/1"), std::string::npos) << d;
}

TEST(Plan, RefusesBadExpertLayouts) {
  const auto& grok = tr::find_recipe(recipes(), "grok1-314b");
  tr::RunOptions o;
  o.sets = {{"ep", "3"}};
  EXPECT_NE(plan_error(grok, o).find("experts=8 is not divisible by ep=3"), std::string::npos) << plan_error(grok, o);
  o.sets = {{"etp", "8"}};  // ep·etp = 16 on a stage of 8 GPUs
  EXPECT_NE(plan_error(grok, o).find("ep·etp = 2·8 = 16 does not divide the 8 GPUs"), std::string::npos)
      << plan_error(grok, o);
  const auto& m22 = tr::find_recipe(recipes(), "mixtral-8x22b");
  o.sets = {{"etp", "8"}};  // fits the stage (ep·etp 64), but the proxy needs etp to divide tp 4
  EXPECT_NE(plan_error(m22, o).find("etp=8 to divide tp=4"), std::string::npos) << plan_error(m22, o);
  o.sets = {{"etp", "2"}, {"ep", "4"}};  // valid: two tp ranks share an expert's rows
  const auto p = tr::plan_run(m22, o);
  EXPECT_EQ(p.shard.moe.token_share, 2);
  EXPECT_EQ(p.shard.expert_ffn(), 8192);
  EXPECT_EQ(p.shard.moe.local_experts(), 2);
  const auto& l8 = tr::find_recipe(recipes(), "llama3.1-8b");
  o.sets = {{"ep", "2"}};
  EXPECT_NE(plan_error(l8, o).find("ep=2 but the model has no experts"), std::string::npos) << plan_error(l8, o);
}

// The experts' optimizer state is sharded over the expert data-parallel group, the rest over dp·cp.
TEST(Plan, MoeOptimizerShardsTheExpertsOverEdp) {
  tr::RunOptions o;
  o.release = "25.05.05", o.ref_gpus = 512;
  const auto p = tr::plan_run(tr::find_recipe(recipes(), "grok1-314b"), o);  // dp 8, cp 2, edp 8
  const double F0 = 0.05, F1 = 0.02, O0 = 0.004, O1 = 0.003;
  std::vector<tr::PointTiming> pts;
  for (int l : p.points) pts.push_back({l, F0 + F1 * l, O0 + O1 * l});
  const auto x = tr::extrapolate(p, pts);
  const double L = 64, experts = p.expert_share * O1 * L;
  EXPECT_NEAR(x.optimizer_s, (O0 + O1 * L - experts) / (8 * 8 * 2) + experts / (8 * 8), 1e-12);
}

// MLPerf's Llama 2 70B LoRA at 8 GPUs: NVIDIA's H100 layout (tp 4, sequence parallel) unless the H200 one is asked for
// (tp 1 cp 2); --set tp=1 on the H100 layout turns sequence parallel off instead of refusing it.
TEST(Plan, GpuModelPicksItsLayoutAndTp1DropsSequenceParallel) {
  const auto& r = tr::find_recipe(recipes(), "mlperf-llama2-70b-lora");
  tr::RunOptions o;
  o.ref_gpus = 8;
  o.precision = "fp8";
  EXPECT_EQ(tr::plan_run(r, o).layout.tp, 4);
  EXPECT_TRUE(tr::plan_run(r, o).layout.sequence_parallel);
  o.gpu_model = "H200";
  const auto h200 = tr::plan_run(r, o);
  EXPECT_EQ(h200.layout.tp, 1);
  EXPECT_EQ(h200.layout.cp, 2);
  o.gpu_model = "H100";
  EXPECT_EQ(tr::plan_run(r, o).layout.tp, 4);  // the layouts naming no GPU model are H100's
  o.sets = {{"tp", "1"}, {"cp", "2"}};
  const auto set = tr::plan_run(r, o);
  EXPECT_EQ(set.layout.tp, 1);
  EXPECT_FALSE(set.layout.sequence_parallel);
  EXPECT_EQ(set.shard.heads, h200.shard.heads);
}

}  // namespace
