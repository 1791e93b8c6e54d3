// Tests project/step_model: the step assembled from its terms on a synthetic measurement (hardware factor 1,
// known network), the overlap rules at overlap cost 0 and 1, the choice of the measurement that anchors a
// recipe, the layer time from the cost model or the anchor, the compute-rate correction, FP8's communication,
// the straggler delay (the expected maximum of n normals, growing with the data-parallel replicas),
// trainbench's own multi-GPU step, NVLink bandwidths measured on 2 GPUs overriding the system file's, and a mixture of
// experts' terms (the exposed all-to-alls, the experts' gradients over the expert data-parallel group).
#include "project/step_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numbers>

#include "core/error.h"
#include "recipe/recipe.h"
#include "recipe/system.h"

using namespace tb::project;
namespace fs = std::filesystem;

namespace {
const std::vector<tb::recipe::Recipe>& recipes() {
  static const auto r = tb::recipe::load_recipes(tb::recipe::find_recipes_dir(std::nullopt));
  return r;
}

Measurement measured(const std::string& recipe, int tp, int cp, int mb, int seq, double f1 = 0.02, double f0 = 0.02,
                     const std::string& precision = "bf16") {
  Measurement m;
  m.where = "synthetic:1", m.recipe = recipe, m.precision = precision, m.release = "25.04.02", m.gpu = "X";
  m.layout.tp = tp, m.layout.cp = cp, m.layout.micro_batch = mb, m.layout.seq = seq, m.layout.layers = 8;
  m.f1_s = f1, m.f0_s = f0, m.o0_s = 0.004, m.o1_s = 0.0015;
  return m;
}

tb::recipe::SystemRef target_system() {
  tb::recipe::SystemRef s;
  s.name = "X100", s.file = "x100.toml", s.peak_bf16 = 1000, s.peak_fp8 = 2000;
  return s;
}

Context context(std::vector<Measurement> runs, double overlap_cost) {
  static const tb::recipe::SystemRef target = target_system();
  Context c;
  c.recipes = &recipes();
  c.runs = std::move(runs);
  c.cost["bf16"].rates = {700, 500, 4.0};
  c.cost["fp8"].rates = {1200, 500, 4.0};
  c.layer_time = LayerTime::measured;  // the anchor's layer time: the assembly is checked against it
  c.source_gemm_tflops = c.target_gemm_tflops = 800;
  c.source_membw_tbps = c.target_membw_tbps = 4.0;
  c.target = &target;
  c.net.domain_gpus = 8;
  c.net.nvlink = {300, 250, 250, 350, 0};
  c.net.scaleout = {45, 45, 45, 45, 0};
  c.cal = {1.0, overlap_cost};
  return c;
}

const Rates& rates(const Context& c, const char* precision = "bf16") { return c.cost_model(precision).rates; }

tb::recipe::Layout layout70b(int gpus, const char* precision = "bf16") {
  const auto& r = tb::recipe::find_recipe(recipes(), "llama3.1-70b");
  auto l = tb::recipe::layout_for(r, tb::recipe::LayoutQuery(gpus, precision, "25.04.02"));
  if (l.layers <= 0) l.layers = r.model.layers;
  if (l.seq <= 0) l.seq = r.model.seq;
  return l;
}
}  // namespace

