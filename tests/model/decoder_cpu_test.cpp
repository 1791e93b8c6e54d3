// Tests model/decoder_cpu (the dense decoder on the CPU reference ops: parallel/decoder_cpu_parallel.h on one rank)
// on tiny configs of each family variant: llama-like (rmsnorm, swiglu, rope with Llama 3.1 scaling, GQA), gpt-like
// (layernorm, gelu, learned positions, tied embeddings, MHA) and nemotron-like (layernorm1p, sqrelu, rope, GQA):
//   - the whole model's gradient in double against central finite differences on ~200 parameters drawn from
//     every slot (parameters moved off their init first, so norm gains and biases are not at 1 and 0);
//   - gradient accumulation: two half batches with grad_scale 0.5 == one full batch;
//   - determinism (same seed, same parameters and loss), float against double, initial loss ~ ln(vocab);
//   - the layout (contiguous slots, the lead's param_count) and bad inputs raising tb::Error;
//   - the same on three MoE variants (softmax with a shared expert and a dense first layer; sigmoid with a routed
//     scale and capacity dropping; the first as a one-device proxy of expert parallel 2 with a token share of 2), the
//     objective being the LM loss plus the aux, sequence-aux and z losses;
//   - the proxy of expert parallel against the full model with tied experts; the token share's rows.
//   - and on multi-head latent attention (model/config.h MlaConfig), dense with query compression, and without it in
//     DeepSeek-V3's MoE form (sigmoid scores, routed scale, shared expert, a dense first layer).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/config.h"
#include "model/decoder_cpu.h"

