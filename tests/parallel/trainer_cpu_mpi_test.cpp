// trainer_cpu_mpi_test: the multi-rank CPU trainer (parallel/trainer_cpu.h) under mpirun (2 and 4 ranks, ctest)
// against the single-rank CpuDecoder<double>, for a llama-like model (rmsnorm, swiglu, rope with Llama 3.1
// scaling, GQA), a gpt-like one (layernorm, gelu, learned positions, tied embeddings), the llama-like one with
// multi-head latent attention (its replicated down projections and latent norms, its heads split over tp), and the
// llama- and gpt-like ones fine-tuned with LoRA (dropout on, the base frozen: no gradient, moments or reduction for
// it), 4 layers, parameters moved off their init, random tokens, global batch 4, on every layout the rank count
// allows:
//   np2: dp2, tp2 sp, pp2, pp2 vp2, cp2
//   np4: dp2 tp2 sp, tp2 pp2, pp2 cp2, dp2 pp2, tp2 cp2 sp, dp4, pp4, pp2 vp2 dp2, tp4
//   - one step (micro-batch 1 and 2 where the layout allows): the loss on every rank and the full gradient equal
//     forward_backward of the whole global batch (its mean loss) to 1e-10 relative (per parameter slot);
//   - 20 steps, lr 1e-2 with warmup and cosine decay, clipping at a max_norm that clips some steps but not all:
//     every step's loss and gradient norm equal a single-rank loop written here (CpuDecoder + adamw_step + clip) to
//     1e-9 relative, and the final parameters to 1e-8;
//   - packed rows with a loss mask (several documents and padding per row, the loss over the counted targets of the
//     whole step): one step on every layout equals the single rank; a layout with cp is refused on every rank;
//   - a MoE model (routed and shared experts, the load-balancing losses): one step on every layout equals the sum of
//     the single-rank gradients of its micro-batches;
//   - expert parallel (the MoE model, ep over dp, tp sp, cp, pp stages and interleaving where the world allows):
//     one step's loss, gradient norm and full gradient, and 5 clipped AdamW steps (loss, norm, final parameters)
//     equal the single-rank loop over the micro-batches; an expert's gradient and moments live on its edp group only,
//     so a shard reduced over the wrong group or an expert counted twice in the norm changes them;
//   - bad layouts and bad input raise Error{config} on every rank, naming the problem.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "comm/mpi_comm.h"
#include "core/error.h"
#include "model/config.h"
#include "model/decoder_cpu.h"
#include "ops/cpu/adamw.h"
#include "parallel/mesh.h"
#include "tiny_models.h"
#include "parallel/trainer_cpu.h"

