// Tests model/decoder_cuda (the dense decoder on one GPU, bf16) against model/decoder_cpu in double, on the SAME
// parameters (the CPU decoder's, moved off their init so norm gains and biases are not 1 and 0, then rounded to
// bf16 and loaded into both): one forward_backward on a random batch, the mean loss within 1e-2 relative and every
// gradient slot within 5e-2 relative L2 error (per-slot errors printed). Configs (2 layers, vocab 512, seq 64,
// batch 2):
//   llama-like:    rmsnorm, swiglu, rope (theta 1e4), GQA 4/2, untied; head_dim 32 at d_model 128 (skipped with a
//                  message if cuDNN refuses head_dim 32) and head_dim 64 at d_model 256
//   gpt-like:      layernorm, gelu, learned positions, tied embeddings, MHA 4/4, head_dim 64
//   nemotron-like: layernorm1p, sqrelu, rope, GQA 4/2, head_dim 64
// Also: gradients accumulate (a second call without zero_grads doubles them), and a layout whose slots are not
// 256-byte aligned is refused with a config error. FP8 (linear layers, LM head, attention) within FP8 tolerances:
// loss 3e-2 relative, every gradient slot 0.25 relative L2. FP8 attention: llama-like at d_model 512 with 4 heads of
// 128 (cuDNN's FP8 backward on Hopper takes head_dim 128 only), current and delayed recipes, and full recompute;
// compared on the third call (the first runs attention's delayed scales at 1, the second's dq, dk, dv scales come
// from the first's underflowed gradients); it keeps fewer activation bytes than BF16 attention; refused without FP8
// linear layers and with the deterministic backward. Gradients sharing the activations' memory equal a separate
// buffer's bit for bit (BF16 and FP8, recompute modes, tied and untied embeddings, fp32 and bf16 gradients). bf16
// gradients match the CPU reference as fp32 ones do. Embedding rows gathered from other ranks add up (embedding and
// learned positions). Mixture of Experts (8 experts top 2, shared expert, the three losses): balanced routing's whole
// gradients, learned routing's loss and routing statistics, recompute modes bit for bit. Multi-head latent attention
// (dense and MoE, with and without query compression) likewise, see mla_config.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench/sysinfo.h"
#include "core/dtype.h"
#include "core/error.h"
#include "model/config.h"
#include "model/decoder_cpu.h"
#include "model/decoder_cuda.h"
#include "ops/cuda/context.h"
#include "ops/cuda/embedding.h"