TEST(StepModel, AssemblesTheStepFromItsTerms) {
  const auto& r = tb::recipe::find_recipe(recipes(), "llama3.1-70b");
  const auto l = layout70b(64);  // tp4 pp4 cp2 vp5 dp2, GBS 128: GA 64
  for (double c : {0.0, 1.0}) {
    const Context ctx = context({measured("llama3.1-70b", 4, 2, 1, 8192)}, c);
    const Projection p = project(r, l, "bf16", ctx, tb::recipe::Convention::full);
    EXPECT_EQ(p.grad_accum, 64);
    EXPECT_EQ(p.anchor_kind, AnchorKind::same_shard);
    // the same shard, with sequence parallelism: the proxy's norms and residual adds on s/tp rows
    const Work proxy = layer_work(r.model, 4, 1, 8192), sp = layer_work(r.model, 4, 1, 8192, {false, true});
    EXPECT_DOUBLE_EQ(p.layer_scale, rates(ctx).time_s(sp) / rates(ctx).time_s(proxy));
    EXPECT_LT(p.layer_scale, 1);
    EXPECT_GT(p.layer_scale, 0.97);
    EXPECT_DOUBLE_EQ(p.hardware_factor, 1);
    EXPECT_DOUBLE_EQ(p.layer_s, 0.02 * p.layer_scale);
    // the last rank holds 20 layers and the head; cp 2 halves each micro-batch
    EXPECT_NEAR(p.compute_s, 64 * (20 * p.layer_s + 0.02) / 2, 1e-12);
    EXPECT_NEAR(p.bubble_s, 3.0 / 5 * p.microbatch_s, 1e-12);
    EXPECT_NEAR(p.microbatch_s * 64, p.compute_s + p.tp_exposed_s + p.cp_exposed_s, 1e-9);
    if (c == 0) {  // perfect overlap: TP and CP fit their windows, nothing shows
      EXPECT_EQ(p.tp_exposed_s, 0);
      EXPECT_EQ(p.cp_exposed_s, 0);
    } else {  // no overlap: all of it shows
      EXPECT_NEAR(p.tp_exposed_s, p.tp_comm_s, 1e-12);
      EXPECT_NEAR(p.cp_exposed_s, p.cp_comm_s, 1e-12);
      EXPECT_NEAR(p.dp_exposed_s, p.dp_reduce_scatter_s + p.dp_all_gather_s, 1e-12);
    }
    // TP: per layer 6 all-gathers + 4 reduce-scatters of b·(s/cp)·h·2 bytes over 4 NVLink ranks (+ 2 + 2 for the head)
    const double A = 1.0 * 4096 * 8192 * 2;
    const double per = 6 * 0.75 * A / 250e9 + 4 * 0.75 * A / 250e9;
    EXPECT_NEAR(p.tp_comm_s, 64 * (20 * per + 2 * 0.75 * A / 250e9 + 2 * 0.75 * A / 250e9), 1e-9);
    const double step =
        p.compute_s + p.tp_exposed_s + p.cp_exposed_s + p.bubble_s + p.pp_exposed_s + p.dp_exposed_s + p.optimizer_s;
    EXPECT_NEAR(p.step_s, step, 1e-9);
    EXPECT_EQ(p.straggler_s, 0);  // no straggler constant in this context
    EXPECT_NEAR(p.tokens_per_s_per_gpu, 128.0 * 8192 / (p.step_s * 64), 1e-9);
    EXPECT_NEAR(p.mfu, p.tflops_per_gpu / 1000, 1e-12);
  }
}

// MLPerf's Llama 2 70B LoRA at 8 H200 (tp 1, cp 2, dp 4): the base is frozen, so data parallel reduces and gathers
// the adapters alone (r 16 on qkv and o: 16·(8192 + 10240) + 16·(8192 + 8192) per layer, all whole at tp 1), in BF16.
TEST(StepModel, LoraReducesItsAdaptersOnly) {
  const auto& r = tb::recipe::find_recipe(recipes(), "mlperf-llama2-70b-lora");
  tb::recipe::LayoutQuery q(8, "fp8", "", "H200");
  const auto l = tb::recipe::layout_for(r, q);
  ASSERT_EQ(l.tp, 1);
  ASSERT_EQ(l.cp, 2);
  const Context ctx = context({measured("mlperf-llama2-70b-lora", 1, 2, 1, 8192, 0.03, 0.02, "fp8")}, 0.0);
  const Projection p = project(r, l, "fp8", ctx, tb::recipe::Convention::full);
  const double adapters = 80.0 * 16 * ((8192 + 10240) + (8192 + 8192));
  const double buckets = std::ceil(adapters / 40e6);
  const double bytes = 2 * adapters / buckets;  // bf16, over dp·cp = 8 ranks of one node
  EXPECT_NEAR(p.dp_reduce_scatter_s, buckets * group_time_s(Coll::reduce_scatter, bytes, 8, 8, ctx.net), 1e-12);
  EXPECT_NEAR(p.dp_all_gather_s, buckets * group_time_s(Coll::all_gather, bytes, 8, 8, ctx.net), 1e-12);
  EXPECT_LT(p.dp_reduce_scatter_s, 0.01 * p.compute_s);
}