namespace {

using tb::model::Act;
using tb::model::CpuDecoder;
using tb::model::ModelConfig;
using tb::model::Norm;
using tb::model::Pos;

ModelConfig tiny(const std::string& family) {
  ModelConfig c;
  c.name = "test-" + family;
  c.family = family;
  c.layers = 2, c.d_model = 16, c.heads = 4, c.kv_heads = 2, c.head_dim = 4, c.vocab = 37, c.seq = 8;
  if (family == "llama") {
    c.ffn = 24;
    c.norm = Norm::rmsnorm, c.act = Act::swiglu, c.pos = Pos::rope;
    c.rope_theta = 10000.0;
    // inv_freq = {1, 0.01}: wavelengths 6.3 (< 1024/4: unchanged) and 628 (between 256 and 1024: smoothed).
    c.rope_scaling.enabled = true;
    c.rope_scaling.original_max_position = 1024;
  } else if (family == "gpt") {
    c.ffn = 32, c.kv_heads = 4;
    c.norm = Norm::layernorm, c.act = Act::gelu, c.pos = Pos::learned, c.tied_embeddings = true;
  } else if (family == "moe" || family == "moe_sigmoid" || family == "moe_proxy") {  // llama with MoE (every loss)
    c.ffn = 24;
    c.norm = Norm::rmsnorm, c.act = Act::swiglu, c.pos = Pos::rope;
    c.rope_theta = 10000.0;
    c.moe.experts = 4, c.moe.top_k = 2, c.moe.expert_ffn = 12;
    c.moe.aux_loss = 0.1, c.moe.seq_aux_loss = 0.05, c.moe.z_loss = 0.01;
    if (family == "moe" || family == "moe_proxy") {  // softmax, a shared expert, the first layer dense
      c.moe.shared_ffn = 8, c.moe.dense_first = 1;
      if (family == "moe_proxy") c.moe.ep_proxy = 2, c.moe.token_share = 2;  // one rank of ep 2 x tp 2
    } else {  // DeepSeek-V3's sigmoid scores with a routed scale, GELU experts, capacity 1 (drops pairs)
      c.act = Act::gelu;
      c.moe.score = tb::model::RouterScore::sigmoid, c.moe.scale = 2.5, c.moe.capacity_factor = 1.0;
    }
  } else if (family == "mla" || family == "mla_moe") {  // llama with multi-head latent attention
    c.ffn = 24;
    c.norm = Norm::rmsnorm, c.act = Act::swiglu, c.pos = Pos::rope;
    c.rope_theta = 10000.0;
    c.rope_scaling.enabled = true;
    c.rope_scaling.original_max_position = 1024;
    c.attention = tb::model::AttentionKind::mla;
    // odd widths, so a swapped dimension fails: Rq 6 (0: no query compression), Rkv 5, qk 3 + rope 4, v 2
    c.mla = {.q_lora_rank = family == "mla" ? 6 : 0, .kv_lora_rank = 5, .qk_nope_head_dim = 3, .qk_rope_head_dim = 4,
             .v_head_dim = 2};
    c.kv_heads = c.heads, c.head_dim = 7;
    if (family == "mla_moe") {  // DeepSeek-V3's MLP: sigmoid scores, a routed scale, a shared expert, a dense layer
      c.layers = 3;
      c.moe.experts = 4, c.moe.top_k = 2, c.moe.expert_ffn = 12, c.moe.shared_ffn = 8, c.moe.dense_first = 1;
      c.moe.score = tb::model::RouterScore::sigmoid, c.moe.scale = 2.5;
      c.moe.aux_loss = 0.1, c.moe.seq_aux_loss = 0.05, c.moe.z_loss = 0.01;
    }
  } else {
    c.ffn = 32;
    c.norm = Norm::layernorm1p, c.act = Act::sqrelu, c.pos = Pos::rope;
    c.rope_theta = 10000.0;
  }
  return c;
}

// The objective forward_backward differentiates: the LM loss plus the MoE losses (0 for a dense model).
double objective(CpuDecoder<double>& m, const std::vector<std::int32_t>& tokens,
                 const std::vector<std::int32_t>& targets, int batch, int seq) {
  m.reset_moe_stats();
  const double loss = m.forward(tokens, targets, batch, seq);
  return loss + m.moe_stats().objective;
}

struct Batch {
  std::vector<std::int32_t> tokens, targets;
};

Batch random_batch(int n, int vocab, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_int_distribution<int> u(0, vocab - 1);
  Batch b;
  for (int i = 0; i < n; ++i) b.tokens.push_back(u(g)), b.targets.push_back(u(g));
  return b;
}

class Family : public ::testing::TestWithParam<std::string> {};

TEST_P(Family, WholeModelGradientMatchesFiniteDifferences) {
  const ModelConfig cfg = tiny(GetParam());
  CpuDecoder<double> m(cfg, 7);
  m.set_lm_head_chunk(5);  // 14 tokens: chunks of 5, 5, 4
  std::mt19937_64 g(11);
  std::uniform_real_distribution<double> u(-0.3, 0.3);
  for (double& p : m.params()) p += u(g);  // off the init: gains not 1, biases not 0
  const int batch = 2, seq = 7;
  Batch b = random_batch(batch * seq, cfg.vocab, 12);
  // No two tokens with the same prefix (the first two of each sequence distinct from all others): such tokens have
  // equal states, so equal routing weights, and a tie at the capacity boundary is a step the differences would see.
  for (int i = 0; i < batch; ++i) b.tokens[std::size_t(i * seq)] = i, b.tokens[std::size_t(i * seq + 1)] = batch + i;
  m.zero_grads();
  m.reset_moe_stats();
  const double loss = m.forward_backward(b.tokens, b.targets, batch, seq) + m.moe_stats().objective;
  EXPECT_NEAR(objective(m, b.tokens, b.targets, batch, seq), loss, 1e-14);
  if (cfg.moe.enabled()) {
    EXPECT_GT(m.moe_stats().objective, 0.0);
  }
  const std::vector<double> grad(m.grads().begin(), m.grads().end());

  const auto slots = m.layout();
  const std::size_t per_slot = (200 + slots.size() - 1) / slots.size();
  const double h = 1e-6;
  int checked = 0;
  double worst = 0;
  for (const auto& s : slots) {
    std::uniform_int_distribution<std::size_t> pick(0, s.size - 1);
    for (std::size_t k = 0; k < per_slot; ++k) {
      const std::size_t i = s.offset + pick(g);
      double& p = m.params()[i];
      const double saved = p;
      p = saved + h;
      const double lp = objective(m, b.tokens, b.targets, batch, seq);
      p = saved - h;
      const double lm = objective(m, b.tokens, b.targets, batch, seq);
      p = saved;
      const double num = (lp - lm) / (2 * h);
      const double err = std::abs(grad[i] - num) / (1e-5 * std::max(std::abs(grad[i]), std::abs(num)) + 1e-9);
      worst = std::max(worst, err);
      EXPECT_LE(err, 1.0) << s.name << "[" << i - s.offset << "]: analytic " << grad[i] << " numeric " << num;
      ++checked;
    }
  }
  EXPECT_GE(checked, 200);
  RecordProperty("worst_err_over_tol", std::to_string(worst));
}

TEST_P(Family, TwoHalfMicroBatchesEqualOneFullBatch) {
  ModelConfig cfg = tiny(GetParam());
  // The per-micro-batch aux loss and the capacity of a micro-batch's tokens do not add up over halves (z and the
  // sequence-level loss do).
  cfg.moe.aux_loss = 0, cfg.moe.capacity_factor = 0;
  if (cfg.moe.token_share > 1) GTEST_SKIP() << "a proxy's token share is the first rows of each micro-batch";
  CpuDecoder<double> full(cfg, 3), halves(cfg, 3);
  const int batch = 4, seq = cfg.seq;
  const Batch b = random_batch(batch * seq, cfg.vocab, 4);
  full.zero_grads();
  const double loss = full.forward_backward(b.tokens, b.targets, batch, seq);
  halves.zero_grads();
  const std::size_t half = b.tokens.size() / 2;
  const std::span<const std::int32_t> tok(b.tokens), tgt(b.targets);
  const double l1 = halves.forward_backward(tok.first(half), tgt.first(half), batch / 2, seq, 0.5);
  const double l2 = halves.forward_backward(tok.last(half), tgt.last(half), batch / 2, seq, 0.5);
  EXPECT_NEAR(0.5 * (l1 + l2), loss, 1e-13);
  const auto gf = full.grads(), gh = halves.grads();
  double scale = 0;
  for (double x : gf) scale = std::max(scale, std::abs(x));
  ASSERT_GT(scale, 0);
  for (std::size_t i = 0; i < gf.size(); ++i) ASSERT_NEAR(gh[i], gf[i], 1e-12 * scale) << i;
  // forward_backward accumulates: a second full call doubles the gradient.
  full.forward_backward(b.tokens, b.targets, batch, seq);
  for (std::size_t i = 0; i < gf.size(); i += 97) EXPECT_NEAR(full.grads()[i], 2 * gh[i], 1e-12 * scale) << i;
  full.zero_grads();
  for (double x : full.grads()) ASSERT_EQ(x, 0.0);
}

TEST_P(Family, DeterministicAndStartsNearLnVocab) {
  const ModelConfig cfg = tiny(GetParam());
  CpuDecoder<double> a(cfg, 42), b(cfg, 42), c(cfg, 43);
  ASSERT_EQ(a.params().size(), b.params().size());
  EXPECT_TRUE(std::equal(a.params().begin(), a.params().end(), b.params().begin()));
  EXPECT_FALSE(std::equal(a.params().begin(), a.params().end(), c.params().begin()));
  const Batch x = random_batch(3 * cfg.seq, cfg.vocab, 5);
  const double la = a.forward(x.tokens, x.targets, 3, cfg.seq);
  EXPECT_EQ(la, b.forward(x.tokens, x.targets, 3, cfg.seq));
  EXPECT_NEAR(la, std::log(double(cfg.vocab)), 0.1 * std::log(double(cfg.vocab)));
  // float: the same initial values (drawn in double), and the same loss to float precision.
  CpuDecoder<float> f(cfg, 42);
  for (std::size_t i = 0; i < f.params().size(); ++i) ASSERT_EQ(f.params()[i], float(a.params()[i])) << i;
  EXPECT_NEAR(f.forward(x.tokens, x.targets, 3, cfg.seq), la, 1e-5 * la);
}

TEST_P(Family, LayoutIsContiguousAndMatchesParamCount) {
  const ModelConfig cfg = tiny(GetParam());
  CpuDecoder<float> m(cfg, 1);
  std::size_t next = 0;
  std::set<std::string> names;
  for (const auto& s : m.layout()) {
    EXPECT_EQ(s.offset, next) << s.name;
    EXPECT_TRUE(names.insert(s.name).second) << "duplicate " << s.name;
    next += s.size;
  }
  EXPECT_EQ(next, m.params().size());
  EXPECT_EQ(m.grads().size(), m.params().size());
  EXPECT_EQ(std::int64_t(m.params().size()), tb::model::param_count(cfg));
  EXPECT_EQ(names.count("lm_head.weight"), cfg.tied_embeddings ? 0u : 1u);
  EXPECT_EQ(names.count("pos_embed.weight"), cfg.pos == Pos::learned ? 1u : 0u);
  EXPECT_EQ(names.count("layers.1.norm2.bias"), cfg.norm == Norm::rmsnorm ? 0u : 1u);
  if (cfg.is_mla()) {  // W_uq (or W_q), W_dkv, W_ukv, W_o, the latent norms; no fused qkv
    const auto& a = cfg.mla;
    const std::size_t q_in = a.q_lora_rank > 0 ? a.q_lora_rank : cfg.d_model;
    EXPECT_EQ(m.param(a.q_lora_rank > 0 ? "layers.1.attn.q_up.weight" : "layers.1.attn.q.weight").size(),
              std::size_t(cfg.heads * a.qk_head_dim()) * q_in);
    EXPECT_EQ(names.count("layers.1.attn.q_down.weight"), a.q_lora_rank > 0 ? 1u : 0u);
    EXPECT_EQ(names.count("layers.1.attn.q_norm.weight"), a.q_lora_rank > 0 ? 1u : 0u);
    EXPECT_EQ(m.param("layers.1.attn.kv_down.weight").size(),
              std::size_t((a.kv_lora_rank + a.qk_rope_head_dim) * cfg.d_model));
    EXPECT_EQ(m.param("layers.1.attn.kv_up.weight").size(),
              std::size_t(cfg.heads * (a.qk_nope_head_dim + a.v_head_dim) * a.kv_lora_rank));
    EXPECT_EQ(m.param("layers.1.attn.out.weight").size(), std::size_t(cfg.d_model * cfg.heads * a.v_head_dim));
    EXPECT_EQ(m.param("layers.1.attn.kv_norm.weight")[0], 1.0f);
    EXPECT_EQ(names.count("layers.1.attn.qkv.weight"), 0u);
    return;
  }
  const auto qkv = m.param("layers.1.attn.qkv.weight");
  EXPECT_EQ(qkv.size(), std::size_t((cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim * cfg.d_model));
  const float w0 = m.param("layers.0.norm1.weight")[0];
  EXPECT_EQ(w0, cfg.norm == Norm::layernorm1p ? 0.0f : 1.0f);
  EXPECT_THROW(m.param("layers.9.attn.qkv.weight"), tb::Error);
}

INSTANTIATE_TEST_SUITE_P(Variants, Family,
                         ::testing::Values("llama", "gpt", "nemotron", "moe", "moe_sigmoid", "moe_proxy", "mla",
                                           "mla_moe"),
                         [](const auto& tp) { return tp.param; });

// A proxy of expert parallel 2 (ep_proxy) holds experts 0 and 1 and runs a pair routed to expert e on e mod 2: the
// model of all four experts with expert 2 tied to 0 and 3 to 1. Same objective; a held expert's gradient is the sum
// of its two tied copies', every other gradient the same.
TEST(CpuDecoder, ExpertParallelProxyIsTheModelWithTiedExperts) {
  ModelConfig proxy_cfg = tiny("moe");
  proxy_cfg.moe.ep_proxy = 2;
  const ModelConfig full_cfg = tiny("moe");
  CpuDecoder<double> proxy(proxy_cfg, 5), full(full_cfg, 6);
  auto held = [](const std::string& name) {  // the proxy's slot a full-model slot is tied to
    const auto at = name.find(".experts.");
    if (at == std::string::npos) return name;
    const auto e0 = at + 9, e1 = name.find('.', e0);
    return name.substr(0, e0) + std::to_string(std::stoi(name.substr(e0, e1 - e0)) % 2) + name.substr(e1);
  };
  std::set<std::string> proxy_slots;
  for (const auto& s : proxy.layout()) proxy_slots.insert(s.name);
  for (const auto& s : full.layout()) {
    ASSERT_TRUE(proxy_slots.count(held(s.name))) << s.name;
    const auto from = proxy.param(held(s.name));
    std::copy(from.begin(), from.end(), full.param(s.name).begin());
  }
  EXPECT_LT(proxy.params().size(), full.params().size());
  const int batch = 2, seq = 7;
  const Batch b = random_batch(batch * seq, proxy_cfg.vocab, 8);
  proxy.zero_grads(), full.zero_grads();
  proxy.reset_moe_stats(), full.reset_moe_stats();
  const double lp = proxy.forward_backward(b.tokens, b.targets, batch, seq) + proxy.moe_stats().objective;
  const double lf = full.forward_backward(b.tokens, b.targets, batch, seq) + full.moe_stats().objective;
  EXPECT_NEAR(lp, lf, 1e-13);
  EXPECT_EQ(proxy.moe_stats().tokens_per_expert, full.moe_stats().tokens_per_expert);  // counted by routed expert
  for (const auto& s : proxy.layout()) {
    std::vector<double> sum(s.size, 0.0);
    for (const auto& f : full.layout())
      if (held(f.name) == s.name)
        for (std::size_t i = 0; i < s.size; ++i) sum[i] += full.grads()[f.offset + i];
    double scale = 0;
    for (double v : sum) scale = std::max(scale, std::abs(v));
    for (std::size_t i = 0; i < s.size; ++i)
      ASSERT_NEAR(proxy.grads()[s.offset + i], sum[i], 1e-12 * scale + 1e-15) << s.name << "[" << i << "]";
  }
}

// Aux-loss-free balancing: the bias starts at 0, a step's update is rate · sign(mean - load) of the pairs its forwards
// routed (the tokens per expert), and the next forward chooses by s + b (a large rate moves the routing).
TEST(CpuDecoder, ExpertBiasFollowsTheStepsLoad) {
  ModelConfig cfg = tiny("moe_sigmoid");
  cfg.moe.capacity_factor = 0, cfg.moe.bias_update_rate = 0.5;
  CpuDecoder<double> m(cfg, 5);
  const int batch = 2, seq = 7;
  const Batch b = random_batch(batch * seq, cfg.vocab, 10);
  m.reset_moe_stats();
  ASSERT_EQ(m.expert_bias().size(), std::size_t(cfg.moe_layers() * cfg.moe.experts));
  for (double v : m.expert_bias()) ASSERT_EQ(v, 0.0);
  m.forward(b.tokens, b.targets, batch, seq);
  const auto load = m.moe_stats().tokens_per_expert;
  m.update_expert_bias();
  const int E = cfg.moe.experts;
  for (int l = 0; l < cfg.moe_layers(); ++l) {
    double mean = 0;
    for (int i = 0; i < E; ++i) mean += double(load[std::size_t(l * E + i)]) / E;
    for (int i = 0; i < E; ++i) {
      const double c = double(load[std::size_t(l * E + i)]);
      EXPECT_EQ(m.expert_bias()[std::size_t(l * E + i)], 0.5 * double((c < mean) - (c > mean))) << l << " " << i;
    }
  }
  m.reset_moe_stats();
  m.forward(b.tokens, b.targets, batch, seq);
  EXPECT_NE(m.moe_stats().tokens_per_expert, load) << "a bias of +-0.5 moved no choice";
}

// A proxy's token share of 2: the MoE layer routes the first half of the micro-batch's rows (k pairs each), so a token
// that only the second sequence sees changes none of its routing.
TEST(CpuDecoder, TokenShareRunsTheMoeLayerOnTheFirstRows) {
  ModelConfig cfg = tiny("moe");
  cfg.moe.token_share = 2;
  CpuDecoder<double> m(cfg, 5);
  const int batch = 2, seq = 7;
  Batch b = random_batch(batch * seq, cfg.vocab, 9);
  m.reset_moe_stats();
  m.forward(b.tokens, b.targets, batch, seq);
  const auto counts = m.moe_stats().tokens_per_expert;
  std::int64_t pairs = 0;
  for (auto c : counts) pairs += c;
  EXPECT_EQ(pairs, std::int64_t(batch * seq / 2 * cfg.moe.top_k));  // one MoE layer (the first is dense)
  b.tokens.back() = (b.tokens.back() + 1) % cfg.vocab;  // a token of the second sequence: rows 7..13
  m.reset_moe_stats();
  m.forward(b.tokens, b.targets, batch, seq);
  EXPECT_EQ(m.moe_stats().tokens_per_expert, counts);
}

TEST(CpuDecoder, OutputProjectionsAreScaledDown) {
  const ModelConfig cfg = tiny("llama");
  CpuDecoder<double> m(cfg, 9);
  auto rms = [](std::span<double> v) {
    double s = 0;
    for (double x : v) s += x * x;
    return std::sqrt(s / double(v.size()));
  };
  EXPECT_NEAR(rms(m.param("layers.0.attn.qkv.weight")), 0.02, 0.003);
  EXPECT_NEAR(rms(m.param("layers.0.mlp.fc2.weight")), 0.02 / std::sqrt(2.0 * cfg.layers), 0.002);
  EXPECT_NEAR(rms(m.param("layers.1.attn.out.weight")), 0.02 / std::sqrt(2.0 * cfg.layers), 0.002);
}

TEST(CpuDecoder, BadInputsRaise) {
  const ModelConfig cfg = tiny("llama");
  CpuDecoder<double> m(cfg, 1);
  Batch b = random_batch(2 * cfg.seq, cfg.vocab, 2);
  EXPECT_NO_THROW(m.forward(b.tokens, b.targets, 2, cfg.seq));
  Batch bad = b;
  bad.tokens[3] = cfg.vocab;
  EXPECT_THROW(m.forward(bad.tokens, bad.targets, 2, cfg.seq), tb::Error);
  bad = b;
  bad.tokens[0] = -1;
  EXPECT_THROW(m.forward_backward(bad.tokens, bad.targets, 2, cfg.seq), tb::Error);
  bad = b;
  bad.targets[5] = cfg.vocab + 3;
  EXPECT_THROW(m.forward(bad.tokens, bad.targets, 2, cfg.seq), tb::Error);
  const Batch longer = random_batch(cfg.seq + 1, cfg.vocab, 3);
  EXPECT_THROW(m.forward(longer.tokens, longer.targets, 1, cfg.seq + 1), tb::Error);  // seq > cfg.seq
  EXPECT_THROW(m.forward(b.tokens, b.targets, 3, cfg.seq), tb::Error);                // too few tokens
  EXPECT_THROW(m.forward(b.tokens, b.targets, 0, cfg.seq), tb::Error);
  try {
    m.forward(longer.tokens, longer.targets, 1, cfg.seq + 1);
  } catch (const tb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("seq 9"), std::string::npos) << e.what();
  }
  ModelConfig wrong = cfg;
  wrong.kv_heads = 3;  // does not divide 4 heads
  EXPECT_THROW(CpuDecoder<double>(wrong, 1), tb::Error);
}

}  // namespace
