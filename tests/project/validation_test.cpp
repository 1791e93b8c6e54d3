// Tests project/validate on what ships: the published H100 references (references/dgxc-h100.toml), the H200
// proxies of references/measured/h200-{recipes,fp8,fp8-more} (BF16 and FP8 of every acceptance recipe) and the
// systems' [network]/[compute]/[projection]; asserts the acceptance of docs/PROJECTION.md (Llama 3.1 8B/70B/405B,
// Nemotron-4 15B/340B, GPT-3 175B, BF16 and FP8): on the primary rows (releases 25.04.02 and 25.05.05, the layouts
// the proxies measured) max |error| <= 15%, median <= 8%, weak-scaling efficiency within 5 points (every recipe and
// precision since the straggler term); what is achieved is tighter and asserted too, so a regression shows. The
// calibration constants of references/systems/h100.toml are the fit's; how they hold out of sample (errors and
// weak-scaling gaps of the recipes left out) is asserted as achieved.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <set>

#include "project/validate.h"
#include "recipe/plan.h"
#include "recipe/reference.h"
#include "recipe/system.h"

namespace {
namespace fs = std::filesystem;

struct Shipped {
  std::vector<tb::recipe::Recipe> recipes;
  std::vector<tb::recipe::ReferenceRow> rows;
  std::vector<tb::recipe::SystemRef> systems;
  tb::project::Context ctx;
  std::vector<tb::project::Case> cases;
};

const Shipped& shipped() {
  static Shipped* s = [] {
    auto* x = new Shipped;
    x->recipes = tb::recipe::load_recipes(tb::recipe::find_recipes_dir(std::nullopt));
    const fs::path refs = tb::recipe::find_references_dir(std::nullopt);
    x->rows = tb::recipe::load_reference_dir(refs);
    x->systems = tb::recipe::load_systems(refs / "systems");
    const fs::path results = refs / "measured";
    const std::vector<fs::path> paths{results / "h200-recipes", results / "h200-fp8",
                                      results / "h200-fp8-more"};
    const auto in = tb::project::load_inputs(paths);
    x->ctx = tb::project::make_context(x->recipes, in, x->systems, *tb::recipe::match_system(x->systems, "H100 SXM"));
    x->cases = tb::project::reference_cases(x->recipes, x->rows, x->ctx, nullptr);
    return x;
  }();
  return *s;
}
}  // namespace

const char* const kAcceptance[] = {"llama3.1-8b",   "llama3.1-70b",   "llama3.1-405b",
                                   "nemotron4-15b", "nemotron4-340b", "gpt3-175b"};

TEST(Validation, AcceptanceOnTheShippedReferences) {
  const Shipped& s = shipped();
  const auto v = tb::project::validate(s.cases, s.ctx);
  std::printf("%s", tb::project::render_validation(v).c_str());
  // every acceptance recipe is there, in both precisions, at every published count of its primary releases
  std::set<std::pair<std::string, std::string>> seen;
  for (const auto& p : v.points)
    if (p.c.primary) seen.insert({p.c.recipe->name, p.c.row->precision});
  for (const char* r : kAcceptance)
    for (const char* precision : {"bf16", "fp8"}) EXPECT_TRUE(seen.count({r, precision})) << r << " " << precision;
  EXPECT_EQ(v.primary.n, 62);
  EXPECT_LE(v.primary.max, 0.15);  // the projection's acceptance bound, both precisions
  EXPECT_LE(v.primary.median, 0.08);
  const auto& bf16 = v.primary_by_precision.at("bf16");
  const auto& fp8 = v.primary_by_precision.at("fp8");
  EXPECT_EQ(bf16.n, 31);
  EXPECT_EQ(fp8.n, 31);
  EXPECT_LE(v.primary.max, 0.12);  // achieved (docs/PROJECTION.md): max 11.9%, median 2.7%
  EXPECT_LE(v.primary.median, 0.028);
  EXPECT_LE(bf16.max, 0.042);  // BF16 max 4.1%, median 2.3%
  EXPECT_LE(bf16.median, 0.024);
  EXPECT_LE(fp8.max, 0.12);  // FP8 max 11.9% (Llama 3.1 70B at 64 GPUs), median 4.7%
  EXPECT_LE(fp8.median, 0.048);
  EXPECT_LE(v.all.max, 0.20);  // older releases too (other software, some other layouts): max 19.5%
  for (const auto& p : v.points) {
    if (!p.c.primary) continue;
    EXPECT_NEAR(p.error, 0, 0.15) << p.c.recipe->name << " " << p.c.row->precision << " " << p.c.release << " "
                                  << p.c.row->gpus;
  }
  int checked = 0;
  double worst = 0;
  for (const auto& c : v.scaling) {
    if (!c.primary) continue;
    ++checked;
    EXPECT_LE(std::abs(c.points()), 5.0) << c.recipe << " " << c.precision << " " << c.release;
    worst = std::max(worst, std::abs(c.points()));
  }
  EXPECT_EQ(checked, 12);  // six recipes × two precisions (25.04.02)
  EXPECT_LE(worst, 3.8);   // achieved: −1.6 (Llama 3.1 70B BF16) to +3.7 (GPT-3 175B FP8; +5.3 without stragglers)
}

