// decoder_cpu_parallel_test: the sharded CPU decoder (parallel/decoder_cpu_parallel.h) on groups of one rank, in one
// process, for the two tiny model variants (tiny_models.h) with parameters moved off their init:
//   - model::CpuDecoder is it: the same initial parameters, the layout model::dense_layout(cfg) slot for slot, and
//     the wrapper's forward_backward (LM head forward and backward fused) bit for bit equal to forward() then
//     backward() (the head's logits recomputed chunk by chunk), loss and every gradient;
//   - the LM-head chunk (1, 3, 7, 256 token rows) changes the loss and gradients by rounding only, on both paths;
//   - two stages chained by hand, the last one's forward_backward reading the input and writing its gradient, equal
//     one stage holding every layer;
//   - forward_backward off the last stage and a chunk below 1 raise tb::Error.
#include "parallel/decoder_cpu_parallel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/error.h"
#include "model/decoder_cpu.h"
#include "tiny_models.h"

namespace tb::parallel {
namespace {

using model::ModelConfig;

constexpr double kGradScale = 0.75;

// Parameters moved off their init (norm gains not 1, biases not 0), the same draws for any decoder of cfg.
template <class Span>
void perturb(Span params) {
  std::mt19937_64 g(11);
  std::uniform_real_distribution<double> u(-0.1, 0.1);
  for (auto& p : params) p += u(g);
}

// max |a - b| <= rel * max |b| over the whole buffer.
void expect_close(std::span<const double> a, std::span<const double> b, double rel, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    err = std::max(err, std::abs(a[i] - b[i])), scale = std::max(scale, std::abs(b[i]));
  EXPECT_GT(scale, 0) << what;
  EXPECT_LE(err, rel * scale) << what;
}

class Family : public ::testing::TestWithParam<std::string> {};

TEST_P(Family, CpuDecoderIsTheShardedDecoderOnGroupsOfOne) {
  const ModelConfig cfg = testing::tiny(GetParam(), 3);
  auto self = comm::make_self_communicator();
  model::CpuDecoder<double> one(cfg, 7);
  ShardedCpuDecoder<double> dec(cfg, {*self, *self});
  dec.init(7);
  ASSERT_TRUE(std::ranges::equal(one.params(), dec.params()));
  const model::DenseLayout full = model::dense_layout(cfg);
  ASSERT_EQ(one.layout().size(), full.slots.size());
  for (std::size_t i = 0; i < full.slots.size(); ++i) {
    EXPECT_EQ(one.layout()[i].name, full.slots[i].name);
    EXPECT_EQ(one.layout()[i].offset, full.slots[i].offset) << full.slots[i].name;
    EXPECT_EQ(one.layout()[i].shape, full.slots[i].shape) << full.slots[i].name;
  }
  perturb(one.params());
  perturb(dec.params());
  const testing::Tokens b = testing::random_tokens(2, cfg.seq, cfg.vocab, 5);
  for (int chunk : {5, 256}) {
    one.set_lm_head_chunk(chunk);
    dec.set_lm_head_chunk(chunk);
    one.zero_grads();
    dec.zero_grads();
    const double loss = one.forward_backward(b.tokens, b.targets, 2, cfg.seq, kGradScale);
    const double want = dec.forward(0, {b.tokens, b.targets, 2, cfg.seq});
    dec.backward(0, {}, {}, kGradScale);
    EXPECT_EQ(loss, want) << "chunk " << chunk;
    EXPECT_TRUE(std::ranges::equal(one.grads(), dec.grads())) << "chunk " << chunk;
    EXPECT_EQ(one.forward(b.tokens, b.targets, 2, cfg.seq), want) << "chunk " << chunk;
    EXPECT_EQ(dec.in_flight(), 0u);
  }
}

TEST_P(Family, LmHeadChunksChangeOnlyRounding) {
  const ModelConfig cfg = testing::tiny(GetParam(), 2);
  auto self = comm::make_self_communicator();
  const testing::Tokens b = testing::random_tokens(2, cfg.seq, cfg.vocab, 6);
  const MicroBatch mb{b.tokens, b.targets, 2, cfg.seq};
  ShardedCpuDecoder<double> ref(cfg, {*self, *self});
  ref.init(3);
  perturb(ref.params());
  const double ref_loss = ref.forward_backward(0, mb, kGradScale);  // 32 rows in one chunk
  for (int chunk : {1, 3, 7, 256}) {
    for (bool fused : {false, true}) {
      ShardedCpuDecoder<double> dec(cfg, {*self, *self});
      dec.load_full(ref.params());
      dec.set_lm_head_chunk(chunk);
      double loss = 0;
      if (fused) {
        loss = dec.forward_backward(0, mb, kGradScale);
      } else {
        loss = dec.forward(0, mb);
        dec.backward(0, {}, {}, kGradScale);
      }
      const std::string what = "chunk " + std::to_string(chunk) + (fused ? " fused" : "");
      EXPECT_NEAR(loss, ref_loss, 1e-14 * ref_loss) << what;
      expect_close(dec.grads(), ref.grads(), 1e-13, what);
    }
  }
}

// Layers [0, 1) then [1, 3), the last stage's forward_backward taking the input and giving its gradient.
TEST_P(Family, ChainedStagesWithAFusedLastStageEqualOneStage) {
  const ModelConfig cfg = testing::tiny(GetParam(), 3);
  auto self = comm::make_self_communicator();
  const testing::Tokens b = testing::random_tokens(2, cfg.seq, cfg.vocab, 7);
  const MicroBatch mb{b.tokens, b.targets, 2, cfg.seq};
  ShardedCpuDecoder<double> one(cfg, {*self, *self});
  ShardedCpuDecoder<double> s0(cfg, {*self, *self}, {.first_layer = 0, .last_layer = 1});
  ShardedCpuDecoder<double> s1(cfg, {*self, *self}, {.first_layer = 1});
  one.init(4);
  perturb(one.params());
  std::vector<double> full(one.params().begin(), one.params().end());
  s0.load_full(full);
  s1.load_full(full);
  const double want = one.forward_backward(0, mb, kGradScale);
  const std::size_t act = s0.activation_size(2, cfg.seq);
  std::vector<double> h(act), dh(act);
  s0.forward(0, mb, {}, h);
  const double loss = s1.forward_backward(0, mb, kGradScale, h, dh);
  s0.backward(0, dh, {});
  EXPECT_NEAR(loss, want, 1e-14 * want);
  std::vector<double> g(full.size(), 0.0);
  s0.add_grads_to_full(g);
  s1.add_grads_to_full(g);
  if (cfg.tied_embeddings) {  // the last stage's copy of the embedding went to embed.weight too
    EXPECT_EQ(s1.local_layout().slots[std::size_t(s1.local_layout().lm_head)].name, "embed.weight");
  }
  expect_close(g, one.grads(), 1e-13, "two stages");
  EXPECT_EQ(s0.in_flight() + s1.in_flight(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Variants, Family, ::testing::Values("llama", "gpt"), [](const auto& p) { return p.param; });

TEST(ShardedCpuDecoder, ForwardBackwardOffTheLastStageAndABadChunkRaise) {
  const ModelConfig cfg = testing::tiny("llama", 2);
  auto self = comm::make_self_communicator();
  ShardedCpuDecoder<double> first(cfg, {*self, *self}, {.first_layer = 0, .last_layer = 1});
  first.init(1);
  const testing::Tokens b = testing::random_tokens(1, cfg.seq, cfg.vocab, 8);
  EXPECT_THROW(first.forward_backward(0, {b.tokens, b.targets, 1, cfg.seq}), Error);
  EXPECT_EQ(first.in_flight(), 0u);
  EXPECT_THROW(first.set_lm_head_chunk(0), Error);
  model::CpuDecoder<double> one(cfg, 1);
  EXPECT_THROW(one.set_lm_head_chunk(-3), Error);
}

}  // namespace
}  // namespace tb::parallel