// Grok-1 at 512 GPUs in 25.05's layout (tp 4, pp 8, cp 2, ep 8, etp 1; dp 8) from a measurement of that shard.
TEST(StepModel, MixtureOfExpertsExchangesAndExpertDataParallel) {
  const auto& r = tb::recipe::find_recipe(recipes(), "grok1-314b");
  auto l = tb::recipe::layout_for(r, tb::recipe::LayoutQuery(512, "bf16", "25.05.05"));
  ASSERT_EQ(l.expert_tp(), 1);
  Measurement m = measured("grok1-314b", 4, 2, 1, 8192, 0.03, 0.02);
  m.layout.ep = 8, m.layout.etp = 1;
  Context ctx = context({m}, 0.0);
  ctx.net.nvlink.all_to_all_gbps = 250, ctx.net.scaleout.all_to_all_gbps = 45;
  const Projection p = project(r, l, "bf16", ctx, tb::recipe::Convention::causal);
  EXPECT_EQ(p.anchor_kind, AnchorKind::same_shard);
  EXPECT_EQ(p.grad_accum, 128);
  // per micro-batch on a rank of 8 layers: 4 all-to-alls a layer over the 8 ranks of a node, of T·k·h·2 bytes
  const double A = 8192.0 / 8 * 2 * 6144 * 2, a2a = 7.0 / 8 * A / 250e9;
  EXPECT_EQ(p.ep_per_domain, 8);
  EXPECT_NEAR(p.ep_comm_s, 128 * 8 * 4 * a2a, 1e-9);
  EXPECT_DOUBLE_EQ(p.ep_exposed_s, p.ep_comm_s);  // not overlapped
  EXPECT_NEAR(p.microbatch_s * 128, p.compute_s + p.tp_exposed_s + p.cp_exposed_s + p.ep_exposed_s, 1e-9);
  // data parallel: the dense parameters over dp·cp = 16 ranks (2 per node), each expert over edp = 8 ranks (1 per node)
  const LayerParams lp = layer_params(r.model, 4, 8, 1);
  const double dense = 8 * lp.dense + embedding_params(r.model, 4), experts = 8 * lp.expert;
  const double bd = std::ceil(dense / 40e6), be = std::ceil(experts / 40e6);
  const double rs = bd * group_time_s(Coll::reduce_scatter, 2 * dense / bd, 16, 2, ctx.net) +
                    be * group_time_s(Coll::reduce_scatter, 2 * experts / be, 8, 1, ctx.net);
  EXPECT_NEAR(p.dp_reduce_scatter_s, rs, 1e-12);
  // the optimizer: the anchor's per-parameter time, the dense state over dp·cp, the experts' over edp
  const double per_param = 0.0015 / layer_params(r.model, 4, 8, 1).total();
  const double o0 = 0.004 / 16;  // the same vocabulary shard as the anchor's
  EXPECT_NEAR(p.optimizer_s, (o0 + per_param * 64 * (lp.dense / 16 + lp.expert / 8)) / 8, 1e-15);
  // a dense model of the same shape has none of it
  EXPECT_EQ(project(tb::recipe::find_recipe(recipes(), "llama3.1-70b"), layout70b(64), "bf16",
                    context({measured("llama3.1-70b", 4, 2, 1, 8192)}, 0.0), tb::recipe::Convention::full)
                .ep_comm_s,
            0);
}

TEST(StepModel, ExpectedMaxOfNormals) {
  EXPECT_EQ(expected_max_normal(1), 0);
  EXPECT_EQ(expected_max_normal(0), 0);
  // the exact expected maximum (numerical integration of x·n·φ(x)·Φ(x)^(n−1)) against Blom's approximation
  auto exact = [](int n) {
    double sum = 0;
    for (double x = -9; x < 9; x += 1e-3)
      sum += x * n * std::exp(-0.5 * x * x) / std::sqrt(2 * std::numbers::pi) *
             std::pow(0.5 * std::erfc(-x / std::sqrt(2.0)), n - 1);
    return sum * 1e-3;
  };
  EXPECT_NEAR(exact(2), 1 / std::sqrt(std::numbers::pi), 1e-6);  // the closed form for two
  EXPECT_NEAR(expected_max_normal(2), exact(2), 0.045 * exact(2));
  for (int n : {4, 8, 16, 64, 1024, 4096}) EXPECT_NEAR(expected_max_normal(n), exact(n), 0.02 * exact(n)) << n;
  double last = 0;
  for (int n = 2; n <= 1 << 16; n *= 2) {
    const double e = expected_max_normal(n);
    EXPECT_GT(e, last) << n;                               // grows with n
    EXPECT_LT(e, std::sqrt(2 * std::log(double(n)))) << n;  // below the extreme-value bound
    last = e;
  }
}