TEST(Validation, CalibrationIsTheFitAndHowItHoldsOutOfSample) {
  const Shipped& s = shipped();
  const auto cv = tb::project::cross_validate(s.cases, s.ctx);
  std::printf("%s", tb::project::render_cross_validation(cv).c_str());
  // the shipped constants are the fit on all primary rows (grid steps 0.005, 0.05 and 5 ms)
  EXPECT_NEAR(cv.all.cal.reference_efficiency, s.ctx.cal.reference_efficiency, 0.0026);
  EXPECT_NEAR(cv.all.cal.overlap_cost, s.ctx.cal.overlap_cost, 0.026);
  EXPECT_NEAR(cv.all.cal.straggler_sigma_s, s.ctx.cal.straggler_sigma_s, 0.0026);
  EXPECT_GT(s.ctx.cal.straggler_sigma_s, 0);
  EXPECT_LE(cv.all.shape.max, 0.04);  // the weak-scaling shape it was fitted to: max 3.9%
  EXPECT_EQ(cv.splits.size(), 24u);  // 20 halves of the six recipes, even and odd rows, BF16 and FP8 rows
  for (const auto& sp : cv.splits) {
    EXPECT_GT(sp.fit.cal.straggler_sigma_s, 0) << sp.trained_on;  // every split finds stragglers (10 to 80 ms)
    EXPECT_LE(sp.held_out_points, 5.0) << sp.trained_on;  // the weak scaling of the rows left out within 5 points
    if (sp.trained_on == "bf16 rows") {                    // FP8 predicted with constants fitted on BF16 alone
      EXPECT_LE(sp.held_out.max, 0.135);
      EXPECT_LE(sp.held_out.median, 0.051);
    }
  }
  // achieved (docs/PROJECTION.md): median of the held-out medians 5.1% (4.0% without stragglers), worst held-out
  // weak-scaling gap 4.4 points; fit on GPT-3, Llama 3.1 70B and Nemotron-4 15B the constants land on a corner of the
  // e/c valley (e 1.07, c 1.00) and the other three recipes miss the acceptance (median 12.5%, max 18.2%); fit on
  // GPT-3, Llama 3.1 405B and Nemotron-4 340B the held-out median is 8.7%; the other 22 splits stay within 15% max
  // and 8% median
  EXPECT_LE(cv.median_of_medians, 0.052);
  EXPECT_LE(cv.worst_median, 0.13);
  EXPECT_LE(cv.worst_max, 0.185);
  EXPECT_LE(cv.worst_points, 4.5);
  int outside = 0;
  for (const auto& sp : cv.splits) outside += sp.held_out.max > 0.15 || sp.held_out.median > 0.08;
  EXPECT_LE(outside, 2);
}

TEST(Validation, WhatIsSkippedAndWhy) {
  const Shipped& s = shipped();
  std::vector<tb::project::Skip> skipped;
  tb::project::reference_cases(s.recipes, s.rows, s.ctx, &skipped);
  EXPECT_FALSE(skipped.empty());
  for (const auto& k : skipped) {
    EXPECT_FALSE(k.reason.empty());
    EXPECT_NE(k.row->gpu, "GB200");  // other GPU models are not this target's rows at all
    for (const char* r : kAcceptance) EXPECT_NE(k.row->recipe, r) << k.reason;  // every acceptance row is projected
  }
}