namespace {

using tb::model::Act;
using tb::model::CpuDecoder;
using tb::model::CudaDecoder;
using tb::model::ModelConfig;
using tb::model::Norm;
using tb::model::Pos;

#define SKIP_WITHOUT_GPU() \
  if (tb::bench::visible_gpu_count() == 0) GTEST_SKIP() << tb::bench::no_gpu_reason()

constexpr double kLossRel = 1e-2;
constexpr double kGradRelL2 = 5e-2;
constexpr int kBatch = 2, kSeq = 64;

ModelConfig config(const std::string& family, int d_model, int head_dim) {
  ModelConfig c;
  c.name = "gpu-test-" + family;
  c.family = family;
  c.layers = 2, c.d_model = d_model, c.ffn = 2 * d_model, c.heads = 4, c.kv_heads = 2, c.head_dim = head_dim;
  c.vocab = 512, c.seq = kSeq;
  c.rope_theta = 10000.0;
  c.rope_scaling.enabled = false;
  if (family == "llama") {
    c.norm = Norm::rmsnorm, c.act = Act::swiglu, c.pos = Pos::rope;
  } else if (family == "gpt") {
    c.kv_heads = 4;
    c.norm = Norm::layernorm, c.act = Act::gelu, c.pos = Pos::learned, c.tied_embeddings = true;
  } else {
    c.norm = Norm::layernorm1p, c.act = Act::sqrelu, c.pos = Pos::rope;
  }
  return c;
}

float round_bf16(double x) { return tb::bf16_to_float(tb::float_to_bf16(float(x))); }

double rel_l2(const std::vector<double>& ref, const std::vector<double>& got) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Runs one forward_backward on both decoders with the same bf16-rounded parameters and compares. fp8: the CUDA
// decoder's linear layers in FP8 (current or delayed scaling), with FP8 tolerances; delayed scales (the recipe's, or
// FP8 attention's) warm up first.
// fp8_grad_rel > 0: the gradients' relative L2 bound instead of FP8's default 0.25. grads: the gradients' type.
// A router's gradient is a difference: softmax'(logits) times each chosen expert's output projected on dy, less
// their weighted mean, so the FP8 noise of those outputs and of the E5M2 dy (0.15-0.18 on every other gradient) cancels
// into a larger relative error: 0.74 measured on the middle layer of the three-layer MoE model (H100), the last
// layer's 0.14-0.16 (its dy is the LM head's, in BF16). A zero or sign-flipped router gradient gives 1 or 2.
constexpr double kFp8RouterRel = 0.9;

void compare_with_cpu(const ModelConfig& cfg, tb::model::Fp8Options fp8 = {},
                      CudaDecoder::Recompute rc = CudaDecoder::Recompute::none, double fp8_grad_rel = 0,
                      tb::DType grads = tb::DType::f32) {
  const double loss_rel = fp8.enabled ? 3e-2 : kLossRel;
  const double grad_rel = fp8_grad_rel > 0 ? fp8_grad_rel : fp8.enabled ? 0.25 : kGradRelL2;
  CpuDecoder<double> cpu(cfg, 1234);
  // Move every parameter off its init: vectors (norm gains, biases) by N(0, 0.1), matrices scaled up to std ~0.05
  // so attention is not uniform; then round to bf16 so both backends see exactly the same values.
  std::mt19937_64 rng(99);
  std::normal_distribution<double> nd(0.0, 1.0);
  for (const tb::model::Slot& s : cpu.layout()) {
    auto p = cpu.params().subspan(s.offset, s.size);
    for (double& v : p) v = s.shape.size() == 1 ? v + 0.1 * nd(rng) : 2.5 * v;
  }
  std::vector<float> host(cpu.params().size());
  for (std::size_t i = 0; i < host.size(); ++i) {
    host[i] = round_bf16(cpu.params()[i]);
    cpu.params()[i] = host[i];
  }

  std::vector<std::int32_t> tokens(kBatch * kSeq), targets(kBatch * kSeq);
  std::uniform_int_distribution<int> u(0, cfg.vocab - 1);
  for (auto& t : tokens) t = u(rng);
  for (auto& t : targets) t = u(rng);

  cpu.zero_grads();
  const double loss_cpu = cpu.forward_backward(tokens, targets, kBatch, kSeq);

  tb::ops::DeviceContext dc(0);
  CudaDecoder gpu(dc, cfg, rc, false, fp8);
  gpu.set_grad_type(grads);
  gpu.load_params(host);
  gpu.zero_grads();
  // Delayed scaling starts from scale 1: one call fills the amax history first; FP8 attention two (see the top).
  const int warmup = fp8.attention ? 2 : fp8.delayed ? 1 : 0;
  for (int i = 0; i < warmup; ++i) {
    gpu.forward_backward(tokens.data(), targets.data(), kBatch, kSeq);
    gpu.zero_grads();
  }
  const double loss_gpu = gpu.forward_backward(tokens.data(), targets.data(), kBatch, kSeq);
  std::printf("%s%s%s%s%s%s%s: loss cpu %.6f gpu %.6f (rel %.2e)\n", cfg.name.c_str(),
              grads == tb::DType::bf16 ? " bf16 gradients" : "",
              fp8.enabled ? (fp8.delayed ? " fp8 delayed" : " fp8 current") : "",
              fp8.enabled && fp8.grad == tb::DType::e4m3 ? " all-e4m3" : "", fp8.lm_head ? " + lm head" : "",
              fp8.attention ? " + fp8 attention" : "", rc == CudaDecoder::Recompute::full ? " (recompute full)" : "",
              loss_cpu, loss_gpu,
              std::abs(loss_gpu - loss_cpu) / std::abs(loss_cpu));
  EXPECT_NEAR(loss_gpu, loss_cpu, loss_rel * std::abs(loss_cpu));

  const std::vector<float> g = gpu.grads_to_host();
  ASSERT_EQ(g.size(), cpu.grads().size());
  for (const tb::model::Slot& s : cpu.layout()) {
    std::vector<double> ref(cpu.grads().begin() + std::ptrdiff_t(s.offset),
                            cpu.grads().begin() + std::ptrdiff_t(s.offset + s.size));
    std::vector<double> got(g.begin() + std::ptrdiff_t(s.offset), g.begin() + std::ptrdiff_t(s.offset + s.size));
    double ref_norm = 0;
    bool finite = true;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      ref_norm += ref[i] * ref[i];
      finite = finite && std::isfinite(got[i]);
    }
    const double err = rel_l2(ref, got);
    std::printf("  %-28s rel L2 %.3e  |ref| %.3e\n", s.name.c_str(), err, std::sqrt(ref_norm));
    EXPECT_TRUE(finite) << s.name;
    EXPECT_LT(err, fp8.enabled && s.name.find(".router.") != std::string::npos ? kFp8RouterRel : grad_rel) << s.name;
  }

  if (fp8.delayed || fp8.attention) return;  // the scales move between calls: accumulation is checked without them
  // Accumulation: a second call without zero_grads adds the same gradients again.
  const double loss2 = gpu.forward_backward(tokens.data(), targets.data(), kBatch, kSeq);
  EXPECT_NEAR(loss2, loss_gpu, 1e-6 * std::abs(loss_gpu));
  const std::vector<float> g2 = gpu.grads_to_host();
  std::vector<double> twice(g.size()), got2(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) twice[i] = 2.0 * g[i], got2[i] = g2[i];
  EXPECT_LT(rel_l2(twice, got2), grads == tb::DType::bf16 ? 4e-3 : 1e-3);  // bf16: a second rounding (2^-9)
}

