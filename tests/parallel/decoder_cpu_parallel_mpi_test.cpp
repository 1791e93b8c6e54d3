// decoder_cpu_parallel_mpi_test: the sharded CPU decoder (parallel/decoder_cpu_parallel.h) under mpirun (2 and 4
// ranks, ctest) against the single-rank CpuDecoder<double> (the same decoder on groups of one rank) on the full
// sequence, for five tiny model variants
// (llama-like: rmsnorm, swiglu, rope with Llama 3.1 scaling, GQA; gpt-like: layernorm, gelu, learned positions,
// tied embeddings, MHA; moe: llama with routed and shared experts and the load-balancing losses; mla and mla_moe: those
// with multi-head latent attention, its latents replicated and its heads split over tp; lora and lora-gpt: llama and
// gpt with LoRA adapters (canonical; fused), dropout on, the base frozen: the adapters' gradients and the masks must
// come out as one rank's) with parameters moved off their init (norm gains not 1, biases not 0) and random tokens:
//   - every layout of the world that fits: tp = cp = 1 (dp = n), tp = n (with and without sequence parallel), cp = n,
//     tp 2 x cp n/2 (with SP), cp 2 x tp n/2, each with micro-batch 1 and 2: the loss on every rank and the full
//     gradient (add_grads_to_full summed over tp and cp) to 1e-10 relative per parameter slot, the embedding and LM
//     head included (whole on every tp rank, their rows split over tp with SP; the local layout is the CUDA
//     backend's, dense_layout(tp_shard_config(cfg, tp)));
//   - two stages chained by hand in each rank's process (layers [0, k) then [k, L)), two micro-batches in flight
//     (forward 0, forward 1, backward 1, backward 0): the same losses and gradients as one stage and the reference;
//   - moe: the load-balancing losses and tokens per expert on every rank equal the reference's;
//   - float against the float CpuDecoder;
//   - layouts the model does not fit raise tb::Error on every rank (no collective is left waiting); a vocabulary
//     that tp does not divide fits (the embedding and LM head are not split over tp);
//   - expert parallel (moe): every ep layout of the world (ep over dp, over tp with SP, over cp, and mixed), each dp
//     replica on a micro-batch of its own, so an ep group's ranks send each other different tokens: the loss and
//     moe_stats of every rank equal the reference's on its micro-batch, and the world sum of add_grads_to_full equals
//     the sum of the reference's gradients over the micro-batches (a row sent to the wrong expert or back to the
//     wrong rank changes both); one stage and two chained stages with two micro-batches in flight; the local layout
//     holds experts / ep experts per MoE layer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "comm/mpi_comm.h"
#include "core/error.h"
#include "model/config.h"
#include "model/decoder_cpu.h"
#include "parallel/decoder_cpu_parallel.h"
#include "parallel/mesh.h"
#include "parallel/tensor_shard.h"
#include "tiny_models.h"

