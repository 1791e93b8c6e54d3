// Tests the CUDA trainer's memory estimate (train/memory_cuda.cpp; nothing is allocated, but the norm kernels' occupancy
// sizes a workspace, so it needs the driver) for LoRA against full training at the same shape: Llama 3.1 8B's shapes
// at 8 layers, seq 4096, micro-batch 1, adapters of rank 16 on qkv, o, up and down, BF16 and FP8 (the frozen base cast
// to E4M3 once), each recompute mode; and the LoRA recipes' one-GPU proxies (their shards at 4 layers):
//   a LoRA step needs at most 0.45 of the full-training step's memory: no gradient, master weights or moments for the
//   base (those of the adapters are under 1% of full training's); the base's BF16 weights and the activations stay.
#include <gtest/gtest.h>

#include <filesystem>

#include "../support/source_path.h"
#include "bench/sysinfo.h"
#include "model/lora.h"
#include "recipe/plan.h"
#include "train/trainer.h"

namespace tb::train {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (bench::visible_gpu_count() == 0) GTEST_SKIP() << bench::no_gpu_reason()

void expect_lora_within(const TrainSpec& lora, double share, const std::string& what) {
  TrainSpec full = lora;
  full.lora = {};
  if (full.model.config) full.model.config->lora = {};
  const MemoryEstimate f = estimate_memory(full, resolve_model(full)), l = estimate_memory(lora, resolve_model(lora));
  EXPECT_LE(l.total(), share * f.total()) << what << ": LoRA " << l.parts_gib() << "; full " << f.parts_gib();
  EXPECT_LT(l.grads + l.master + l.moments, 0.01 * (f.grads + f.master + f.moments)) << what;
}

TEST(MemoryLora, AtMostPoint45OfFullTrainingAtTheSameShape) {
  SKIP_WITHOUT_GPU();
  for (const Precision p : {Precision::bf16, Precision::fp8})
    for (const model::Recompute rc : {model::Recompute::none, model::Recompute::selective, model::Recompute::full}) {
      TrainSpec s;
      s.model.preset = "llama3.1-8b";
      s.model.layers = 8;
      s.model.seq = 4096;
      s.run.device = Device::cuda;
      s.batch.micro = 1;
      s.precision.linear = p;
      s.memory.recompute = rc;
      s.lora.rank = 16;
      s.lora.targets = model::parse_lora_targets("qkv,o,up,down");
      expect_lora_within(s, 0.45, std::string(p == Precision::fp8 ? "fp8" : "bf16") + " recompute " +
                                      std::to_string(int(rc)));
    }
}

TEST(MemoryLora, TheLoraRecipesProxiesAtMostPoint45OfFullTraining) {
  SKIP_WITHOUT_GPU();
  const auto recipes =
      recipe::load_recipes(testing_support::source_path(__FILE__).parent_path().parent_path().parent_path() / "recipes");
  int seen = 0;
  for (const recipe::Recipe& r : recipes) {
    if (r.task != "lora") continue;
    ++seen;
    const recipe::RunPlan plan = recipe::plan_run(r, {});
    TrainSpec s;
    s.model.config = plan.shard;
    s.model.layers = 4;
    s.run.device = Device::cuda;
    s.batch.micro = plan.layout.micro_batch;
    const model::LoraConfig& l = plan.shard.lora;
    ASSERT_TRUE(l.enabled()) << r.name;
    s.lora = {l.rank, l.alpha, l.dropout, l.targets, false};
    expect_lora_within(s, 0.45, r.name);
  }
  EXPECT_EQ(seen, 4);
}

}  // namespace
}  // namespace tb::train
