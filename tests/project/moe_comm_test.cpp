// Tests project/moe_comm: the expert-parallel exchanges of a MoE layer per micro-batch, by hand on the DGXC layouts of
// Grok-1 (ep 8 with experts over the tp group: the ep group spans 4 nodes; 25.05 with etp 1: one node) and Llama 4
// Maverick (ep 128 × etp 4 over 64 nodes, every second layer MoE), on the shipped DGX H100 network; none for a dense
// model.
#include "project/moe_comm.h"

#include <gtest/gtest.h>

#include "recipe/recipe.h"
#include "recipe/system.h"

namespace tr = tb::recipe;
using namespace tb::project;

namespace {
const std::vector<tr::Recipe>& recipes() {
  static const auto r = tr::load_recipes(tr::find_recipes_dir(std::nullopt));
  return r;
}

Network h100() {
  const auto systems = tr::load_systems(tr::find_references_dir(std::nullopt) / "systems");
  return network_of(*tr::match_system(systems, "H100 SXM"));
}

tr::Layout layout(const char* recipe, int gpus, const char* release = "") {
  const auto& r = tr::find_recipe(recipes(), recipe);
  auto l = tr::layout_for(r, tr::LayoutQuery(gpus, "bf16", release));
  if (l.layers <= 0) l.layers = r.model.layers;
  if (l.seq <= 0) l.seq = r.model.seq;
  return l;
}

tb::model::ModelConfig model(const char* recipe) { return tr::find_recipe(recipes(), recipe).model; }
}  // namespace

TEST(MoeComm, Grok1EpGroupAcrossNodes) {
  const Network n = h100();
  const auto l = layout("grok1-314b", 512, "24.11.1");  // tp 4, cp 2, ep 8, etp = tp = 4
  const ExpertParallelComm c = expert_parallel_comm(model("grok1-314b"), l, n);
  // T = 8192 / (4·2) = 1024 tokens, top-2 of 6144 in bf16; the ep group's 8 ranks are 4 apart: 2 per node of 8
  const double A = 1024.0 * 2 * 6144 * 2;
  EXPECT_EQ(c.ep_local, 2);
  const double a2a = 6.0 / 8 * A / (50e9 * 0.9) + 5e-6;  // 6/8 leaves the node, at the NIC's 45 GB/s
  EXPECT_NEAR(c.all_to_all_s, a2a, 1e-12);
  // etp 4 inside the node: 2 all-gathers and 2 reduce-scatters of the 4 ranks' pairs
  const double etp = 2 * (3.0 / 4 * 4 * A / 270.3e9 + 3 * 2e-6) + 2 * (3.0 / 4 * 4 * A / 274.8e9 + 3 * 2e-6);
  EXPECT_NEAR(c.etp_s, etp, 1e-12);
  EXPECT_NEAR(c.layer_s, 4 * a2a + etp, 1e-12);  // every layer is MoE
}

TEST(MoeComm, Grok1WithExpertTensorParallelOneStaysInTheNode) {
  const Network n = h100();
  const auto l = layout("grok1-314b", 512, "25.05.05");  // ep 8, etp 1: 8 consecutive ranks
  const ExpertParallelComm c = expert_parallel_comm(model("grok1-314b"), l, n);
  const double A = 1024.0 * 2 * 6144 * 2;
  EXPECT_EQ(c.ep_local, 8);
  EXPECT_NEAR(c.all_to_all_s, 7.0 / 8 * A / 270.3e9 + 2e-6, 1e-12);  // the all-gather's busbw: none given for it
  EXPECT_EQ(c.etp_s, 0);
  EXPECT_NEAR(c.layer_s, 4 * c.all_to_all_s, 1e-15);
}

TEST(MoeComm, Llama4EverySecondLayer) {
  const Network n = h100();
  const auto l = layout("llama4-maverick-400b", 512);  // tp 4, ep 128, etp 4: 512 ranks, 2 of the ep group per node
  const ExpertParallelComm c = expert_parallel_comm(model("llama4-maverick-400b"), l, n);
  const double A = 8192.0 / 4 * 1 * 5120 * 2;
  EXPECT_EQ(c.ep_local, 2);
  EXPECT_NEAR(c.all_to_all_s, 126.0 / 128 * A / 45e9 + 5e-6, 1e-12);
  EXPECT_NEAR(c.layer_s, 0.5 * (4 * c.all_to_all_s + c.etp_s), 1e-15);  // 24 of the 48 layers
}

TEST(MoeComm, NoneForADenseModelOrOneRank) {
  const Network n = h100();
  EXPECT_EQ(expert_parallel_comm(model("llama3.1-70b"), layout("llama3.1-70b", 64), n).layer_s, 0);
  auto l = layout("mixtral-8x7b", 64);
  l.ep = 1;
  EXPECT_EQ(expert_parallel_comm(model("mixtral-8x7b"), l, n).layer_s, 0);  // tp 1, ep 1: nothing exchanged
}