// Runs compare_with_cpu, skipping (not failing) when cuDNN refuses the attention shape.
void run_or_skip_unsupported(const ModelConfig& cfg) {
  try {
    compare_with_cpu(cfg);
  } catch (const tb::Error& e) {
    if (e.kind() == tb::Error::Kind::unsupported) GTEST_SKIP() << "cuDNN refuses " << cfg.name << ": " << e.what();
    throw;
  }
}

TEST(CudaDecoder, LlamaLikeHeadDim32MatchesCpu) {
  SKIP_WITHOUT_GPU();
  ModelConfig c = config("llama", 128, 32);
  c.name += "-hd32";
  run_or_skip_unsupported(c);
}

TEST(CudaDecoder, LlamaLikeHeadDim64MatchesCpu) {
  SKIP_WITHOUT_GPU();
  ModelConfig c = config("llama", 256, 64);
  c.name += "-hd64";
  compare_with_cpu(c);
}

TEST(CudaDecoder, GptLikeMatchesCpu) {
  SKIP_WITHOUT_GPU();
  compare_with_cpu(config("gpt", 256, 64));
}

TEST(CudaDecoder, NemotronLikeMatchesCpu) {
  SKIP_WITHOUT_GPU();
  compare_with_cpu(config("nemotron", 256, 64));
}

// Mixture of Experts (model/moe_mlp_cuda.h): llama-like with 8 experts of width 128, top 2, the aux, sequence-aux and
// z losses on. Balanced routing, so that bf16 rounding cannot flip a token's experts: the whole model's gradients
// (router, every expert, the shared expert) against the CPU; sigmoid scores with scale 2.5 and no shared expert as
// well. Learned routing's kernels are checked exactly in tests/ops/moe_gpu_test.cpp; here its loss.
ModelConfig moe_config(bool sigmoid) {
  ModelConfig c = config("llama", 256, 64);
  c.name = sigmoid ? "gpu-test-moe-sigmoid" : "gpu-test-moe";
  c.layers = 3;
  auto& m = c.moe;
  m.experts = 8, m.top_k = 2, m.expert_ffn = 128, m.dense_first = 1;
  m.shared_ffn = sigmoid ? 0 : 128;
  m.aux_loss = 0.05, m.seq_aux_loss = 0.05, m.z_loss = 0.01;
  m.routing = tb::model::Routing::balanced;
  if (sigmoid) m.score = tb::model::RouterScore::sigmoid, m.scale = 2.5;
  return c;
}

TEST(CudaDecoder, MoeMatchesCpu) {
  SKIP_WITHOUT_GPU();
  compare_with_cpu(moe_config(false));
  compare_with_cpu(moe_config(true));
  compare_with_cpu(moe_config(false), {}, CudaDecoder::Recompute::full);
}

// The one-device proxy of an ep rank (MoeConfig ep_proxy 4: two held experts; token_share 2: the MoE layers on half the
// rows) against the CPU's proxy: loss and every gradient.
TEST(CudaDecoder, MoeProxyMatchesCpu) {
  SKIP_WITHOUT_GPU();
  ModelConfig cfg = moe_config(false);
  cfg.name = "gpu-test-moe-proxy";
  cfg.moe.ep_proxy = 4, cfg.moe.token_share = 2;
  compare_with_cpu(cfg);
}

TEST(CudaDecoder, MoeLearnedRoutingLossAndStatsMatchCpu) {
  SKIP_WITHOUT_GPU();
  ModelConfig cfg = moe_config(false);
  cfg.moe.routing = tb::model::Routing::learned;
  CpuDecoder<double> cpu(cfg, 1234);
  std::vector<float> host(cpu.params().size());
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = round_bf16(cpu.params()[i]), cpu.params()[i] = host[i];
  std::mt19937_64 rng(4);
  std::vector<std::int32_t> tokens(kBatch * kSeq), targets(kBatch * kSeq);
  std::uniform_int_distribution<int> u(0, cfg.vocab - 1);
  for (auto& t : tokens) t = u(rng);
  for (auto& t : targets) t = u(rng);
  cpu.zero_grads();
  cpu.reset_moe_stats();
  const double loss_cpu = cpu.forward_backward(tokens, targets, kBatch, kSeq);
  tb::ops::DeviceContext dc(0);
  CudaDecoder gpu(dc, cfg, CudaDecoder::Recompute::none, false);
  gpu.load_params(host);
  gpu.zero_grads();
  gpu.reset_moe_stats();
  const double loss_gpu = gpu.forward_backward(tokens.data(), targets.data(), kBatch, kSeq);
  EXPECT_NEAR(loss_gpu, loss_cpu, kLossRel * loss_cpu);
  const tb::model::MoeStats a = cpu.moe_stats(), b = gpu.moe_stats();
  ASSERT_EQ(b.tokens_per_expert.size(), a.tokens_per_expert.size());
  std::int64_t sum = 0, moved = 0;
  for (std::size_t i = 0; i < a.tokens_per_expert.size(); ++i)
    sum += b.tokens_per_expert[i], moved += std::abs(b.tokens_per_expert[i] - a.tokens_per_expert[i]);
  EXPECT_EQ(sum, std::int64_t(kBatch) * kSeq * cfg.moe.top_k * cfg.moe_layers());
  EXPECT_LE(moved, 8) << "more than a few pairs routed elsewhere than on the CPU";
  EXPECT_NEAR(b.aux, a.aux, 2e-2 * a.aux);
  EXPECT_NEAR(b.z, a.z, 2e-2 * a.z);
  EXPECT_NEAR(b.objective, a.objective, 2e-2 * a.objective);
  std::printf("moe learned: loss cpu %.6f gpu %.6f; aux %.5f / %.5f; pairs routed elsewhere %lld\n", loss_cpu, loss_gpu,
              a.aux, b.aux, static_cast<long long>(moved));
}