// A mixture of experts before its proxy is measured: synthetic Grok-1 and Llama 4 proxies (the one-GPU proxies `run`
// would measure: Grok-1's 8-GPU layout, Llama 4's 512-GPU one, BF16 and FP8) whose layer and head times are the
// shipped dense cost model's for their shards and whose optimizer is the 70B proxy's per parameter. What the
// projection then predicts for the published MoE rows is the dense GEMM rates carried to the experts (grouped GEMMs at
// the rate of dense ones of the same FLOPs) plus the modelled all-to-alls: printed per row (docs/PROJECTION.md quotes
// it until measured proxies replace these: +0.3% to +17% in BF16, up to +36% in FP8, where the dense FP8 GEMM rate
// is far above what the 24.11 references' MoE layers reached), and checked for what the model must get right
// whatever the rates.
TEST(Validation, MixtureOfExpertsFromSyntheticProxies) {
  const Shipped& s = shipped();
  tb::project::Context ctx = s.ctx;
  std::vector<tb::project::Skip> before;
  tb::project::reference_cases(s.recipes, s.rows, ctx, &before);
  int moe_skipped = 0;
  for (const auto& k : before)
    if (k.row->recipe == "grok1-314b" || k.row->recipe == "llama4-maverick-400b") {
      ++moe_skipped;
      EXPECT_NE(k.reason.find("measurement of this mixture of experts"), std::string::npos) << k.reason;
    }
  EXPECT_EQ(moe_skipped, 42);  // 40 Grok-1 and 2 Llama 4 H100 rows: a dense family's proxies do not time MoE layers
  for (const char* name : {"grok1-314b", "llama4-maverick-400b"})
    for (const char* precision : {"bf16", "fp8"}) {
      const auto& r = tb::recipe::find_recipe(s.recipes, name);
      tb::recipe::RunOptions o;
      o.precision = precision;
      const auto plan = tb::recipe::plan_run(r, o);
      tb::project::Measurement m;
      m.where = std::string("synthetic:") + name, m.recipe = name, m.precision = precision, m.release = r.release;
      m.gpu = ctx.runs.front().gpu, m.layout = plan.layout;
      const auto& rates = ctx.cost_model(precision).rates;
      tb::model::ModelConfig shape = r.model;
      shape.layers = plan.layout.layers, shape.seq = plan.layout.seq;
      m.f1_s = rates.time_s(tb::project::proxy_layer_work(m, ctx));
      m.f0_s = rates.time_s(tb::project::head_work(shape, plan.layout.tp, plan.layout.micro_batch, plan.layout.seq));
      const tb::project::Measurement* dense = nullptr;
      for (const auto& d : ctx.runs)
        if (d.recipe == "llama3.1-70b" && d.precision == precision) dense = &d;
      ASSERT_NE(dense, nullptr);
      const auto& r70 = tb::recipe::find_recipe(s.recipes, "llama3.1-70b");
      m.o1_s = dense->o1_s / tb::project::layer_params(r70.model, dense->layout.tp).total() *
               tb::project::layer_params(tb::project::period_model(shape), plan.layout.tp, plan.layout.ep,
                                         plan.layout.expert_tp())
                   .total();
      m.o0_s = dense->o0_s * tb::project::embedding_params(shape, plan.layout.tp) /
               tb::project::embedding_params(r70.model, dense->layout.tp);
      ctx.runs.push_back(m);
    }
  std::vector<tb::project::Case> moe;
  for (const auto& c : tb::project::reference_cases(s.recipes, s.rows, ctx, nullptr))
    if (c.recipe->model.moe.enabled()) moe.push_back(c);
  ASSERT_EQ(moe.size(), 42u);
  const auto v = tb::project::validate(moe, ctx);
  std::printf("%s", tb::project::render_validation(v).c_str());
  for (const auto& p : v.points) {
    std::printf("%-21s %-4s %-9s %5d GPUs: all-to-alls %.1f%% of the step exposed (%d of the ep group per node), "
                "DP %.1f%%\n",
                p.c.recipe->name.c_str(), p.c.row->precision.c_str(), p.c.release.c_str(), p.c.row->gpus,
                100 * p.p.ep_exposed_s / p.p.step_s, p.p.ep_per_domain, 100 * p.p.dp_exposed_s / p.p.step_s);
    EXPECT_NE(p.p.anchor_kind, tb::project::AnchorKind::same_family);
    EXPECT_GT(p.p.ep_exposed_s, 0) << p.c.row->where;  // every published layout has ep > 1
    EXPECT_LT(std::abs(p.error), 0.40) << p.c.recipe->name << " " << p.c.row->precision << " " << p.c.release << " "
                                       << p.c.row->gpus;
  }
  // Grok-1 24.11 at 512 GPUs: the ep group (8 ranks, experts over tp 4) spans 4 nodes, so its all-to-alls cross them;
  // in 25.05 (etp 1) it stays in one node
  for (const auto& p : v.points) {
    if (p.c.recipe->name == "grok1-314b" && p.c.row->gpus == 512 && p.c.row->precision == "bf16") {
      EXPECT_EQ(p.p.ep_per_domain, p.c.layout.expert_tp() == 1 ? 8 : 2) << p.c.release;
    }
  }
}