namespace tb::parallel {
namespace {

using model::CpuDecoder;
using model::ModelConfig;

constexpr int kGlobal = 4;
constexpr std::uint64_t kSeed = 7;

ModelConfig tiny(const std::string& family) { return testing::tiny(family, 4); }

using Batch = testing::Tokens;
Batch random_batch(int batch, int seq, int vocab, std::uint64_t seed) { return testing::random_tokens(batch, seq, vocab, seed); }

// CpuDecoder's init (seed kSeed) with every parameter moved (norm gains not 1, biases not 0).
std::vector<double> start_params(const ModelConfig& cfg) {
  CpuDecoder<double> d(cfg, kSeed);
  std::mt19937_64 g(11);
  std::uniform_real_distribution<double> u(-0.1, 0.1);
  for (double& p : d.params()) p += u(g);
  return {d.params().begin(), d.params().end()};
}

struct Layout {
  MeshShape shape;
  std::string str() const { return shape.str(); }
};

std::vector<Layout> layouts(int n) {
  auto L = [](int dp, int cp, int pp, int tp, int vp = 1, bool sp = false) {
    return Layout{MeshShape{dp, cp, pp, tp, vp, sp}};
  };
  if (n == 2) return {L(2, 1, 1, 1), L(1, 1, 1, 2, 1, true), L(1, 1, 2, 1), L(1, 1, 2, 1, 2), L(1, 2, 1, 1)};
  if (n == 4)
    return {L(2, 1, 1, 2, 1, true), L(1, 1, 2, 2), L(1, 2, 2, 1), L(2, 1, 2, 1), L(1, 2, 1, 2, 1, true),
            L(4, 1, 1, 1), L(1, 1, 4, 1), L(2, 1, 2, 1, 2), L(1, 1, 1, 4)};
  return {L(n, 1, 1, 1)};
}

bool fits(const Layout& l, const ModelConfig& cfg, int micro) {
  return layout_problems(l.shape, cfg, comm::world().size, micro, kGlobal).empty();
}

// Per slot: max |got - want| <= rel * max |want| (and the slot is not all zero). "" or the mismatching slots. grads:
// got and want are gradients (the trainable slots', at their grad_offset), else parameters.
std::string compare(const model::DenseLayout& L, std::span<const double> got, std::span<const double> want, double rel,
                    bool grads = false) {
  std::ostringstream bad;
  for (const model::Slot& s : L.slots) {
    if (grads && !s.has_grad()) continue;
    double err = 0, scale = 0;
    const std::size_t at = grads ? s.grad_offset : s.offset;
    for (std::size_t i = at; i < at + s.size; ++i) {
      err = std::max(err, std::abs(got[i] - want[i]));
      scale = std::max(scale, std::abs(want[i]));
    }
    if (!(err <= rel * scale) || scale == 0) bad << "  " << s.name << ": max err " << err << ", max |x| " << scale << "\n";
  }
  return bad.str();
}

std::string what(const Layout& l, int micro) {
  return l.str() + " micro " + std::to_string(micro) + " rank " + std::to_string(comm::world().rank);
}

// f(layout, micro, trainer) for every layout of the world that fits cfg at micro-batch 1 and 2, the trainer's
// parameters `start`.
template <class F>
void each_layout(const ModelConfig& cfg, const std::vector<double>& start, F&& f) {
  auto world = comm::world_communicator();
  for (const Layout& l : layouts(world->size()))
    for (int micro : {1, 2}) {
      if (!fits(l, cfg, micro)) continue;
      ParallelCpuTrainer<double> t(*world, cfg, {l.shape, micro, kGlobal, {}}, kSeed);
      t.load_full(start);
      f(l, micro, t);
    }
}

class Family : public ::testing::TestWithParam<std::string> {};

TEST_P(Family, OneStepMatchesTheSingleRankGradient) {
  const ModelConfig cfg = tiny(GetParam());
  const std::vector<double> start = start_params(cfg);
  CpuDecoder<double> ref(cfg, kSeed);
  std::ranges::copy(start, ref.params().begin());
  const Batch b = random_batch(kGlobal, cfg.seq, cfg.vocab, 42);
  ref.zero_grads();
  const double ref_loss = ref.forward_backward(b.tokens, b.targets, kGlobal, cfg.seq);
  const double ref_norm = ops::cpu::grad_norm(ref.grads());
  each_layout(cfg, start, [&](const Layout& l, int micro, ParallelCpuTrainer<double>& t) {
    EXPECT_EQ(compare(ref.dense_layout(), t.full_params(), start, 0), "") << what(l, micro) << " (load_full)";
    const ParallelStepStats st = t.step(b.tokens, b.targets, 1e-3);
    EXPECT_NEAR(st.loss, ref_loss, 1e-10 * ref_loss) << what(l, micro);
    EXPECT_NEAR(st.grad_norm, ref_norm, 1e-10 * ref_norm) << what(l, micro);
    EXPECT_EQ(compare(ref.dense_layout(), t.full_grads(), ref.grads(), 1e-10, true), "") << what(l, micro);
  });
}

// The single-rank loop the trainer must reproduce, written independently: decay everything but norms and biases,
// LR warmup then cosine, clip_grad_norm, adamw_step.
struct Reference {
  std::vector<double> loss, norm, params;
};

OptimizerHyper training_hyper(double clip) {
  return {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .clip = clip};
}

double test_lr(int step0) {  // the schedule of the 20 steps: warmup 3, cosine from 1e-2 to 1e-3, 0-based step
  if (step0 < 3) return 1e-2 * (step0 + 1) / 3.0;
  return 1e-3 + (1e-2 - 1e-3) * 0.5 * (1 + std::cos(std::numbers::pi * (step0 - 3) / 17.0));
}

Batch step_batch(const ModelConfig& cfg, int step) { return random_batch(kGlobal, cfg.seq, cfg.vocab, 1000 + step); }

Reference reference_run(const ModelConfig& cfg, int steps, double clip) {
  CpuDecoder<double> net(cfg, kSeed);
  const std::vector<double> start = start_params(cfg);
  std::ranges::copy(start, net.params().begin());
  std::vector<double> m(net.grads().size(), 0), v(net.grads().size(), 0);  // the trainable slots' (LoRA: adapters')
  Reference r;
  for (int step = 1; step <= steps; ++step) {
    const Batch b = step_batch(cfg, step);
    net.zero_grads();
    r.loss.push_back(net.forward_backward(b.tokens, b.targets, kGlobal, cfg.seq, 1.0, step));
    r.norm.push_back(ops::cpu::clip_grad_norm(net.grads(), clip));
    const ops::cpu::AdamWParams hp{test_lr(step - 1), 0.9, 0.95, 1e-8, 0.1};
    for (const model::Slot& s : net.layout()) {  // a frozen slot never moves
      if (!s.has_grad()) continue;
      const bool decay = s.name.find("norm") == std::string::npos && s.name.find("bias") == std::string::npos;
      const std::vector<std::uint8_t> mask(s.size, decay ? 1 : 0);
      const auto state = [&](std::vector<double>& x) { return std::span<double>(x).subspan(s.grad_offset, s.size); };
      ops::cpu::adamw_step(net.params().subspan(s.offset, s.size), net.grads().subspan(s.grad_offset, s.size),
                           state(m), state(v), hp, step, mask);
    }
    if (cfg.moe.bias_update_rate > 0) net.update_expert_bias();
  }
  r.params.assign(net.params().begin(), net.params().end());
  return r;
}

TEST_P(Family, TwentyStepsMatchTheSingleRankLoop) {
  const ModelConfig cfg = tiny(GetParam());
  constexpr int kSteps = 20;
  // LoRA's adapters have a far smaller gradient: its max_norm lies halfway between the two middle norms of an
  // unclipped run (not on one: a rank's last-bit difference would flip that step's clipping)
  double clip = 0.9;
  if (cfg.lora.enabled()) {
    std::vector<double> norms = reference_run(cfg, kSteps, 1e9).norm;
    std::ranges::sort(norms);
    clip = 0.5 * (norms[kSteps / 2 - 1] + norms[kSteps / 2]);
  }
  const Reference ref = reference_run(cfg, kSteps, clip);
  const auto clipped = std::ranges::count_if(ref.norm, [&](double n) { return n > clip; });
  ASSERT_GT(clipped, 0) << "max_norm never clips: lower clip";
  ASSERT_LT(clipped, kSteps) << "max_norm always clips: raise clip";
  double moved = 0;  // random targets: the loss stays near log(vocab), but the parameters must move
  const std::vector<double> start = start_params(cfg);
  for (std::size_t i = 0; i < start.size(); ++i) moved = std::max(moved, std::abs(ref.params[i] - start[i]));
  ASSERT_GT(moved, 0.05) << "the model does not move";
  auto world = comm::world_communicator();
  for (const Layout& l : layouts(world->size())) {
    const int micro = l.shape.pp == 1 && fits(l, cfg, 2) ? 2 : 1;
    ASSERT_TRUE(fits(l, cfg, micro)) << what(l, micro);
    ParallelCpuTrainer<double> t(*world, cfg, {l.shape, micro, kGlobal, training_hyper(clip)}, kSeed);
    t.load_full(start);
    for (int step = 1; step <= kSteps; ++step) {
      const Batch b = step_batch(cfg, step);
      const ParallelStepStats st = t.step(b.tokens, b.targets, test_lr(step - 1));
      const std::size_t i = std::size_t(step - 1);
      EXPECT_EQ(st.step, step);
      EXPECT_NEAR(st.loss, ref.loss[i], 1e-9 * ref.loss[i]) << what(l, micro) << " step " << step;
      EXPECT_NEAR(st.grad_norm, ref.norm[i], 1e-9 * ref.norm[i]) << what(l, micro) << " step " << step;
      EXPECT_NEAR(st.lr, test_lr(step - 1), 1e-14 * test_lr(step - 1));
      EXPECT_EQ(st.clip_scale < 1, ref.norm[i] > clip) << what(l, micro) << " step " << step;
    }
    EXPECT_EQ(compare(model::dense_layout(cfg), t.full_params(), ref.params, 1e-8), "") << what(l, micro);
  }
}

// Packed rows with a loss mask: the global batch's rows hold several documents (and padding), the loss counts each
// document's targets after its first two; micro-batch m's weights are mask x M / N (M micro-batches over every dp rank,
// N counted targets: train/data.h loss_weights), the reference's mask / N over the whole batch at once.
TEST_P(Family, PackedRowsOneStepMatchesTheSingleRankGradient) {
  const ModelConfig cfg = tiny(GetParam());
  const std::vector<double> start = start_params(cfg);
  const Batch b = random_batch(kGlobal, cfg.seq, cfg.vocab, 43);
  const std::vector<std::int32_t> lengths{5, 7, 16, 3, 3, 3, 3, 4, 10}, per_row{2, 1, 5, 1};
  std::vector<double> mask(b.tokens.size(), 0.0);
  double counted = 0;
  std::size_t d = 0;
  for (int r = 0; r < kGlobal; ++r)
    for (int i = 0, at = r * cfg.seq; i < per_row[std::size_t(r)]; at += lengths[d], ++i, ++d)
      for (int j = 2; j + 1 < lengths[d]; ++j) mask[std::size_t(at + j)] = 1, ++counted;
  const auto weights = [&](int micro_batches) {
    std::vector<double> w(mask);
    for (double& x : w) x *= micro_batches / counted;
    return w;
  };
  CpuDecoder<double> ref(cfg, kSeed);
  std::ranges::copy(start, ref.params().begin());
  ref.zero_grads();
  const std::vector<double> w1 = weights(1);
  const double ref_loss = ref.forward_backward({b.tokens, b.targets, kGlobal, cfg.seq, {lengths, per_row}, w1});
  each_layout(cfg, start, [&](const Layout& l, int micro, ParallelCpuTrainer<double>& t) {
    const std::vector<double> w = weights(kGlobal / micro);
    if (l.shape.cp > 1) {  // refused on every rank, before any communication
      EXPECT_THROW(t.step(b.tokens, b.targets, 1e-3, {lengths, per_row}, w), Error) << what(l, micro);
      return;
    }
    const ParallelStepStats st = t.step(b.tokens, b.targets, 1e-3, {lengths, per_row}, w);
    EXPECT_NEAR(st.loss, ref_loss, 1e-10 * ref_loss) << what(l, micro);
    EXPECT_EQ(compare(ref.dense_layout(), t.full_grads(), ref.grads(), 1e-10, true), "") << what(l, micro);
  });
}

INSTANTIATE_TEST_SUITE_P(Variants, Family, ::testing::Values("llama", "gpt", "mla", "lora", "lora-gpt"));

// A MoE model's load-balancing losses are per micro-batch (not linear in the batch): the reference sums the
// gradients of the global batch's consecutive micro-batches, each scaled by micro / global.
// Returns their mean loss; the gradients accumulate in net.
double sum_over_micro_batches(CpuDecoder<double>& net, const Batch& b, int seq, int micro) {
  const std::size_t n = std::size_t(micro * seq);
  double loss = 0;
  for (int i = 0; i < kGlobal / micro; ++i) {
    const std::span<const std::int32_t> tok(b.tokens.data() + i * n, n), tgt(b.targets.data() + i * n, n);
    loss += net.forward_backward(tok, tgt, micro, seq, double(micro) / kGlobal) * micro / kGlobal;
  }
  return loss;
}

TEST(ParallelCpuTrainer, MoeStepMatchesTheSumOverMicroBatches) {
  const ModelConfig cfg = tiny("moe");
  const std::vector<double> start = start_params(cfg);
  const Batch b = random_batch(kGlobal, cfg.seq, cfg.vocab, 43);
  auto world = comm::world_communicator();
  int ran = 0;
  for (int micro : {1, 2}) {
    CpuDecoder<double> ref(cfg, kSeed);
    std::ranges::copy(start, ref.params().begin());
    ref.zero_grads();
    const double ref_loss = sum_over_micro_batches(ref, b, cfg.seq, micro);
    for (const Layout& l : layouts(world->size())) {
      if (!fits(l, cfg, micro)) continue;
      ++ran;
      ParallelCpuTrainer<double> t(*world, cfg, {l.shape, micro, kGlobal, {}}, kSeed);
      t.load_full(start);
      const ParallelStepStats st = t.step(b.tokens, b.targets, 1e-3);
      EXPECT_NEAR(st.loss, ref_loss, 1e-10 * ref_loss) << what(l, micro);
      EXPECT_EQ(compare(ref.dense_layout(), t.full_grads(), ref.grads(), 1e-10, true), "") << what(l, micro);
    }
  }
  EXPECT_GE(ran, int(layouts(world->size()).size()));
}

std::vector<Layout> ep_layouts(int n) {
  auto L = [](int dp, int cp, int pp, int tp, int ep, int vp = 1) {
    return Layout{MeshShape{dp, cp, pp, tp, vp, tp > 1, ep}};
  };
  if (n == 2) return {L(2, 1, 1, 1, 2), L(1, 1, 1, 2, 2), L(1, 2, 1, 1, 2)};
  if (n == 4)
    return {L(4, 1, 1, 1, 4), L(4, 1, 1, 1, 2), L(2, 1, 1, 2, 2), L(2, 1, 1, 2, 4),   L(2, 1, 2, 1, 2),
            L(1, 1, 2, 2, 2), L(2, 2, 1, 1, 4), L(1, 2, 1, 2, 2), L(2, 1, 2, 1, 2, 2)};
  return {};
}

// The single-rank MoE loop: per step the sum of the micro-batches' gradients (each scaled by micro / global), the
// norm clipped, AdamW (decay everything but norms).
Reference moe_reference_run(const ModelConfig& cfg, int steps, double clip, int micro) {
  CpuDecoder<double> net(cfg, kSeed);
  const std::vector<double> start = start_params(cfg);
  std::ranges::copy(start, net.params().begin());
  std::vector<double> m(start.size(), 0), v(start.size(), 0);
  std::vector<std::uint8_t> mask(start.size(), 1);
  for (const model::Slot& s : net.layout())
    if (s.name.find("norm") != std::string::npos) std::fill_n(mask.begin() + std::ptrdiff_t(s.offset), s.size, 0);
  Reference r;
  for (int step = 1; step <= steps; ++step) {
    const Batch b = step_batch(cfg, step);
    net.zero_grads();
    r.loss.push_back(sum_over_micro_batches(net, b, cfg.seq, micro));
    r.norm.push_back(ops::cpu::clip_grad_norm(net.grads(), clip));
    const ops::cpu::AdamWParams hp{test_lr(step - 1), 0.9, 0.95, 1e-8, 0.1};
    ops::cpu::adamw_step(net.params(), net.grads(), m, v, hp, step, mask);
    if (cfg.moe.bias_update_rate > 0) net.update_expert_bias();
  }
  r.params.assign(net.params().begin(), net.params().end());
  return r;
}

TEST(ExpertParallel, OneStepMatchesTheSumOverMicroBatches) {
  const ModelConfig cfg = tiny("moe");
  const std::vector<double> start = start_params(cfg);
  const Batch b = random_batch(kGlobal, cfg.seq, cfg.vocab, 44);
  auto world = comm::world_communicator();
  int ran = 0;
  for (int micro : {1, 2}) {
    CpuDecoder<double> ref(cfg, kSeed);
    std::ranges::copy(start, ref.params().begin());
    ref.zero_grads();
    const double ref_loss = sum_over_micro_batches(ref, b, cfg.seq, micro);
    const double ref_norm = ops::cpu::grad_norm(ref.grads());
    for (const Layout& l : ep_layouts(world->size())) {
      if (!fits(l, cfg, micro)) continue;
      ++ran;
      ParallelCpuTrainer<double> t(*world, cfg, {l.shape, micro, kGlobal, {}}, kSeed);
      t.load_full(start);
      EXPECT_EQ(compare(ref.dense_layout(), t.full_params(), start, 0), "") << what(l, micro) << " (load_full)";
      const ParallelStepStats st = t.step(b.tokens, b.targets, 1e-3);
      EXPECT_NEAR(st.loss, ref_loss, 1e-10 * ref_loss) << what(l, micro);
      EXPECT_NEAR(st.grad_norm, ref_norm, 1e-10 * ref_norm) << what(l, micro);
      EXPECT_EQ(compare(ref.dense_layout(), t.full_grads(), ref.grads(), 1e-10, true), "") << what(l, micro);
    }
  }
  EXPECT_GE(ran, int(ep_layouts(world->size()).size()));
}

// Also with aux-loss-free balancing: the expert bias follows the step's load summed over the data-parallel ranks.
TEST(ExpertParallel, FiveStepsMatchTheSingleRankLoop) {
  constexpr int kSteps = 5;
  constexpr double kClip = 0.5;
  auto world = comm::world_communicator();
  for (double rate : {0.0, 0.05})
  for (int micro : {1, 2}) {
    ModelConfig cfg = tiny("moe");
    cfg.moe.bias_update_rate = rate;
    const std::vector<double> start = start_params(cfg);
    const Reference ref = moe_reference_run(cfg, kSteps, kClip, micro);
    ASSERT_GT(std::ranges::count_if(ref.norm, [](double v) { return v > kClip; }), 0) << "max_norm never clips";
    for (const Layout& l : ep_layouts(world->size())) {
      if (!fits(l, cfg, micro)) continue;
      ParallelCpuTrainer<double> t(*world, cfg, {l.shape, micro, kGlobal, training_hyper(kClip)}, kSeed);
      t.load_full(start);
      for (int step = 1; step <= kSteps; ++step) {
        const Batch b = step_batch(cfg, step);
        const ParallelStepStats st = t.step(b.tokens, b.targets, test_lr(step - 1));
        const std::size_t i = std::size_t(step - 1);
        EXPECT_NEAR(st.loss, ref.loss[i], 1e-9 * ref.loss[i]) << what(l, micro) << " step " << step;
        EXPECT_NEAR(st.grad_norm, ref.norm[i], 1e-9 * ref.norm[i]) << what(l, micro) << " step " << step;
      }
      EXPECT_EQ(compare(model::dense_layout(cfg), t.full_params(), ref.params, 1e-8), "") << what(l, micro);
    }
  }
}

TEST(ParallelCpuTrainer, FloatTrains) {  // the float instantiation against the float single-rank decoder
  const ModelConfig cfg = tiny("gpt");
  auto world = comm::world_communicator();
  const Layout l = layouts(world->size()).back();
  CpuDecoder<float> ref(cfg, kSeed);
  const Batch b = random_batch(kGlobal, cfg.seq, cfg.vocab, 5);
  ref.zero_grads();
  const double ref_loss = ref.forward_backward(b.tokens, b.targets, kGlobal, cfg.seq);
  ParallelCpuTrainer<float> t(*world, cfg, {l.shape, 1, kGlobal, training_hyper(1.0)}, kSeed);
  const ParallelStepStats st = t.step(b.tokens, b.targets, 1e-3);
  EXPECT_NEAR(st.loss, ref_loss, 1e-5 * ref_loss) << l.str();
  const std::vector<float> g = t.full_grads();
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < g.size(); ++i)
    err = std::max(err, double(std::abs(g[i] - ref.grads()[i]))), scale = std::max(scale, double(std::abs(ref.grads()[i])));
  EXPECT_LT(err, 1e-4 * scale) << l.str();
}

// Runs make() expecting Error{config} whose message contains `needle` (on this rank; every rank runs it).
template <class F>
void expect_config_error(F make, const std::string& needle) {
  try {
    make();
    ADD_FAILURE() << "no error; expected one naming '" << needle << "' on rank " << comm::world().rank;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::config) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ParallelCpuTrainer, BadLayoutsAndInputRaiseOnEveryRank) {
  auto world = comm::world_communicator();
  const int n = world->size();
  ModelConfig three = tiny("llama");
  three.layers = 3;
  if (n > 1)
    expect_config_error([&] { ParallelCpuTrainer<double>(*world, three, {{.pp = n}, 1, kGlobal, {}}, kSeed); },
                        "layers (3) is not divisible by pp·vp (" + std::to_string(n) + ")");
  const ModelConfig cfg = tiny("llama");
  expect_config_error([&] { ParallelCpuTrainer<double>(*world, cfg, {{.dp = n, .tp = 2}, 1, kGlobal, {}}, kSeed); },
                      "but the job has " + std::to_string(n));
  if (n > 1)
    expect_config_error([&] { ParallelCpuTrainer<double>(*world, cfg, {{.dp = n}, 1, 3, {}}, kSeed); },
                        "global batch (3) is not divisible by micro-batch·dp");
  OptimizerHyper bad;
  bad.clip = -1;
  expect_config_error([&] { ParallelCpuTrainer<double>(*world, cfg, {{.dp = n}, 1, kGlobal, bad}, kSeed); }, "clip");
  // Bad input to a good trainer: every rank raises before any collective, and the trainer still works after.
  ParallelCpuTrainer<double> t(*world, cfg, {{.dp = n}, 1, kGlobal, {}}, kSeed);
  Batch b = random_batch(kGlobal, cfg.seq, cfg.vocab, 9);
  expect_config_error([&] { t.step(std::span(b.tokens).first(5), b.targets, 1e-3); }, "global batch · seq");
  b.tokens[3] = cfg.vocab;
  expect_config_error([&] { t.step(b.tokens, b.targets, 1e-3); }, "outside the vocabulary");
  b.tokens[3] = 0;
  EXPECT_TRUE(std::isfinite(t.step(b.tokens, b.targets, 1e-3).loss));
}

// Expert-parallel layouts that do not fit: Error{config} on every rank, naming the problem.
TEST(ExpertParallel, BadLayoutsRaiseOnEveryRank) {
  auto world = comm::world_communicator();
  const int n = world->size();
  expect_config_error(
      [&] {
        ParallelCpuTrainer<double>(*world, tiny("llama"), {{.dp = n, .ep = n}, 1, kGlobal, {}}, kSeed);
      },
      "expert parallel (ep " + std::to_string(n) + ") needs a Mixture-of-Experts model");
  ModelConfig three = tiny("moe");
  three.moe.experts = 3;
  expect_config_error(
      [&] {
        ParallelCpuTrainer<double>(*world, three, {{.dp = n, .ep = 2}, 1, kGlobal, {}}, kSeed);
      },
      "experts (3) is not divisible by ep (2)");
  expect_config_error(
      [&] {
        ParallelCpuTrainer<double>(*world, tiny("moe"), {{.tp = n, .ep = n}, 1, kGlobal, {}}, kSeed);
      },
      "expert parallel with tp > 1 needs sequence parallel");
  expect_config_error(
      [&] {
        ParallelCpuTrainer<double>(*world, tiny("moe"), {{.pp = n, .ep = 2}, 1, kGlobal, {}}, kSeed);
      },
      "ep (2) does not divide the tp·cp·dp = 1·1·1 = 1 ranks of a pipeline stage");
}

}  // namespace
}  // namespace tb::parallel