// Recomputation changes what is kept, not what is computed: selective and full give the loss and gradients of
// none (to attention's run-to-run noise: cuDNN's default backward accumulates dQ with atomics; deterministic here,
// so equal bit for bit), and keep less: full < selective < none activation bytes.
void compare_recompute(const ModelConfig& cfg) {
  tb::ops::DeviceContext dc(0);
  std::mt19937_64 rng(5);
  std::vector<float> host(tb::model::dense_layout(cfg).total);
  CpuDecoder<float> init(cfg, 77);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = init.params()[i];
  std::vector<std::int32_t> tokens(kBatch * kSeq), targets(kBatch * kSeq);
  std::uniform_int_distribution<int> u(0, cfg.vocab - 1);
  for (auto& t : tokens) t = u(rng);
  for (auto& t : targets) t = u(rng);
  std::vector<float> ref;
  double ref_loss = 0;
  std::size_t bytes_prev = 0;
  for (auto rc : {CudaDecoder::Recompute::none, CudaDecoder::Recompute::selective, CudaDecoder::Recompute::full}) {
    CudaDecoder gpu(dc, cfg, rc, /*deterministic=*/true);
    gpu.load_params(host);
    gpu.zero_grads();
    const double loss = gpu.forward_backward(tokens.data(), targets.data(), kBatch, kSeq);
    const std::vector<float> g = gpu.grads_to_host();
    const std::size_t bytes = gpu.activation_bytes();
    EXPECT_EQ(bytes, CudaDecoder::activation_bytes(cfg, kBatch, kSeq, rc));
    if (rc == CudaDecoder::Recompute::none) {
      ref = g, ref_loss = loss;
    } else {
      EXPECT_EQ(loss, ref_loss) << cfg.name << " recompute " << int(rc);
      std::size_t differ = 0;
      for (std::size_t i = 0; i < g.size(); ++i) differ += g[i] != ref[i];
      EXPECT_EQ(differ, 0u) << cfg.name << " recompute " << int(rc) << ": gradients differ from no recompute";
      EXPECT_LT(bytes, bytes_prev) << "recompute " << int(rc) << " should keep fewer activations";
    }
    bytes_prev = bytes;
  }
}

TEST(CudaDecoder, RecomputeGivesTheSameGradients) {
  SKIP_WITHOUT_GPU();
  compare_recompute(config("llama", 256, 64));
  compare_recompute(config("gpt", 256, 64));
  compare_recompute(config("nemotron", 256, 64));
  ModelConfig moe = moe_config(false);
  moe.moe.routing = tb::model::Routing::learned;
  compare_recompute(moe);
}

// zero_grads_for_overwrite + forward_backward gives the gradients of zero_grads + forward_backward, whatever the
// gradient buffer held before (here: two accumulated calls), to fp32 summation order (the beta = 0 GEMM plans may
// pick other algorithms than the accumulating ones); a slot left unzeroed would be off by 100%.
TEST(CudaDecoder, OverwriteStartEqualsZeroedStart) {
  SKIP_WITHOUT_GPU();
  for (const char* family : {"llama", "gpt"}) {
    const ModelConfig cfg = config(family, 256, 64);
    tb::ops::DeviceContext dc(0);
    CpuDecoder<float> init(cfg, 3);
    std::vector<float> host(init.params().begin(), init.params().end());
    std::mt19937_64 rng(8);
    std::vector<std::int32_t> tokens(kBatch * kSeq), targets(kBatch * kSeq);
    std::uniform_int_distribution<int> u(0, cfg.vocab - 1);
    for (auto& t : tokens) t = u(rng);
    for (auto& t : targets) t = u(rng);
    CudaDecoder gpu(dc, cfg, CudaDecoder::Recompute::none, /*deterministic=*/true);
    gpu.load_params(host);
    gpu.zero_grads();
    gpu.forward_backward(tokens.data(), targets.data(), kBatch, kSeq);
    const std::vector<float> want = gpu.grads_to_host();
    gpu.forward_backward(tokens.data(), targets.data(), kBatch, kSeq);  // the buffer now holds 2x
    gpu.zero_grads_for_overwrite();
    gpu.forward_backward(tokens.data(), targets.data(), kBatch, kSeq);
    const std::vector<float> got = gpu.grads_to_host();
    std::vector<double> w(want.begin(), want.end()), g(got.begin(), got.end());
    EXPECT_LT(rel_l2(w, g), 1e-4) << family;
  }
}