TEST(StepModel, StragglersWaitForTheSlowestReplica) {
  const auto& r = tb::recipe::find_recipe(recipes(), "llama3.1-70b");
  Context ctx = context({measured("llama3.1-70b", 4, 2, 1, 8192)}, 0.3);
  const Projection none = project(r, layout70b(64), "bf16", ctx, tb::recipe::Convention::full);
  ctx.cal.straggler_sigma_s = 0.03;
  double last = 0;
  for (int gpus : {64, 128, 512, 2048}) {  // dp 2 ... 64, GA 64: the step without stragglers does not change much
    const auto l = layout70b(gpus);
    const Projection p = project(r, l, "bf16", ctx, tb::recipe::Convention::full);
    const double before = p.step_s - p.straggler_s;
    EXPECT_EQ(p.layout.dp, gpus / 32);
    EXPECT_NEAR(p.straggler_s, 0.03 * std::sqrt(before) * expected_max_normal(gpus / 32), 1e-12);
    EXPECT_DOUBLE_EQ(p.straggler_s, straggler_delay_s(0.03, before, p.layout.dp));
    EXPECT_GT(p.straggler_s, last);  // more replicas, a slower slowest one
    last = p.straggler_s;
  }
  EXPECT_NEAR(project(r, layout70b(64), "bf16", ctx, tb::recipe::Convention::full).step_s - none.step_s,
              0.03 * std::sqrt(none.step_s) * expected_max_normal(2), 1e-9);
  // one replica: nobody to wait for
  tb::recipe::Layout one = layout70b(64);
  one.gpus = 32, one.dp = 1, one.global_batch = 64;
  EXPECT_EQ(project(r, one, "bf16", ctx, tb::recipe::Convention::full).straggler_s, 0);
  EXPECT_EQ(straggler_delay_s(0.03, 10, 1), 0);
  EXPECT_NEAR(straggler_delay_s(0.03, 4, 2), 0.03 * 2 * expected_max_normal(2), 1e-15);  // σ·√T: 4 s doubles it
}

TEST(StepModel, DataParallelOverlapWindows) {
  const auto& r = tb::recipe::find_recipe(recipes(), "llama3.1-70b");
  const Context ctx = context({measured("llama3.1-70b", 4, 2, 1, 8192)}, 0.0);
  const Projection p = project(r, layout70b(2048), "bf16", ctx, tb::recipe::Convention::full);
  // the reduce-scatter hides under the last backward (2/3 t_mb), the all-gather under the first forward (1/3),
  // each stretched by the interleaved pipeline's cooldown / warmup: (pp-1)·2 + (vp-1)·pp = 22 chunk passes of 1/5
  const double ramp = 1 + (3 * 2 + 4 * 4) / 5.0;
  EXPECT_DOUBLE_EQ(pipeline_ramp_chunks(4, 5), 22);
  // one bucket of each (the last to reduce, the first to gather) is never hidden; buckets of max(40M, 1M·dp·cp)
  const double buckets = std::ceil((20 * layer_params(r.model, 4).dense + embedding_params(r.model, 4)) / 128e6);
  const double rs1 = p.dp_reduce_scatter_s / buckets, ag1 = p.dp_all_gather_s / buckets;
  const double expect = rs1 + std::max(0.0, p.dp_reduce_scatter_s - rs1 - p.microbatch_s * 2 / 3 * ramp) + ag1 +
                        std::max(0.0, p.dp_all_gather_s - ag1 - p.microbatch_s / 3 * ramp);
  EXPECT_NEAR(p.dp_exposed_s, expect, 1e-12);
  EXPECT_GT(p.dp_exposed_s, 0);
  // more data-parallel ranks across the network: the collectives grow; the distributed optimizer's share shrinks
  const Projection small = project(r, layout70b(64), "bf16", ctx, tb::recipe::Convention::full);
  EXPECT_GT(p.dp_reduce_scatter_s, small.dp_reduce_scatter_s);
  EXPECT_LT(p.optimizer_s, small.optimizer_s);
  EXPECT_GE(p.step_s - p.optimizer_s, small.step_s - small.optimizer_s);
  // without a pipeline the windows are one micro-batch's backward and forward
  const auto& r8 = tb::recipe::find_recipe(recipes(), "llama3.1-8b");
  auto l8 = tb::recipe::layout_for(r8, tb::recipe::LayoutQuery(128, "bf16", "25.04.02"));
  if (l8.layers <= 0) l8.layers = r8.model.layers;
  if (l8.seq <= 0) l8.seq = r8.model.seq;
  const Context ctx8 = context({measured("llama3.1-8b", 1, 2, 1, 8192)}, 0.0);
  const Projection q = project(r8, l8, "bf16", ctx8, tb::recipe::Convention::full);
  const double b8 = std::ceil((32 * layer_params(r8.model, 1).dense + 2 * embedding_params(r8.model, 1)) / 128e6);
  EXPECT_NEAR(q.dp_exposed_s,
              q.dp_reduce_scatter_s / b8 + q.dp_all_gather_s / b8 +
                  std::max(0.0, q.dp_reduce_scatter_s * (1 - 1 / b8) - q.microbatch_s * 2 / 3) +
                  std::max(0.0, q.dp_all_gather_s * (1 - 1 / b8) - q.microbatch_s / 3),
              1e-12);
}