namespace tb::parallel {
namespace {

using model::CpuDecoder;
using model::ModelConfig;

ModelConfig tiny(const std::string& family) { return testing::tiny(family, 3); }

struct Batch {
  std::vector<std::int32_t> tokens, targets;
  int batch = 1, seq = 0;
  MicroBatch view() const { return {tokens, targets, batch, seq}; }
};

Batch random_batch(int batch, int seq, int vocab, std::uint64_t seed) {
  testing::Tokens t = testing::random_tokens(batch, seq, vocab, seed);
  return {std::move(t.tokens), std::move(t.targets), batch, seq};
}

// The reference, with every parameter moved off its init (the same values on every rank).
template <class T>
CpuDecoder<T> reference(const ModelConfig& cfg) {
  CpuDecoder<T> ref(cfg, 7);
  std::mt19937_64 g(11);
  std::uniform_real_distribution<double> u(-0.1, 0.1);
  for (T& p : ref.params()) p += T(u(g));
  return ref;
}

struct Layout {
  int tp = 1, cp = 1;
  bool sp = false;
  std::string str() const { return "tp" + std::to_string(tp) + " cp" + std::to_string(cp) + (sp ? " sp" : ""); }
};

// The layouts of n ranks this test runs (dp = n / (tp cp) replicas each run the same).
std::vector<Layout> layouts(int n) {
  std::vector<Layout> all = {{1, 1, false}, {n, 1, false}, {n, 1, true}, {1, n, false}};
  if (n % 2 == 0) all.push_back({2, n / 2, true}), all.push_back({n / 2, 2, false});
  return all;
}

struct Mesh2 {  // a mesh over the world with this layout
  std::unique_ptr<comm::Communicator> world = comm::world_communicator();
  Mesh mesh;
  explicit Mesh2(const Layout& l)
      : mesh(*world,
             MeshShape{.dp = world->size() / (l.tp * l.cp), .cp = l.cp, .tp = l.tp, .sequence_parallel = l.sp}) {}
  DecoderGroups groups() { return {mesh.tp(), mesh.cp()}; }
};

// Sums each stage's add_grads_to_full over the tp and cp groups: the full model's gradient.
template <class T>
std::vector<T> full_grads(const std::vector<const ShardedCpuDecoder<T>*>& stages, Mesh& mesh, std::size_t total) {
  std::vector<T> g(total, T(0));
  for (const auto* s : stages) s->add_grads_to_full(g);
  mesh.tp().all_reduce(std::span<T>(g));
  mesh.cp().all_reduce(std::span<T>(g));
  return g;
}

// Per trainable slot (in the gradient layout): max |got - want| <= rel * max |want|. Returns "" or the mismatching
// slots.
template <class T>
std::string compare_grads(const model::DenseLayout& L, std::span<const T> got, std::span<const T> want, double rel) {
  std::ostringstream bad;
  for (const model::Slot& s : L.slots) {
    if (!s.has_grad()) continue;
    double err = 0, scale = 0;
    for (std::size_t i = s.grad_offset; i < s.grad_offset + s.size; ++i) {
      err = std::max(err, std::abs(double(got[i]) - double(want[i])));
      scale = std::max(scale, std::abs(double(want[i])));
    }
    if (!(err <= rel * scale) || scale == 0)
      bad << "  " << s.name << ": max err " << err << ", max |grad| " << scale << "\n";
  }
  return bad.str();
}

constexpr double kGradScale = 0.75;

class Family : public ::testing::TestWithParam<std::string> {};

TEST_P(Family, EveryLayoutMatchesTheSingleRankDecoder) {
  const ModelConfig cfg = tiny(GetParam());
  CpuDecoder<double> ref = reference<double>(cfg);
  const int n = comm::world().size;
  for (int batch : {1, 2}) {
    const Batch b = random_batch(batch, cfg.seq, cfg.vocab, 100 + batch);
    ref.zero_grads();
    ref.reset_moe_stats();
    const double ref_loss = ref.forward_backward(b.tokens, b.targets, batch, b.seq, kGradScale);
    for (const Layout& l : layouts(n)) {
      Mesh2 m(l);
      ShardedCpuDecoder<double> dec(cfg, m.groups(), {.sequence_parallel = l.sp});
      const model::DenseLayout want = model::dense_layout(tp_shard_config(cfg, l.tp));
      ASSERT_EQ(dec.local_layout().slots.size(), want.slots.size());
      for (std::size_t i = 0; i < want.slots.size(); ++i) {
        EXPECT_EQ(dec.local_layout().slots[i].name, want.slots[i].name);
        EXPECT_EQ(dec.local_layout().slots[i].shape, want.slots[i].shape) << want.slots[i].name;
      }
      EXPECT_EQ(dec.local_layout().slots[std::size_t(dec.local_layout().lm_head)].shape,
                (std::vector<std::int64_t>{cfg.vocab, cfg.d_model}));
      dec.load_full(ref.params());
      const double loss = dec.forward(0, b.view());
      dec.backward(0, {}, {}, kGradScale);
      EXPECT_EQ(dec.in_flight(), 0u);
      const auto g = full_grads<double>({&dec}, m.mesh, ref.grads().size());
      const std::string what = l.str() + " batch " + std::to_string(batch) + " rank " + std::to_string(m.world->rank());
      EXPECT_NEAR(loss, ref_loss, 1e-12 * ref_loss) << what;
      EXPECT_EQ(compare_grads<double>(ref.dense_layout(), g, ref.grads(), 1e-10), "") << what;
      if (cfg.moe.enabled()) {  // the load-balancing losses and counts over the whole micro-batch on every rank
        EXPECT_GT(ref.moe_stats().objective, 0) << what;
        EXPECT_NEAR(dec.moe_stats().objective, ref.moe_stats().objective, 1e-12 * ref.moe_stats().objective) << what;
        EXPECT_EQ(dec.moe_stats().tokens_per_expert, ref.moe_stats().tokens_per_expert) << what;
      }
    }
  }
}

// Layers [0, k) and [k, L) chained by hand, two micro-batches in flight, against one stage and the reference.
TEST_P(Family, TwoStagesChainedEqualOneStage) {
  const ModelConfig cfg = tiny(GetParam());
  CpuDecoder<double> ref = reference<double>(cfg);
  const int n = comm::world().size;
  const Batch b0 = random_batch(2, cfg.seq, cfg.vocab, 200), b1 = random_batch(2, cfg.seq, cfg.vocab, 201);
  ref.zero_grads();
  const double ref0 = ref.forward_backward(b0.tokens, b0.targets, 2, b0.seq, kGradScale);
  const double ref1 = ref.forward_backward(b1.tokens, b1.targets, 2, b1.seq, kGradScale);
  for (const Layout& l : {Layout{n, 1, true}, Layout{2, n / 2, true}, Layout{1, n, false}}) {
    for (int k : {1, 2}) {
      Mesh2 m(l);
      ShardedCpuDecoder<double> one(cfg, m.groups(), {.sequence_parallel = l.sp});
      ShardedCpuDecoder<double> s0(cfg, m.groups(), {.first_layer = 0, .last_layer = k, .sequence_parallel = l.sp});
      ShardedCpuDecoder<double> s1(cfg, m.groups(), {.first_layer = k, .sequence_parallel = l.sp});
      for (auto* d : {&one, &s0, &s1}) d->load_full(ref.params());
      const std::size_t act = s0.activation_size(2, cfg.seq);
      std::vector<double> h0(act), h1(act), dh(act), dx(act);
      s0.forward(0, b0.view(), {}, h0);
      const double loss0 = s1.forward(0, b0.view(), h0);
      s0.forward(1, b1.view(), {}, h1);
      const double loss1 = s1.forward(1, b1.view(), h1);
      EXPECT_EQ(s0.in_flight(), 2u);
      s1.backward(1, {}, dh, kGradScale);
      s0.backward(1, dh, {}, kGradScale);  // its MoE losses scale like the LM loss
      s1.backward(0, {}, dh, kGradScale);
      s0.backward(0, dh, {}, kGradScale);
      const double one0 = one.forward(0, b0.view());
      one.backward(0, {}, {}, kGradScale);
      const double one1 = one.forward(1, b1.view());
      one.backward(1, {}, {}, kGradScale);
      const std::string what = l.str() + " split at " + std::to_string(k) + " rank " + std::to_string(m.world->rank());
      EXPECT_NEAR(loss0, one0, 1e-13 * one0) << what;
      EXPECT_NEAR(loss1, one1, 1e-13 * one1) << what;
      EXPECT_NEAR(loss0, ref0, 1e-12 * ref0) << what;
      EXPECT_NEAR(loss1, ref1, 1e-12 * ref1) << what;
      const auto g2 = full_grads<double>({&s0, &s1}, m.mesh, ref.grads().size());
      const auto g1 = full_grads<double>({&one}, m.mesh, ref.grads().size());
      EXPECT_EQ(compare_grads<double>(ref.dense_layout(), g2, g1, 1e-12), "") << what << " (two stages vs one)";
      EXPECT_EQ(compare_grads<double>(ref.dense_layout(), g2, ref.grads(), 1e-10), "") << what << " (vs reference)";
    }
  }
}

TEST_P(Family, FloatMatchesTheFloatDecoder) {
  const ModelConfig cfg = tiny(GetParam());
  CpuDecoder<float> ref = reference<float>(cfg);
  const int n = comm::world().size;
  const Batch b = random_batch(2, cfg.seq, cfg.vocab, 300);
  ref.zero_grads();
  const double ref_loss = ref.forward_backward(b.tokens, b.targets, 2, b.seq, kGradScale);
  Mesh2 m(Layout{2, n / 2, true});
  ShardedCpuDecoder<float> dec(cfg, m.groups(), {.sequence_parallel = true});
  dec.load_full(ref.params());
  const double loss = dec.forward(0, b.view());
  dec.backward(0, {}, {}, kGradScale);
  const auto g = full_grads<float>({&dec}, m.mesh, ref.grads().size());
  EXPECT_NEAR(loss, ref_loss, 1e-5 * ref_loss);
  EXPECT_EQ(compare_grads<float>(ref.dense_layout(), g, ref.grads(), 2e-4), "");
}

INSTANTIATE_TEST_SUITE_P(Variants, Family,
                         ::testing::Values("llama", "gpt", "moe", "mla", "mla_moe", "lora", "lora-gpt"));

// Expert parallel: dp x cp x tp (SP with tp > 1) and ep dividing the world.
struct EpLayout {
  int dp = 1, cp = 1, tp = 1, ep = 1;
  MeshShape shape() const { return {.dp = dp, .cp = cp, .tp = tp, .sequence_parallel = tp > 1, .ep = ep}; }
};

std::vector<EpLayout> ep_layouts(int n) {
  if (n == 2) return {{.dp = 2, .ep = 2}, {.tp = 2, .ep = 2}, {.cp = 2, .ep = 2}};
  if (n == 4)
    return {{.dp = 4, .ep = 4},          {.dp = 4, .ep = 2},          {.dp = 2, .tp = 2, .ep = 2},
            {.dp = 2, .tp = 2, .ep = 4}, {.tp = 4, .ep = 4},          {.tp = 4, .ep = 2},
            {.dp = 2, .cp = 2, .ep = 4}, {.dp = 2, .cp = 2, .ep = 2}, {.cp = 2, .tp = 2, .ep = 2},
            {.cp = 2, .tp = 2, .ep = 4}};
  return {};
}

// A random micro-batch (the first seed from `seed` on) whose tokens reach every expert of every MoE layer in the
// reference, so every ep rank receives rows from every other (the same choice on every rank: no rank stops alone).
Batch routed_to_every_expert(const ModelConfig& cfg, int batch, std::uint64_t seed) {
  CpuDecoder<double> ref = reference<double>(cfg);
  for (;; ++seed) {
    Batch b = random_batch(batch, cfg.seq, cfg.vocab, seed);
    ref.reset_moe_stats();
    ref.forward_backward(b.tokens, b.targets, batch, cfg.seq, 1.0);
    const auto& c = ref.moe_stats().tokens_per_expert;
    if (std::ranges::all_of(c, [](std::int64_t v) { return v > 0; })) return b;
  }
}

TEST(ExpertParallel, EveryEpLayoutMatchesTheSingleRankDecoder) {
  const ModelConfig cfg = tiny("moe");
  const int n = comm::world().size;
  for (int batch : {1, 2})
    for (const EpLayout& l : ep_layouts(n)) {
      auto world = comm::world_communicator();
      Mesh mesh(*world, l.shape());
      const int dp = mesh.coord().dp;
      // the reference: one forward_backward per dp replica's micro-batch, gradients summed
      CpuDecoder<double> ref = reference<double>(cfg);
      ref.zero_grads();
      std::vector<Batch> batches;
      double my_loss = 0;
      MoeStats my_stats;
      for (int j = 0; j < l.dp; ++j) {
        batches.push_back(routed_to_every_expert(cfg, batch, 600 + 100 * batch + 10 * j));
        ref.reset_moe_stats();
        const double loss =
            ref.forward_backward(batches.back().tokens, batches.back().targets, batch, cfg.seq, kGradScale);
        if (j == dp) my_loss = loss, my_stats = ref.moe_stats();
      }
      const std::string what =
          l.shape().str() + " batch " + std::to_string(batch) + " rank " + std::to_string(world->rank());
      ShardedCpuDecoder<double> dec(cfg, {mesh.tp(), mesh.cp(), &mesh.ep()}, {.sequence_parallel = l.tp > 1});
      const model::DenseLayout& L = dec.local_layout();
      EXPECT_EQ(L.first_expert, mesh.ep().rank() * cfg.moe.experts / l.ep) << what;
      for (const auto& layer : L.layers)
        EXPECT_EQ(int(layer.expert_fc1.size()), layer.moe() ? cfg.moe.experts / l.ep : 0) << what;
      dec.load_full(ref.params());
      const double loss = dec.forward(0, batches[std::size_t(dp)].view());
      dec.backward(0, {}, {}, kGradScale);
      EXPECT_NEAR(loss, my_loss, 1e-12 * my_loss) << what;
      EXPECT_NEAR(dec.moe_stats().objective, my_stats.objective, 1e-12 * my_stats.objective) << what;
      EXPECT_EQ(dec.moe_stats().tokens_per_expert, my_stats.tokens_per_expert) << what;
      std::vector<double> g(ref.params().size(), 0.0);
      dec.add_grads_to_full(g);
      world->all_reduce(std::span<double>(g));
      EXPECT_EQ(compare_grads<double>(ref.dense_layout(), g, ref.grads(), 1e-10), "") << what;

      // two stages (layers [0, 2) and [2, 3), a MoE layer in each), two micro-batches in flight
      ShardedCpuDecoder<double> s0(cfg, {mesh.tp(), mesh.cp(), &mesh.ep()},
                                   {.first_layer = 0, .last_layer = 2, .sequence_parallel = l.tp > 1});
      ShardedCpuDecoder<double> s1(cfg, {mesh.tp(), mesh.cp(), &mesh.ep()},
                                   {.first_layer = 2, .sequence_parallel = l.tp > 1});
      s0.load_full(ref.params()), s1.load_full(ref.params());
      const std::size_t act = s0.activation_size(batch, cfg.seq);
      std::vector<double> h0(act), h1(act), dh(act);
      const Batch& b = batches[std::size_t(dp)];
      s0.forward(0, b.view(), {}, h0);
      s0.forward(1, b.view(), {}, h1);
      const double l1 = s1.forward(1, b.view(), h1);
      const double l0 = s1.forward(0, b.view(), h0);
      s1.backward(0, {}, dh, kGradScale);
      s0.backward(0, dh, {}, kGradScale);
      s1.backward(1, {}, dh, kGradScale);
      s0.backward(1, dh, {}, kGradScale);
      EXPECT_NEAR(l0, my_loss, 1e-12 * my_loss) << what << " (two stages)";
      EXPECT_NEAR(l1, my_loss, 1e-12 * my_loss) << what << " (two stages)";
      std::vector<double> g2(ref.params().size(), 0.0), twice(ref.grads().begin(), ref.grads().end());
      s0.add_grads_to_full(g2), s1.add_grads_to_full(g2);
      world->all_reduce(std::span<double>(g2));
      for (double& v : twice) v *= 2;  // each rank ran its micro-batch twice
      EXPECT_EQ(compare_grads<double>(ref.dense_layout(), g2, twice, 1e-10), "") << what << " (two stages)";
    }
}

// Expert-parallel layouts the model does not fit raise on every rank, before any exchange.
TEST(ExpertParallel, LayoutsTheModelDoesNotFitRaise) {
  const int n = comm::world().size;
  auto world = comm::world_communicator();
  Mesh over_dp(*world, {.dp = n, .ep = n});
  EXPECT_THROW(ShardedCpuDecoder<double>(tiny("llama"), {over_dp.tp(), over_dp.cp(), &over_dp.ep()}), Error);
  ModelConfig three = tiny("moe");
  three.moe.experts = 3;
  EXPECT_THROW(ShardedCpuDecoder<double>(three, {over_dp.tp(), over_dp.cp(), &over_dp.ep()}), Error);
  Mesh over_tp(*world, {.tp = n, .ep = n});  // tp without sequence parallel: every tp rank would send the same rows
  EXPECT_THROW(ShardedCpuDecoder<double>(tiny("moe"), {over_tp.tp(), over_tp.cp(), &over_tp.ep()}), Error);
  EXPECT_NO_THROW(
      ShardedCpuDecoder<double>(tiny("moe"), {over_tp.tp(), over_tp.cp(), &over_tp.ep()}, {.sequence_parallel = true}));
}

TEST(ShardedCpuDecoder, LayoutsTheModelDoesNotFitRaise) {
  const int n = comm::world().size;
  ModelConfig cfg = tiny("llama");
  {
    Mesh2 m(Layout{n, 1, false});
    ModelConfig bad = cfg;
    bad.vocab = 37;  // fits: the embedding and LM head are whole on every tp rank
    EXPECT_NO_THROW(ShardedCpuDecoder<double>(bad, m.groups()));
    bad = cfg, bad.ffn = 25;
    EXPECT_THROW(ShardedCpuDecoder<double>(bad, m.groups()), Error);
    bad = cfg, bad.kv_heads = 1;
    EXPECT_THROW(ShardedCpuDecoder<double>(bad, m.groups()), Error);
    EXPECT_THROW(ShardedCpuDecoder<double>(cfg, m.groups(), {.first_layer = 2, .last_layer = 2}), Error);
  }
  {
    Mesh2 m(Layout{1, n, false});  // seq 10 is not divisible by 2·cp
    ShardedCpuDecoder<double> dec(cfg, m.groups());
    dec.init(3);
    const Batch b = random_batch(1, 10, cfg.vocab, 5);
    EXPECT_THROW(dec.forward(0, b.view()), Error);
    EXPECT_EQ(dec.in_flight(), 0u);
    EXPECT_THROW(dec.backward(0), Error);  // no forward of micro-batch 0
  }
  {
    Mesh2 m(Layout{n, 1, true});  // SP: 7 tokens do not split over tp
    ShardedCpuDecoder<double> dec(cfg, m.groups(), {.sequence_parallel = true});
    const Batch b = random_batch(1, 7, cfg.vocab, 6);
    EXPECT_THROW(dec.forward(0, b.view()), Error);
  }
}

}  // namespace
}  // namespace tb::parallel