// The embedding rows of other ranks (gather_embedding_rows, data or tensor parallel with untied embeddings): handed
// this rank's own rows twice, as a second replica with the same micro-batch would send them, the embedding's and the
// learned positions' gradients double (each gathered block of rows at the positions of its [batch, seq] rows) and
// every other slot is unchanged bit for bit. GPT-like with untied embeddings (learned positions).
TEST(CudaDecoder, GatheredEmbeddingRowsAddUp) {
  SKIP_WITHOUT_GPU();
  ModelConfig cfg = config("gpt", 256, 64);
  cfg.tied_embeddings = false;
  tb::ops::DeviceContext dc(0);
  CpuDecoder<float> init(cfg, 5);
  const std::vector<float> host(init.params().begin(), init.params().end());
  std::mt19937_64 rng(17);
  std::uniform_int_distribution<int> u(0, cfg.vocab - 1);
  std::vector<std::int32_t> tokens(kBatch * kSeq), targets(kBatch * kSeq);
  for (auto& t : tokens) t = u(rng);
  for (auto& t : targets) t = u(rng);
  const std::int64_t n = std::int64_t(kBatch) * kSeq, d = cfg.d_model;
  CudaDecoder one(dc, cfg, CudaDecoder::Recompute::none, true), two(dc, cfg, CudaDecoder::Recompute::none, true);
  tb::ops::DeviceBuffer rows(dc.device(), std::size_t(2 * n * d) * sizeof(CudaDecoder::bf16));
  tb::ops::DeviceBuffer toks(dc.device(), std::size_t(2 * n) * sizeof(std::int32_t));
  tb::ops::DeviceBuffer ws(dc.device(), tb::ops::embedding_backward_workspace_bytes(2 * n, cfg.vocab, d));
  two.gather_embedding_rows = [&](const CudaDecoder::bf16* dnext, const std::int32_t* tok, std::int64_t count) {
    EXPECT_EQ(count, n);
    for (int k = 0; k < 2; ++k) {
      TB_CHECK(cudaMemcpyAsync(rows.as<CudaDecoder::bf16>() + k * n * d, dnext, std::size_t(n * d) * 2,
                               cudaMemcpyDeviceToDevice, dc.stream()));
      TB_CHECK(cudaMemcpyAsync(toks.as<std::int32_t>() + k * n, tok, std::size_t(n) * 4, cudaMemcpyDeviceToDevice,
                               dc.stream()));
    }
    return CudaDecoder::EmbeddingRows{rows.as<CudaDecoder::bf16>(), toks.as<std::int32_t>(), 2 * n, ws.get(),
                                      ws.bytes()};
  };
  for (CudaDecoder* x : {&one, &two}) {
    x->load_params(host);
    x->zero_grads();
    x->forward_backward(tokens.data(), targets.data(), kBatch, kSeq);
  }
  const std::vector<float> g1 = one.grads_to_host(), g2 = two.grads_to_host();
  for (const tb::model::Slot& s : one.dense_layout().slots) {
    const bool doubled = s.name == "embed.weight" || s.name == "pos_embed.weight";
    double err = 0, scale = 0;
    for (std::size_t i = s.offset; i < s.offset + s.size; ++i) {
      err = std::max(err, std::fabs(double(g2[i]) - (doubled ? 2.0 : 1.0) * double(g1[i])));
      scale = std::max(scale, std::fabs(double(g1[i])));
    }
    ASSERT_GT(scale, 0) << s.name;
    EXPECT_LE(err, doubled ? 1e-6 * scale : 0.0) << s.name;
  }
}