TEST(StepModel, AnchorPrefersThisRecipeThenModelThenFamily) {
  const auto& n340 = tb::recipe::find_recipe(recipes(), "nemotron4-340b");
  const auto& l8b = tb::recipe::find_recipe(recipes(), "llama3.1-8b");
  const Context ctx = context({measured("llama3.1-70b", 4, 2, 1, 8192), measured("nemotron4-15b", 2, 1, 2, 4096),
                               measured("llama3.1-8b", 1, 2, 1, 8192)},
                              0.2);
  AnchorKind kind;
  tb::recipe::Layout l;
  l.tp = 8, l.cp = 1, l.micro_batch = 1, l.seq = 4096;
  EXPECT_EQ(choose_anchor(n340, "bf16", l, ctx, &kind)->recipe, "nemotron4-15b");
  EXPECT_EQ(kind, AnchorKind::same_family);
  l.tp = 1, l.cp = 2, l.seq = 8192;
  EXPECT_EQ(choose_anchor(l8b, "bf16", l, ctx, &kind)->recipe, "llama3.1-8b");
  EXPECT_EQ(kind, AnchorKind::same_shard);
  l.cp = 1;
  choose_anchor(l8b, "bf16", l, ctx, &kind);
  EXPECT_EQ(kind, AnchorKind::same_recipe);
  EXPECT_EQ(choose_anchor(l8b, "fp8", l, ctx), nullptr);  // no FP8 measurement
  EXPECT_THROW(project(l8b, layout70b(64), "fp8", ctx, tb::recipe::Convention::full), tb::Error);
}

TEST(StepModel, AnotherShardScalesByTheCostModel) {
  const auto& r = tb::recipe::find_recipe(recipes(), "nemotron4-15b");
  const Context ctx = context({measured("nemotron4-15b", 2, 1, 2, 4096, 0.015, 0.06)}, 0.2);
  auto l = tb::recipe::layout_for(r, tb::recipe::LayoutQuery(16, "bf16", "24.11.1"));  // tp4, micro-batch 4
  if (l.layers <= 0) l.layers = r.model.layers;
  if (l.seq <= 0) l.seq = r.model.seq;
  const Projection p = project(r, l, "bf16", ctx, tb::recipe::Convention::full);
  EXPECT_EQ(p.anchor_kind, AnchorKind::same_recipe);
  const Work from = layer_work(r.model, 2, 2, 4096), to = layer_work(r.model, 4, 4, 4096, {false, true});
  EXPECT_NEAR(p.layer_scale, rates(ctx).time_s(to) / rates(ctx).time_s(from), 1e-12);
  EXPECT_NEAR(p.layer_s, 0.015 * p.layer_scale, 1e-12);
  EXPECT_NEAR(p.layer_scale, 1.0, 0.05);  // tp ×2 and micro-batch ×2: about the same work per GPU
}

