// Tests LoRA in the CPU decoder (parallel::ShardedCpuDecoder on one rank, through model::CpuDecoder) at fp64, on tiny
// models with every parameter moved off its init (B not zero, so A's gradient is not zero either):
//   - against a direct computation: with dropout off, the LoRA model's loss is the base model's with the adapters
//     merged into its weights (W[block] += s B A), and its adapters' gradients are dB = s dW[block] A^T and
//     dA = s B^T dW[block] of that merged model's weight gradient; the frozen base has no gradient at all;
//   - finite differences of the whole model in its adapters, for each target set (fused, canonical, mlperf, an
//     explicit list, a GELU model's up), dropout off; and with dropout on (a step's masks are fixed);
//   - dropout: deterministic for a seed and step (bitwise), another step or seed draws other masks, two half batches
//     (their first sequences 0 and 2) accumulate to the whole batch's gradient (the mask keyed by the token's place in
//     the step's batch);
//   - five AdamW steps (ParallelCpuTrainer on one rank, weight decay on): every frozen parameter bit-identical, every
//     adapter moved.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "../parallel/tiny_models.h"
#include "comm/communicator.h"
#include "model/config.h"
#include "model/decoder_cpu.h"
#include "parallel/trainer_cpu.h"

namespace {

using namespace tb::model;

ModelConfig tiny(const std::string& family, unsigned targets, double dropout = 0) {
  ModelConfig c;
  c.name = "test-lora-" + family;
  c.family = family;
  c.layers = 2, c.d_model = 16, c.heads = 4, c.kv_heads = 2, c.head_dim = 4, c.vocab = 29, c.seq = 8;
  c.ffn = 24, c.rope_theta = 10000.0;
  if (family == "gpt") {
    c.kv_heads = 4;
    c.norm = Norm::layernorm, c.act = Act::gelu, c.pos = Pos::learned, c.tied_embeddings = true;
  } else if (family == "nemotron") {
    c.norm = Norm::layernorm1p, c.act = Act::sqrelu;
  }
  c.lora = {.rank = 3, .alpha = 5, .dropout = dropout, .targets = targets, .seed = 17};
  return c;
}

using Batch = tb::parallel::testing::Tokens;
using tb::parallel::testing::random_tokens;

void move_off_init(std::span<double> p, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(-0.3, 0.3);
  for (double& x : p) x += u(g);
}

struct Case {
  std::string family;
  unsigned targets;
};

class Targets : public ::testing::TestWithParam<Case> {};

TEST_P(Targets, EqualsTheBaseModelWithMergedAdapters) {
  const ModelConfig c = tiny(GetParam().family, GetParam().targets);
  ModelConfig c0 = c;
  c0.lora = {};
  CpuDecoder<double> lora(c, 3), base(c0, 3);
  move_off_init(lora.params(), 4);
  const DenseLayout& L = lora.dense_layout();
  const DenseLayout& L0 = base.dense_layout();
  ASSERT_EQ(L.grad_total + L0.total, L.total);  // the base's slots, then the adapters
  std::copy_n(lora.params().begin(), L0.total, base.params().begin());
  const double s = c.lora.scale();
  for (const DenseLayout::Layer& l : L.layers)
    for (int w : {l.qkv, l.out, l.fc1, l.fc2})
      for (const Adapter& ad : l.lora(w)) {  // W[row0 + i, j] += s sum_q B[i, q] A[q, j]
        const Slot &ws = L.slots[std::size_t(w)], &a = L.slots[std::size_t(ad.a)], &b = L.slots[std::size_t(ad.b)];
        const std::int64_t in = ws.shape[1], r = c.lora.rank;
        for (std::int64_t i = 0; i < ad.rows; ++i)
          for (std::int64_t j = 0; j < in; ++j) {
            double sum = 0;
            for (std::int64_t q = 0; q < r; ++q)
              sum += lora.params()[b.offset + i * r + q] * lora.params()[a.offset + q * in + j];
            base.params()[ws.offset + (ad.row0 + i) * in + j] += s * sum;
          }
      }
  const int batch = 2, seq = 7;
  const Batch x = random_tokens(batch, seq, c.vocab, 5);
  lora.zero_grads(), base.zero_grads();
  const double loss = lora.forward_backward(x.tokens, x.targets, batch, seq);
  EXPECT_NEAR(loss, base.forward_backward(x.tokens, x.targets, batch, seq), 1e-12 * loss);
  EXPECT_EQ(lora.grads().size(), L.grad_total);  // the adapters' only
  for (const Slot& sl : L.slots) EXPECT_EQ(sl.has_grad(), sl.tags.role == ParamRole::adapter) << sl.name;
  int adapters = 0;
  for (const DenseLayout::Layer& l : L.layers)
    for (int w : {l.qkv, l.out, l.fc1, l.fc2})
      for (const Adapter& ad : l.lora(w)) {
        ++adapters;
        const Slot &ws = L.slots[std::size_t(w)], &a = L.slots[std::size_t(ad.a)], &b = L.slots[std::size_t(ad.b)];
        const std::int64_t in = ws.shape[1], r = c.lora.rank;
        auto dw = [&](std::int64_t i, std::int64_t j) { return base.grads()[ws.offset + (ad.row0 + i) * in + j]; };
        auto pa = [&](std::int64_t q, std::int64_t j) { return lora.params()[a.offset + q * in + j]; };
        auto pb = [&](std::int64_t i, std::int64_t q) { return lora.params()[b.offset + i * r + q]; };
        for (std::int64_t q = 0; q < r; ++q) {
          for (std::int64_t i = 0; i < ad.rows; ++i) {
            double want = 0;
            for (std::int64_t j = 0; j < in; ++j) want += s * dw(i, j) * pa(q, j);
            EXPECT_NEAR(lora.grads()[b.grad_offset + i * r + q], want, 1e-11) << b.name;
          }
          for (std::int64_t j = 0; j < in; ++j) {
            double want = 0;
            for (std::int64_t i = 0; i < ad.rows; ++i) want += s * pb(i, q) * dw(i, j);
            EXPECT_NEAR(lora.grads()[a.grad_offset + q * in + j], want, 1e-11) << a.name;
          }
        }
      }
  EXPECT_GT(adapters, 0);
}

// Finite differences of the loss in m's adapters (up to 16 elements of each) against its gradient.
void check_adapters_by_finite_differences(const ModelConfig& c) {
  CpuDecoder<double> m(c, 7);
  move_off_init(m.params(), 8);
  const int batch = 2, seq = 7;
  const Batch b = random_tokens(batch, seq, c.vocab, 9);
  m.zero_grads();
  m.forward_backward(b.tokens, b.targets, batch, seq);
  const std::vector<double> grad(m.grads().begin(), m.grads().end());
  std::mt19937_64 g(10);
  const double h = 1e-6;
  int checked = 0;
  for (const Slot& s : m.layout()) {
    if (!s.has_grad()) continue;
    std::uniform_int_distribution<std::size_t> pick(0, s.size - 1);
    for (int k = 0; k < 16; ++k) {
      const std::size_t i = pick(g);
      double& p = m.params()[s.offset + i];
      const double saved = p;
      p = saved + h;
      const double lp = m.forward(b.tokens, b.targets, batch, seq);
      p = saved - h;
      const double lm = m.forward(b.tokens, b.targets, batch, seq);
      p = saved;
      const double num = (lp - lm) / (2 * h), an = grad[s.grad_offset + i];
      EXPECT_LE(std::abs(an - num), 1e-5 * std::max(std::abs(an), std::abs(num)) + 1e-9)
          << s.name << "[" << i << "]: analytic " << an << " numeric " << num;
      ++checked;
    }
  }
  EXPECT_GE(checked, 120);
}

TEST_P(Targets, AdapterGradientsMatchFiniteDifferences) {
  check_adapters_by_finite_differences(tiny(GetParam().family, GetParam().targets));
}

// The masks are fixed for a step (a function of seed, step and position, not of the parameters): the loss stays
// differentiable, and the differences check the dropout's backward too.
TEST(LoraDropout, AdapterGradientsMatchFiniteDifferencesWithDropoutOn) {
  check_adapters_by_finite_differences(tiny("llama", kLoraCanonical, 0.3));
}

INSTANTIATE_TEST_SUITE_P(Sets, Targets,
                         ::testing::Values(Case{"llama", kLoraFused}, Case{"llama", kLoraCanonical},
                                           Case{"gpt", kLoraMlperf}, Case{"nemotron", kLoraQ | kLoraV | kLoraDown},
                                           Case{"gpt", kLoraUp | kLoraO}),
                         [](const auto& param_info) {
                           const Case& c = param_info.param;
                           std::string n = c.family + "_" + lora_targets_name(c.targets);
                           for (char& ch : n)
                             if (ch == ',') ch = '_';
                           return n;
                         });

TEST(LoraDropout, DeterministicPerSeedAndStepAndKeyedByTheTokensPlace) {
  const ModelConfig c = tiny("llama", kLoraCanonical, 0.3);
  const int batch = 4, seq = 8;
  const Batch b = random_tokens(batch, seq, c.vocab, 11);
  auto run = [&](const ModelConfig& cfg, std::int64_t step) {
    CpuDecoder<double> m(cfg, 12);
    move_off_init(m.params(), 13);
    m.zero_grads();
    const double loss = m.forward_backward(b.tokens, b.targets, batch, seq, 1.0, step);
    return std::pair{loss, std::vector<double>(m.grads().begin(), m.grads().end())};
  };
  const auto [l1, g1] = run(c, 1);
  const auto [l1b, g1b] = run(c, 1);
  EXPECT_EQ(l1, l1b);
  EXPECT_EQ(g1, g1b);
  EXPECT_NE(run(c, 2).first, l1);  // another step, other masks
  ModelConfig other_seed = c;
  other_seed.lora.seed += 1;
  EXPECT_NE(run(other_seed, 1).first, l1);
  ModelConfig no_dropout = c;
  no_dropout.lora.dropout = 0;
  EXPECT_NE(run(no_dropout, 1).first, l1);
  // two half batches, sequences 0-1 and 2-3 of step 1, accumulate to the whole batch
  CpuDecoder<double> halves(c, 12);
  move_off_init(halves.params(), 13);
  halves.zero_grads();
  const std::size_t half = b.tokens.size() / 2;
  const std::span<const std::int32_t> tok(b.tokens), tgt(b.targets);
  const double h1 = halves.forward_backward(tok.first(half), tgt.first(half), batch / 2, seq, 0.5, 1, 0);
  const double h2 = halves.forward_backward(tok.last(half), tgt.last(half), batch / 2, seq, 0.5, 1, batch / 2);
  EXPECT_NEAR(0.5 * (h1 + h2), l1, 1e-13);
  for (std::size_t i = 0; i < g1.size(); ++i) EXPECT_NEAR(halves.grads()[i], g1[i], 1e-12) << i;
}

TEST(LoraTraining, FrozenWeightsStayBitIdenticalOverFiveAdamWSteps) {
  const ModelConfig c = tiny("llama", kLoraCanonical, 0.1);
  const auto self = tb::comm::make_self_communicator();
  tb::parallel::ParallelTrainSpec spec;
  spec.global_batch = 2;
  spec.hyper.weight_decay = 0.1;
  tb::parallel::ParallelCpuTrainer<double> t(*self, c, spec, 21);
  CpuDecoder<double> start(c, 21);
  move_off_init(start.params(), 22);  // B not zero: A trains from the first step
  t.load_full(start.params());
  for (int step = 1; step <= 5; ++step) {
    const Batch b = random_tokens(2, c.seq, c.vocab, 30 + std::uint64_t(step));
    const auto st = t.step(b.tokens, b.targets, 1e-2);
    EXPECT_TRUE(std::isfinite(st.loss) && st.grad_norm > 0);
  }
  const std::vector<double> end = t.full_params();
  for (const Slot& s : start.layout()) {
    bool same = true;
    for (std::size_t i = s.offset; i < s.offset + s.size; ++i) same = same && end[i] == start.params()[i];
    const bool adapter = s.tags.role == ParamRole::adapter;  // by its role: a base that trains fails here too
    EXPECT_EQ(same, !adapter) << s.name << (adapter ? " did not train" : " changed while frozen");
  }
}

}  // namespace