// Gradients in the activations' memory (share_grads_with_activations, model/grad_sharing.h) equal a separate
// buffer's bit for bit: two steps on different batches (the second starts over the first's leftovers in the shared
// bytes, so a gradient slot read before it is written, or an activation placed over a live gradient, shows), against
// a decoder with its own buffer started by zero_grads_for_overwrite (the same GEMM plans). The arena with the
// gradients inside takes fewer bytes than arena + gradients, and shared_arena_bytes() predicts it exactly.
void compare_shared_grads(const ModelConfig& cfg, CudaDecoder::Recompute rc, const tb::model::Fp8Options& fp8 = {},
                          tb::DType grads = tb::DType::f32) {
  tb::ops::DeviceContext dc(0);
  CpuDecoder<float> init(cfg, 21);
  const std::vector<float> host(init.params().begin(), init.params().end());
  CudaDecoder sep(dc, cfg, rc, /*deterministic=*/true, fp8), shr(dc, cfg, rc, /*deterministic=*/true, fp8);
  sep.set_grad_type(grads), shr.set_grad_type(grads);
  sep.load_params(host), shr.load_params(host);
  shr.share_grads_with_activations();
  std::mt19937_64 rng(13);
  std::uniform_int_distribution<int> u(0, cfg.vocab - 1);
  const std::string what = cfg.name + " recompute " + std::to_string(int(rc)) + (fp8.enabled ? " fp8" : "") +
                           (grads == tb::DType::bf16 ? " bf16 gradients" : "");
  for (int step = 0; step < 2; ++step) {
    std::vector<std::int32_t> tokens(kBatch * kSeq), targets(kBatch * kSeq);
    for (auto& t : tokens) t = u(rng);
    for (auto& t : targets) t = u(rng);
    sep.zero_grads_for_overwrite();
    const double want_loss = sep.forward_backward(tokens.data(), targets.data(), kBatch, kSeq);
    const double got_loss = shr.forward_backward(tokens.data(), targets.data(), kBatch, kSeq);
    const std::vector<float> want = sep.grads_to_host(), got = shr.grads_to_host();
    EXPECT_EQ(got_loss, want_loss) << what << " step " << step;
    std::size_t differ = 0;
    for (std::size_t i = 0; i < want.size(); ++i) differ += !(got[i] == want[i]);
    EXPECT_EQ(differ, 0u) << what << " step " << step << ": gradients differ from the separate buffer's";
  }
  const std::size_t grad_bytes = tb::model::dense_layout(cfg).total * tb::dtype_size(grads);
  EXPECT_TRUE(shr.shares_grads() && !sep.shares_grads());
  EXPECT_LT(shr.activation_bytes(), sep.activation_bytes() + grad_bytes) << what;
  EXPECT_EQ(shr.activation_bytes() - grad_bytes, CudaDecoder::shared_arena_bytes(cfg, kBatch, kSeq, rc, fp8, 1, grads))
      << what;
}

TEST(CudaDecoder, SharedGradientsEqualSeparateOnes) {
  SKIP_WITHOUT_GPU();
  for (const char* family : {"llama", "gpt", "nemotron"})  // untied; tied with learned positions; layernorm biases
    for (auto rc : {CudaDecoder::Recompute::none, CudaDecoder::Recompute::full})
      compare_shared_grads(config(family, 256, 64), rc);
  tb::model::Fp8Options fp8;
  fp8.enabled = fp8.lm_head = true;
  compare_shared_grads(config("llama", 256, 64), CudaDecoder::Recompute::none, fp8);
  fp8.delayed = true;
  compare_shared_grads(config("llama", 256, 64), CudaDecoder::Recompute::selective, fp8);
  for (const char* family : {"llama", "gpt"})  // bf16 gradients
    compare_shared_grads(config(family, 256, 64), CudaDecoder::Recompute::none, {}, tb::DType::bf16);
  compare_shared_grads(config("llama", 256, 64), CudaDecoder::Recompute::none, fp8, tb::DType::bf16);
}

// bf16 gradients (set_grad_type): every family against the CPU reference within the same bounds (a bf16 rounding,
// 2^-9, is far inside 5e-2), with the FP8 LM head too; their accumulation adds a second rounding.
TEST(CudaDecoder, Bf16GradientsMatchCpu) {
  SKIP_WITHOUT_GPU();
  for (const char* family : {"llama", "gpt", "nemotron"})
    compare_with_cpu(config(family, 256, 64), {}, CudaDecoder::Recompute::none, 0, tb::DType::bf16);
  tb::model::Fp8Options fp8;
  fp8.enabled = fp8.lm_head = true;
  compare_with_cpu(config("llama", 256, 64), fp8, CudaDecoder::Recompute::none, 0, tb::DType::bf16);
}

TEST(CudaDecoder, SharedGradientsRefuseSeveralActivationSetsAndAForwardWithoutOverwrite) {
  SKIP_WITHOUT_GPU();
  const ModelConfig cfg = config("llama", 256, 64);
  tb::ops::DeviceContext dc(0);
  CudaDecoder gpu(dc, cfg);
  gpu.share_grads_with_activations();
  EXPECT_THROW(gpu.prepare(kBatch, kSeq, 2), tb::Error);
  gpu.prepare(kBatch, kSeq);
  EXPECT_THROW(gpu.share_grads_with_activations(), tb::Error);  // after prepare()
  tb::ops::DeviceBuffer ids(0, 2 * kBatch * kSeq * sizeof(std::int32_t)), loss(0, sizeof(float));
  auto* t = ids.as<std::int32_t>();
  EXPECT_THROW(gpu.forward_backward_device(t, t + kBatch * kSeq, kBatch, kSeq, 1.0, loss.as<float>()), tb::Error);
}