TEST(StepModel, ComputeRateCorrection) {
  const auto& r = tb::recipe::find_recipe(recipes(), "llama3.1-70b");
  Context ctx = context({measured("llama3.1-70b", 4, 2, 1, 8192)}, 0.2);
  const double base = project(r, layout70b(64), "bf16", ctx, tb::recipe::Convention::full).layer_s;
  ctx.target_membw_tbps = 2.0;  // half the memory rate: only the memory-bound share slows
  const Projection slow_mem = project(r, layout70b(64), "bf16", ctx, tb::recipe::Convention::full);
  const Work w = layer_work(r.model, 4, 1, 8192, {false, true});
  const double mu = rates(ctx).mem_time_s(w) / rates(ctx).time_s(w);
  EXPECT_NEAR(slow_mem.layer_s / base, 1 + mu, 1e-12);
  ctx.target_membw_tbps = 4.0, ctx.target_gemm_tflops = 400;  // half the GEMM rate: the rest slows 2×
  EXPECT_NEAR(project(r, layout70b(64), "bf16", ctx, tb::recipe::Convention::full).layer_s / base, 2 - mu, 1e-12);
  ctx.target_gemm_tflops = 800, ctx.cal.reference_efficiency = 0.8;
  EXPECT_NEAR(project(r, layout70b(64), "bf16", ctx, tb::recipe::Convention::full).layer_s / base, 1 / 0.8, 1e-12);
}

TEST(StepModel, LayerTimeFromTheCostModelOrTheAnchor) {
  const auto& r = tb::recipe::find_recipe(recipes(), "llama3.1-70b");
  Context ctx = context({measured("llama3.1-70b", 4, 2, 1, 8192, 0.025)}, 0.2);
  const Projection m = project(r, layout70b(64), "bf16", ctx, tb::recipe::Convention::full);
  ctx.layer_time = LayerTime::fit;
  const Projection f = project(r, layout70b(64), "bf16", ctx, tb::recipe::Convention::full);
  const Work target = layer_work(r.model, 4, 1, 8192, {false, true});
  EXPECT_DOUBLE_EQ(f.layer_fit_s, rates(ctx).time_s(target));  // the rates alone: the anchor's 25 ms do not enter
  EXPECT_DOUBLE_EQ(f.layer_s, f.layer_fit_s);
  EXPECT_DOUBLE_EQ(m.layer_s, m.layer_measured_s);
  EXPECT_DOUBLE_EQ(f.layer_measured_s, m.layer_measured_s);
  EXPECT_NEAR(m.layer_measured_s, 0.025 * m.layer_scale, 1e-15);
  EXPECT_DOUBLE_EQ(f.head_s, m.head_s);  // the head is the anchor's in both
}

TEST(StepModel, Fp8GathersFp8Tensors) {
  const auto& r = tb::recipe::find_recipe(recipes(), "llama3.1-70b");
  const Context ctx = context(
      {measured("llama3.1-70b", 4, 2, 1, 8192), measured("llama3.1-70b", 4, 1, 1, 8192, 0.014, 0.02, "fp8")}, 1.0);
  auto l = layout70b(512, "fp8");  // tp4 pp8 cp1 vp5
  const Projection f8 = project(r, l, "fp8", ctx, tb::recipe::Convention::full);
  const Projection bf = project(r, l, "bf16", ctx, tb::recipe::Convention::full);  // the same layout in bf16
  EXPECT_EQ(f8.anchor->precision, "fp8");
  // 6 all-gathers at half the bytes (FP8), 4 reduce-scatters of bf16; the head's 2 + 2 likewise
  const double A = 1.0 * 8192 * 8192 * 2, ag = 0.75 * A / 250e9, rs = 0.75 * A / 250e9;
  EXPECT_NEAR(bf.tp_comm_s, 64 * (10 * (6 * ag + 4 * rs) + 2 * ag + 2 * rs), 1e-9);
  EXPECT_NEAR(f8.tp_comm_s, 64 * (10 * (6 * ag / 2 + 4 * rs) + 2 * ag / 2 + 2 * rs), 1e-9);
  // FP8 parameters: the data-parallel all-gather moves half the bytes of bf16's; the gradients are bf16 in both
  EXPECT_NEAR(f8.dp_all_gather_s / bf.dp_all_gather_s, 0.5, 0.02);
  EXPECT_NEAR(f8.dp_reduce_scatter_s, bf.dp_reduce_scatter_s, 1e-12);
  EXPECT_NEAR(f8.mfu, f8.tflops_per_gpu / 2000, 1e-12);  // against the FP8 peak
}

