// Tests the CUDA decoder with LoRA (model/decoder_cuda.h, model/lora_cuda.h) against the CPU decoder in double on the
// same parameters (moved off their init so B is not zero, then rounded to bf16): one forward_backward of a random
// batch, the loss within 1e-2 relative and every adapter's gradient within 5e-2 relative L2 (FP8 base: 3e-2 and 0.3),
// the gradient buffer the adapters' only. Configs: `small`-like llama (2 layers, d 256, head_dim 64, GQA 4/2) and a
// gpt-like one (GELU, tied embeddings), rank 8:
//   - each target set (fused, canonical, mlperf, an explicit list) with dropout 0 and 0.1, at optimizer step 3 (the
//     masks keyed by step and sequence must be the CPU's);
//   - the FP8 base (current and delayed scaling: the frozen weights cast once, their scale fixed), the adapters BF16;
//   - the recompute modes give the gradients of recompute none bit for bit;
//   - a second call without zeroing doubles the gradients (they accumulate);
//   - the arena keeps less than full training's at the same shape (no gradient inputs kept for frozen linears).
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
#include "model/config.h"
#include "model/decoder_cpu.h"
#include "model/decoder_cuda.h"
#include "ops/cuda/context.h"

namespace {

using namespace tb::model;

#define SKIP_WITHOUT_GPU() \
  if (tb::bench::visible_gpu_count() == 0) GTEST_SKIP() << tb::bench::no_gpu_reason()

constexpr int kBatch = 2, kSeq = 64;

ModelConfig config(const std::string& family, unsigned targets, double dropout) {
  ModelConfig c;
  c.name = "gpu-lora-" + family;
  c.family = family;
  c.layers = 2, c.d_model = 256, c.ffn = 512, c.heads = 4, c.kv_heads = 2, c.head_dim = 64;
  c.vocab = 512, c.seq = kSeq;
  c.rope_theta = 10000.0;
  if (family == "gpt") {
    c.kv_heads = 4;
    c.norm = Norm::layernorm, c.act = Act::gelu, c.pos = Pos::learned, c.tied_embeddings = true;
  }
  c.lora = {.rank = 8, .alpha = 16, .dropout = dropout, .targets = targets, .seed = 31};
  return c;
}

float round_bf16(double x) { return tb::bf16_to_float(tb::float_to_bf16(float(x))); }

double rel_l2(const std::vector<double>& ref, const std::vector<double>& got) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) num += (got[i] - ref[i]) * (got[i] - ref[i]), den += ref[i] * ref[i];
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

struct Case {
  CpuDecoder<double> cpu;
  std::vector<float> host;
  std::vector<std::int32_t> tokens, targets;
};

// The CPU decoder with parameters moved off their init and rounded to bf16, and a random batch.
Case setup(const ModelConfig& cfg) {
  Case s{CpuDecoder<double>(cfg, 1234), {}, {}, {}};
  std::mt19937_64 rng(99);
  std::normal_distribution<double> nd(0.0, 1.0);
  for (const Slot& sl : s.cpu.layout()) {
    auto p = s.cpu.params().subspan(sl.offset, sl.size);
    for (double& v : p) v = sl.shape.size() == 1 ? v + 0.1 * nd(rng) : 2.5 * v + 0.02 * nd(rng);  // B off zero
  }
  for (double& v : s.cpu.params()) s.host.push_back(round_bf16(v)), v = s.host.back();
  std::uniform_int_distribution<int> u(0, cfg.vocab - 1);
  for (int i = 0; i < kBatch * kSeq; ++i) s.tokens.push_back(u(rng)), s.targets.push_back(u(rng));
  return s;
}

constexpr std::int64_t kStep = 3;

std::vector<float> gpu_grads(const ModelConfig& cfg, const Case& s, Fp8Options fp8, Recompute rc, double* loss) {
  tb::ops::DeviceContext dc(0);
  CudaDecoder gpu(dc, cfg, rc, /*deterministic=*/true, fp8);  // (bit-for-bit comparisons between modes)
  gpu.load_params(s.host);
  gpu.zero_grads();
  if (fp8.delayed) gpu.forward_backward(s.tokens.data(), s.targets.data(), kBatch, kSeq, 1.0, kStep), gpu.zero_grads();
  *loss = gpu.forward_backward(s.tokens.data(), s.targets.data(), kBatch, kSeq, 1.0, kStep);
  return gpu.grads_to_host();
}