TEST(CudaDecoder, Fp8MatchesCpuWithinFp8Error) {
  SKIP_WITHOUT_GPU();
  tb::model::Fp8Options current;
  current.enabled = true;
  tb::model::Fp8Options delayed = current;
  delayed.delayed = true;
  compare_with_cpu(config("llama", 256, 64), current);
  compare_with_cpu(config("nemotron", 256, 64), current);
  compare_with_cpu(config("llama", 256, 64), delayed);
  current.lm_head = delayed.lm_head = true;  // the LM head in FP8 too (current scaling in both recipes)
  compare_with_cpu(config("llama", 256, 64), current);
  compare_with_cpu(config("gpt", 256, 64), current);  // tied embeddings: the head's W is the embedding table
  compare_with_cpu(config("llama", 256, 64), delayed);
  current.grad = delayed.grad = tb::DType::e4m3;  // all-E4M3: every gradient cast, GEMM and the head's dlogits
  compare_with_cpu(config("llama", 256, 64), current);
  compare_with_cpu(config("llama", 256, 64), delayed);
}

// FP8 experts (per-expert scaling, aligned rows), current and delayed scaling, with the shared expert and balanced
// routing (the CPU's experts); a proxy with capacity padding; and the capacity-padded layer in BF16.
TEST(CudaDecoder, MoeFp8AndCapacityMatchCpu) {
  SKIP_WITHOUT_GPU();
  tb::model::Fp8Options current;
  current.enabled = true;
  tb::model::Fp8Options delayed = current;
  delayed.delayed = true;
  compare_with_cpu(moe_config(false), current);
  compare_with_cpu(moe_config(true), delayed);
  ModelConfig capped = moe_config(false);
  capped.name = "gpu-test-moe-capacity";
  capped.moe.capacity_factor = 1.0, capped.moe.pad_to_capacity = true;
  compare_with_cpu(capped);
  capped.moe.ep_proxy = 2;
  compare_with_cpu(capped, current);
}

TEST(CudaDecoder, Fp8AttentionMatchesCpuWithinFp8Error) {
  SKIP_WITHOUT_GPU();
  const ModelConfig cfg = config("llama", 512, 128);  // 4 heads x 128 = d_model, 2 KV heads
  tb::model::Fp8Options current;
  current.enabled = current.attention = true;
  tb::model::Fp8Options delayed = current;
  delayed.delayed = true;
  tb::model::Fp8Options linear_only = current;
  linear_only.attention = false;
  // At this config the FP8 linear layers alone give 0.19-0.26 (the control), FP8 attention 0.24-0.29 (E5M2 dO, dS,
  // dq, dk, dv on the way to every earlier parameter; measured on an H200); a wrong tensor gives O(1) (a stale fc2 X^T
  // under full recompute gave 1.2).
  constexpr double kRel = 0.35;
  const auto none = CudaDecoder::Recompute::none, full = CudaDecoder::Recompute::full;
  compare_with_cpu(cfg, linear_only, none, kRel);  // the control
  compare_with_cpu(cfg, current, none, kRel);
  compare_with_cpu(cfg, delayed, none, kRel);
  compare_with_cpu(cfg, current, full, kRel);      // qkv8 and o8 in the shared copy, recomputed
  compare_with_cpu(cfg, linear_only, full, kRel);  // fc2's X^T recomputed too
  current.grad = tb::DType::e4m3;                   // all-E4M3: dO, dS, dq, dk, dv in E4M3 too
  compare_with_cpu(cfg, current, none, kRel);
  // Per layer FP8 attention keeps qkv8 and o8 (1 byte) instead of qkv and o (2 bytes), at the price of one shared
  // bf16 copy of each and its backward's FP8 scratch: less memory from 4 layers on.
  ModelConfig deep = cfg;
  deep.layers = 8;
  EXPECT_LT(CudaDecoder::activation_bytes(deep, kBatch, kSeq, CudaDecoder::Recompute::none, current),
            CudaDecoder::activation_bytes(deep, kBatch, kSeq, CudaDecoder::Recompute::none, linear_only));
}

TEST(CudaDecoder, Fp8AttentionRefusesWithoutFp8LayersAndWhenDeterministic) {
  SKIP_WITHOUT_GPU();
  tb::ops::DeviceContext dc(0);
  const ModelConfig cfg = config("llama", 512, 128);
  tb::model::Fp8Options fp8;
  fp8.attention = true;  // but not enabled
  try {
    CudaDecoder d(dc, cfg, CudaDecoder::Recompute::none, false, fp8);
    ADD_FAILURE() << "FP8 attention without FP8 linear layers was accepted";
  } catch (const tb::Error& e) {
    EXPECT_EQ(e.kind(), tb::Error::Kind::config) << e.what();
  }
  fp8.enabled = true;
  try {
    CudaDecoder d(dc, cfg, CudaDecoder::Recompute::none, /*deterministic=*/true, fp8);
    d.prepare(kBatch, kSeq);
    ADD_FAILURE() << "FP8 attention with the deterministic backward was accepted";
  } catch (const tb::Error& e) {
    EXPECT_EQ(e.kind(), tb::Error::Kind::config) << e.what();
    EXPECT_NE(std::string(e.what()).find("deterministic"), std::string::npos) << e.what();
  }
}