TEST(StepModel, TrainbenchsOwnStep) {
  const auto& r = tb::recipe::find_recipe(recipes(), "llama3.1-70b");
  Context ctx = context({measured("llama3.1-70b", 4, 2, 1, 8192)}, 0.2);
  tb::recipe::Layout l = layout70b(64);
  l.gpus = 2, l.tp = 2, l.pp = 1, l.cp = 1, l.vp = 1, l.dp = 1, l.layers = 4, l.global_batch = 1;
  const Projection ref = project(r, l, "bf16", ctx, tb::recipe::Convention::full);
  ctx.software = Software::trainbench;
  const Projection own = project(r, l, "bf16", ctx, tb::recipe::Convention::full);
  // per layer 4 all-gathers and 4 reduce-scatters, nothing for the replicated head, all of it on the compute stream
  const double A = 1.0 * 8192 * 8192 * 2, coll = 0.5 * A / 250e9;
  EXPECT_NEAR(own.tp_comm_s, 4 * 8 * coll, 1e-9);
  EXPECT_NEAR(ref.tp_comm_s, 4 * 10 * coll + 4 * coll, 1e-9);
  EXPECT_DOUBLE_EQ(own.tp_exposed_s, own.tp_comm_s);
  EXPECT_LT(ref.tp_exposed_s, ref.tp_comm_s);
  EXPECT_DOUBLE_EQ(own.compute_s, ref.compute_s);
}

TEST(StepModel, NvlinkMeasuredOnTwoGpusOverridesTheSystemFile) {
  const fs::path dir = fs::temp_directory_path() / "tb_step_model_test";
  fs::create_directories(dir);
  const fs::path src = tb::recipe::find_references_dir(std::nullopt) /
                       "measured/h200-recipes/run-llama3.1-70b.jsonl";
  std::ofstream(dir / "results.jsonl")
      << std::ifstream(src).rdbuf()
      << R"({"schema":"trainbench.result.v1","run":"x","bench":"micro.nccl.all_gather","case":"f32/1GiB","world":2,"status":"ok","bytes":1073741824,"busbw_gbps":135.0})"
      << "\n"
      << R"({"schema":"trainbench.result.v1","run":"x","bench":"micro.nccl.all_gather","case":"f32/64MiB","world":2,"status":"ok","bytes":67108864,"busbw_gbps":99.0})"
      << "\n";
  const std::vector<fs::path> paths{dir};
  const Inputs in = load_inputs(paths);
  EXPECT_EQ(in.runs.size(), 1u);
  EXPECT_DOUBLE_EQ(in.nvlink.all_gather, 135.0);  // the largest size
  EXPECT_EQ(in.nvlink.gpus, 2);
  const auto refs = tb::recipe::find_references_dir(std::nullopt);
  const auto systems = tb::recipe::load_systems(refs / "systems");
  const auto& h100 = *tb::recipe::match_system(systems, "H100 SXM");
  const Context measured_ctx = make_context(recipes(), in, systems, h100);
  EXPECT_DOUBLE_EQ(measured_ctx.net.nvlink.all_gather_gbps, 135.0);
  EXPECT_DOUBLE_EQ(measured_ctx.net.nvlink.reduce_scatter_gbps, h100.network.nvlink_reduce_scatter_gbps);
  EXPECT_EQ(measured_ctx.source_name, "H200 SXM");
  const std::vector<fs::path> only{src};
  const Context declared = make_context(recipes(), load_inputs(only), systems, h100);
  const auto& r = tb::recipe::find_recipe(recipes(), "llama3.1-70b");
  const auto l = layout70b(512);
  EXPECT_GT(project(r, l, "bf16", measured_ctx, tb::recipe::Convention::full).tp_comm_s,
            1.5 * project(r, l, "bf16", declared, tb::recipe::Convention::full).tp_comm_s);
}
