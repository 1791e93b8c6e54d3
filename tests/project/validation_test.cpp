// Tests project/validate on what ships: the published H100 references (references/dgxc-h100.toml), the H200
// proxies of bench/results/2026-11-30-h200-recipes and the systems' [network]/[compute]/[projection]; asserts the
// acceptance of docs/PROJECTION.md (Llama 3.1 8B/70B/405B, Nemotron-4 15B/340B, GPT-3 175B, BF16): on the primary
// rows (releases 25.04.02 and 25.05.05, the layouts the proxies measured) max |error| <= 15%, median <= 8%,
// weak-scaling efficiency within 5 points; what is achieved is tighter and asserted too, so a regression shows. The
// calibration constants of references/systems/h100.toml are the fit's, and they hold out of sample.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <set>

#include "project/validate.h"
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
    const fs::path from = refs.parent_path() / "bench/results/2026-11-30-h200-recipes";
    const std::vector<fs::path> paths{from};
    const auto in = tb::project::load_inputs(paths);
    x->ctx = tb::project::make_context(x->recipes, in, x->systems, *tb::recipe::match_system(x->systems, "H100 SXM"));
    x->cases = tb::project::reference_cases(x->recipes, x->rows, x->ctx, nullptr);
    return x;
  }();
  return *s;
}
}  // namespace

TEST(Validation, AcceptanceOnTheShippedReferences) {
  const Shipped& s = shipped();
  const auto v = tb::project::validate(s.cases, s.ctx);
  std::printf("%s", tb::project::render_validation(v).c_str());
  // every acceptance recipe is there, at every published BF16 count of its primary releases
  std::set<std::string> recipes;
  for (const auto& p : v.points)
    if (p.c.primary) recipes.insert(p.c.recipe->name);
  for (const char* r : {"llama3.1-8b", "llama3.1-70b", "llama3.1-405b", "nemotron4-15b", "nemotron4-340b", "gpt3-175b"})
    EXPECT_TRUE(recipes.count(r)) << r;
  EXPECT_LE(v.primary.max, 0.15);  // the acceptance
  EXPECT_LE(v.primary.median, 0.08);
  EXPECT_LE(v.primary.max, 0.09);  // achieved (docs/PROJECTION.md): max 7.8%, median 2.6%
  EXPECT_LE(v.primary.median, 0.03);
  EXPECT_LE(v.all.max, 0.13);  // older releases too (other software): max 12.4%
  for (const auto& p : v.points)
    EXPECT_NEAR(p.error, 0, 0.15) << p.c.recipe->name << " " << p.c.release << " " << p.c.row->gpus;
  for (const auto& c : v.scaling)
    if (c.primary) {
      EXPECT_LE(std::abs(c.points()), 5.0) << c.recipe << " " << c.release;
    }
}

TEST(Validation, CalibrationIsTheFitAndHoldsOutOfSample) {
  const Shipped& s = shipped();
  const auto cv = tb::project::cross_validate(s.cases, s.ctx);
  std::printf("%s", tb::project::render_cross_validation(cv).c_str());
  // the shipped constants are the fit on all primary rows (grid steps 0.005 and 0.05)
  EXPECT_NEAR(cv.all.cal.reference_efficiency, s.ctx.cal.reference_efficiency, 0.0026);
  EXPECT_NEAR(cv.all.cal.overlap_cost, s.ctx.cal.overlap_cost, 0.026);
  EXPECT_EQ(cv.splits.size(), 22u);  // 20 halves of the six recipes, even and odd rows
  EXPECT_LE(cv.worst_max, 0.15);     // fit on any three recipes, the other three stay within the acceptance
  EXPECT_LE(cv.worst_median, 0.08);
  EXPECT_LE(cv.median_of_medians, 0.05);
}

TEST(Validation, WhatIsSkippedAndWhy) {
  const Shipped& s = shipped();
  std::vector<tb::project::Skip> skipped;
  tb::project::reference_cases(s.recipes, s.rows, s.ctx, &skipped);
  int fp8 = 0;
  for (const auto& k : skipped) {
    EXPECT_FALSE(k.reason.empty());
    EXPECT_NE(k.row->gpu, "GB200");  // other GPU models are not this target's rows at all
    fp8 += k.reason == "no fp8 measurement";
  }
  EXPECT_GT(fp8, 0);  // FP8 rows wait for an FP8 proxy
}