// Multi-head latent attention (model/attention_mla_cuda.h): DeepSeek-V3's head widths (qk 128 + rope 64, v 128) on 2
// heads at d_model 256, kv_lora_rank 128 and q_lora_rank 256 (or 0: no query compression); dense, and in DeepSeek-V3's
// MoE form (8 experts top 2, sigmoid scores, routed scale 2.5, a shared expert, the first layer dense; balanced routing
// as the MoE tests). Against the CPU: the loss and every gradient slot (the latent norms, W_dq, W_uq or W_q, W_dkv,
// W_ukv, W_o) in each recompute mode; recompute bit for bit with fewer bytes kept; gradients in the activations'
// memory bit for bit (the latent norms' gradients are zeroed just in time as the other norms'); FP8, tensor and
// context parallel refused.
ModelConfig mla_config(int q_lora_rank, bool moe) {
  ModelConfig c = moe ? moe_config(true) : config("llama", 256, 192);
  c.name = std::string("gpu-test-mla") + (moe ? "-moe" : "") + (q_lora_rank == 0 ? "-noq" : "");
  c.heads = c.kv_heads = 2, c.head_dim = 192;
  c.attention = tb::model::AttentionKind::mla;
  c.mla = {.q_lora_rank = q_lora_rank, .kv_lora_rank = 128, .qk_nope_head_dim = 128, .qk_rope_head_dim = 64,
           .v_head_dim = 128};
  if (moe) c.moe.shared_ffn = 128;
  return c;
}

TEST(CudaDecoder, MlaMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (auto rc : {CudaDecoder::Recompute::none, CudaDecoder::Recompute::selective, CudaDecoder::Recompute::full})
    compare_with_cpu(mla_config(256, false), {}, rc);
  compare_with_cpu(mla_config(0, false));
  compare_with_cpu(mla_config(256, false), {}, CudaDecoder::Recompute::none, 0, tb::DType::bf16);
}

TEST(CudaDecoder, MlaMoeMatchesCpu) {
  SKIP_WITHOUT_GPU();
  compare_with_cpu(mla_config(256, true));
  compare_with_cpu(mla_config(0, true), {}, CudaDecoder::Recompute::full);
}

TEST(CudaDecoder, MlaRecomputeAndSharedGradients) {
  SKIP_WITHOUT_GPU();
  compare_recompute(mla_config(256, false));
  compare_recompute(mla_config(0, false));
  for (auto rc : {CudaDecoder::Recompute::none, CudaDecoder::Recompute::full})
    compare_shared_grads(mla_config(256, false), rc);
}

TEST(CudaDecoder, MlaRefusesFp8TensorAndContextParallel) {
  SKIP_WITHOUT_GPU();
  tb::ops::DeviceContext dc(0);
  const ModelConfig cfg = mla_config(256, false);
  tb::model::Fp8Options fp8;
  fp8.enabled = true;
  try {
    CudaDecoder gpu(dc, cfg, CudaDecoder::Recompute::none, false, fp8);
    ADD_FAILURE() << "FP8 MLA accepted";
  } catch (const tb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("BF16 only"), std::string::npos) << e.what();
  }
  CudaDecoder gpu(dc, cfg);
  tb::model::TensorParallelOps tp;
  tp.size = 2;
  tp.all_gather = [](__nv_bfloat16*, std::size_t) {};
  tp.reduce_scatter = [](const __nv_bfloat16*, __nv_bfloat16*, std::size_t) {};
  EXPECT_THROW(gpu.set_tensor_parallel(tp), tb::Error);
  tb::model::ContextParallelOps cp;
  cp.size = 2;
  cp.all_gather = [](const __nv_bfloat16*, __nv_bfloat16*, std::size_t) {};
  cp.reduce_scatter = [](const __nv_bfloat16*, __nv_bfloat16*, std::size_t) {};
  EXPECT_THROW(gpu.set_context_parallel(cp), tb::Error);
}

TEST(CudaDecoder, RefusesMisalignedLayout) {
  SKIP_WITHOUT_GPU();
  tb::ops::DeviceContext dc(0);
  ModelConfig c = config("llama", 128, 32);
  c.d_model = 96, c.ffn = 192, c.heads = 3, c.kv_heads = 1;  // norm weights of 96 elements misalign what follows
  EXPECT_THROW({ CudaDecoder decoder(dc, c); }, tb::Error);
}

}  // namespace