void compare_with_cpu(const ModelConfig& cfg, Fp8Options fp8 = {}) {
  Case s = setup(cfg);
  s.cpu.zero_grads();
  const double loss_cpu = s.cpu.forward_backward(s.tokens, s.targets, kBatch, kSeq, 1.0, kStep);
  double loss_gpu = 0;
  const std::vector<float> g = gpu_grads(cfg, s, fp8, Recompute::none, &loss_gpu);
  const std::string what = cfg.name + " " + lora_targets_name(cfg.lora.targets) + " dropout " +
                           std::to_string(cfg.lora.dropout) +
                           (fp8.enabled ? fp8.delayed ? " fp8 delayed" : " fp8" : "");
  std::printf("%s: loss cpu %.6f gpu %.6f\n", what.c_str(), loss_cpu, loss_gpu);
  EXPECT_NEAR(loss_gpu, loss_cpu, (fp8.enabled ? 3e-2 : 1e-2) * loss_cpu) << what;
  const DenseLayout& L = s.cpu.dense_layout();
  ASSERT_EQ(g.size(), L.grad_total) << what;
  int adapters = 0;
  for (const Slot& sl : L.slots) {
    if (!sl.has_grad()) continue;
    ++adapters;
    EXPECT_EQ(sl.tags.role, ParamRole::adapter) << sl.name;
    const std::vector<double> want(s.cpu.grads().begin() + std::ptrdiff_t(sl.grad_offset),
                                   s.cpu.grads().begin() + std::ptrdiff_t(sl.grad_offset + sl.size));
    const std::vector<double> got(g.begin() + std::ptrdiff_t(sl.grad_offset),
                                  g.begin() + std::ptrdiff_t(sl.grad_offset + sl.size));
    const double err = rel_l2(want, got);
    // FP8: E4M3 activations and E5M2 gradients (2 mantissa bits) through every frozen linear: 0.2-0.25 is typical
    // for an adapter deep in the backward, a wrong mask or product is ~1
    EXPECT_LT(err, fp8.enabled ? 0.3 : 5e-2) << what << ": " << sl.name;
  }
  EXPECT_GT(adapters, 0);
}

TEST(DecoderCudaLora, EveryTargetSetMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  for (double dropout : {0.0, 0.1}) {
    compare_with_cpu(config("llama", kLoraFused, dropout));
    compare_with_cpu(config("llama", kLoraCanonical, dropout));
    compare_with_cpu(config("gpt", kLoraMlperf, dropout));
    compare_with_cpu(config("llama", kLoraQ | kLoraV | kLoraDown, dropout));
  }
}

TEST(DecoderCudaLora, Fp8BaseMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  for (bool delayed : {false, true}) {
    Fp8Options fp8;
    fp8.enabled = true, fp8.delayed = delayed;
    compare_with_cpu(config("llama", kLoraCanonical, 0.1), fp8);
    compare_with_cpu(config("llama", kLoraMlperf, 0.0), fp8);  // fc1, fc2 frozen without adapters: fused FP8 casts
  }
}

TEST(DecoderCudaLora, RecomputeModesGiveTheSameGradients) {
  SKIP_WITHOUT_GPU();
  for (bool fp8_on : {false, true}) {
    const ModelConfig cfg = config("llama", kLoraCanonical, 0.1);
    const Case s = setup(cfg);
    Fp8Options fp8;
    fp8.enabled = fp8_on;
    double l0 = 0, l1 = 0, l2 = 0;
    const auto none = gpu_grads(cfg, s, fp8, Recompute::none, &l0);
    EXPECT_EQ(gpu_grads(cfg, s, fp8, Recompute::selective, &l1), none) << (fp8_on ? "fp8 " : "") << "selective";
    EXPECT_EQ(gpu_grads(cfg, s, fp8, Recompute::full, &l2), none) << (fp8_on ? "fp8 " : "") << "full";
    EXPECT_EQ(l0, l1);
    EXPECT_EQ(l0, l2);
  }
}

TEST(DecoderCudaLora, GradientsAccumulateAndTheArenaIsSmallerThanFullTraining) {
  SKIP_WITHOUT_GPU();
  const ModelConfig cfg = config("llama", kLoraMlperf, 0.0);
  const Case s = setup(cfg);
  tb::ops::DeviceContext dc(0);
  CudaDecoder gpu(dc, cfg, Recompute::none, /*deterministic=*/true);  // (the two passes compared to 1e-5)
  gpu.load_params(s.host);
  gpu.zero_grads();
  gpu.forward_backward(s.tokens.data(), s.targets.data(), kBatch, kSeq);
  const std::vector<float> once = gpu.grads_to_host();
  gpu.forward_backward(s.tokens.data(), s.targets.data(), kBatch, kSeq);
  const std::vector<float> twice = gpu.grads_to_host();
  for (std::size_t i = 0; i < once.size(); ++i) ASSERT_NEAR(twice[i], 2 * once[i], 1e-5 * std::abs(once[i]) + 1e-12);
  ModelConfig full = cfg;
  full.lora = {};
  const std::size_t lora_arena = CudaDecoder::activation_bytes(cfg, kBatch, kSeq, Recompute::none);
  const std::size_t full_arena = CudaDecoder::activation_bytes(full, kBatch, kSeq, Recompute::none);
  std::printf("arena: LoRA (mlperf targets) %zu bytes, full training %zu\n", lora_arena, full_arena);
  EXPECT_LT(lora_arena, full_arena);  // y2 and g are not kept: fc1 and fc2 are frozen without adapters
  EXPECT_EQ(gpu.activation_bytes(), lora_arena);
}

}  // namespace
