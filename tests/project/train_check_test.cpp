// Tests project/train_check on what ships (golden): the H200 proxies and the 2 × H200 `train --gpus 2` records of
// references/measured/h200x2-train (data, tensor, pipeline and context parallel, BF16 and FP8): each
// record is read with its layout and op profile, modelled as trainbench runs it, and lands within 10% of its measured
// step (docs/PROJECTION.md "Two GPUs measured"); a model no recipe starts from is skipped with its reason.
#include "project/train_check.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "recipe/recipe.h"
#include "recipe/system.h"

namespace {
namespace fs = std::filesystem;
using namespace tb::project;

struct Golden {
  const char* folder;              // under references/measured
  const char* layout;              // as the record says it
  double error, comm_modelled_ms;  // modelled / measured step − 1; the model's exposed communication + bubble
};
// Measured on 2 × H200 NV18, 2026-11-30 (bench/RESULTS.md); modelled with the shipped system files and calibration.
const Golden kGolden[] = {
    {"h200x2-train/8b-L8-2gpu", "dp2", -0.035, 9.6},
    {"h200x2-train/70b-L4-tp2", "tp2", -0.098, 7.9},
    {"h200x2-train/70b-L4-gb4-pp2", "pp2", +0.056, 220.7},
    {"h200x2-train/8b-L8-s16k-cp2", "cp2", -0.094, 11.9},
    {"h200x2-train/8b-L8-fp8-2gpu", "dp2 fp8", -0.041, 9.6},
    {"h200x2-train/small-fp8-tp2", "tp2 (small)", 0, 0},
};
}  // namespace

TEST(TrainCheck, ShippedTwoGpuStepsAgainstTheModel) {
  const auto recipes = tb::recipe::load_recipes(tb::recipe::find_recipes_dir(std::nullopt));
  const fs::path refs = tb::recipe::find_references_dir(std::nullopt), results = refs / "measured";
  std::vector<fs::path> paths{results / "h200-recipes", results / "h200-fp8",
                              results / "h200-fp8-more"};
  for (const Golden& g : kGolden) paths.push_back(results / g.folder);
  const Inputs in = load_inputs(paths);
  ASSERT_EQ(in.trains.size(), std::size(kGolden));  // the 1-GPU train records and rank_steps are not read
  const auto systems = tb::recipe::load_systems(refs / "systems");
  const Context h100 = make_context(recipes, in, systems, *tb::recipe::match_system(systems, "H100 SXM"));
  ASSERT_NE(h100.source, nullptr);
  EXPECT_EQ(h100.source->name, "H200 SXM");
  const Context h200 = make_context(recipes, in, systems, *h100.source);
  const auto checks = check_trains(in.trains, h200);
  std::printf("%s", render_train_checks(checks).c_str());
  ASSERT_EQ(checks.size(), std::size(kGolden));
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const Golden& g = kGolden[i];
    const TrainCheck& c = checks[i];
    EXPECT_EQ(c.run->layout.gpus, 2) << g.folder;
    if (g.comm_modelled_ms == 0) {  // the `small` test model: no recipe
      EXPECT_NE(c.skipped.find("no recipe starts from model 'small'"), std::string::npos) << c.skipped;
      continue;
    }
    ASSERT_TRUE(c.skipped.empty()) << g.folder << ": " << c.skipped;
    EXPECT_NEAR(c.error, g.error, 0.003) << g.folder << " " << g.layout;
    EXPECT_LT(std::abs(c.error), 0.10) << g.folder;
    EXPECT_NEAR(1e3 * c.comm_modelled_s, g.comm_modelled_ms, 0.1) << g.folder;
    EXPECT_DOUBLE_EQ(c.p.hardware_factor, 1);  // modelled on the GPU it ran on
    EXPECT_NEAR(c.p.tokens_per_s_per_gpu * c.p.step_s, c.run->tokens_per_s_per_gpu * c.run->step_s,
                1e-6 * c.run->tokens_per_s_per_gpu * c.run->step_s);  // the same tokens per GPU and step
  }
  // the layouts as written by `train`: "dp1 cp1 pp1 tp2 vp1 sp", or none (data parallel over every GPU)
  EXPECT_EQ(checks[0].run->layout.dp, 2);
  EXPECT_EQ(checks[1].run->layout.tp, 2);
  EXPECT_TRUE(checks[1].run->layout.sequence_parallel);
  EXPECT_EQ(checks[2].run->layout.pp, 2);
  EXPECT_EQ(checks[3].run->layout.cp, 2);
  EXPECT_EQ(checks[3].run->recompute, "selective");
  EXPECT_EQ(checks[4].run->precision, "fp8");
  // the profile's collectives: the tensor-parallel all-gathers and reduce-scatters, 4 + 4 a layer
  EXPECT_TRUE(checks[1].profiled);
  EXPECT_NEAR(1e3 * checks[1].comm_measured_s, 6.02 + 7.31 + 0.003, 0.01);
}
