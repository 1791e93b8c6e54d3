// Tests model/decoder_cuda as pipeline stages on one GPU: a 4-layer model split into stage 0 (layers [0, 2): the
// embedding) and stage 1 (layers [2, 4): final norm, LM head, loss), each loaded with the whole model's parameters
// of its slots (by name), runs two micro-batches in the order of pp 2's 1F1B schedule with two activation sets on
// stage 0:
//   stage 0: F0 F1          B0 B1          (sets 0 and 1 in flight)
//   stage 1:       F0 B0 F1 B1             (set 0)
// handing h and dh over in device buffers; the losses and every gradient must equal those of the whole model's
// forward_backward_device on the same micro-batches (deterministic attention; the same GEMM shapes, so to fp32
// rounding at most: the chain computes the same bf16 values, h rounded exactly as the fused add_norm rounds it).
// Llama-, Nemotron- and GPT-like models (tied: stage 1's copy of the embedding is its LM head; the two copies'
// gradients add up to the whole model's embedding gradient).
// Also: activation_bytes() of a stage with its sets is what prepare() allocates, and a whole-model decoder with two
// sets run as F0 F1 B0 B1 gives the same result (the sets do not alias), in BF16 and FP8.
#include <gtest/gtest.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "bench/sysinfo.h"
#include "core/error.h"
#include "model/config.h"
#include "model/decoder_cpu.h"
#include "model/decoder_cuda.h"
#include "ops/cuda/context.h"

namespace {

using tb::model::CudaDecoder;
using tb::model::LayerRange;
using tb::model::ModelConfig;

#define SKIP_WITHOUT_GPU() \
  if (tb::bench::visible_gpu_count() == 0) GTEST_SKIP() << tb::bench::no_gpu_reason()

constexpr int kBatch = 2, kSeq = 64, kMicro = 2;
using bf16 = CudaDecoder::bf16;

ModelConfig config(const std::string& family) {
  ModelConfig c;
  c.name = "stages-test-" + family;
  c.family = family;
  c.layers = 4, c.d_model = 256, c.ffn = 512, c.heads = 4, c.kv_heads = 2, c.head_dim = 64;
  c.vocab = 512, c.seq = kSeq;
  c.rope_theta = 10000.0;
  c.rope_scaling.enabled = false;
  c.pos = tb::model::Pos::rope;
  c.tied_embeddings = false;
  if (family == "llama") {
    c.norm = tb::model::Norm::rmsnorm, c.act = tb::model::Act::swiglu;
  } else if (family == "gpt") {  // GPT-3-like: LayerNorm, GELU, MHA, learned positions, tied embeddings
    c.norm = tb::model::Norm::layernorm, c.act = tb::model::Act::gelu, c.kv_heads = c.heads;
    c.pos = tb::model::Pos::learned, c.tied_embeddings = true;
  } else {  // nemotron-like: norm biases, layernorm1p, sqrelu
    c.norm = tb::model::Norm::layernorm1p, c.act = tb::model::Act::sqrelu;
  }
  return c;
}

template <class T>
T* upload(tb::ops::DeviceBuffer& buf, const std::vector<T>& host) {
  TB_CHECK(cudaMemcpy(buf.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return buf.as<T>();
}

// The whole model's values of a stage's slots (matched by name).
std::vector<float> stage_values(const tb::model::DenseLayout& full, const tb::model::DenseLayout& stage,
                                const std::vector<float>& values) {
  std::vector<float> out(stage.total);
  for (const tb::model::Slot& s : stage.slots) {
    const tb::model::Slot& f = full.at(s.name);
    std::copy(values.begin() + long(f.offset), values.begin() + long(f.offset + f.size), out.begin() + long(s.offset));
  }
  return out;
}

// Largest |got - want| / max(|want|) over a stage's slot, against the whole model's slot of the same name.
double slot_error(const tb::model::DenseLayout& full, const std::vector<float>& want, const tb::model::Slot& s,
                  const std::vector<float>& got) {
  const tb::model::Slot& f = full.at(s.name);
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < s.size; ++i) {
    diff = std::max(diff, std::fabs(double(got[s.offset + i]) - double(want[f.offset + i])));
    scale = std::max(scale, std::fabs(double(want[f.offset + i])));
  }
  return scale > 0 ? diff / scale : diff;
}

// kMicro micro-batches of random tokens and targets (tokens drawn first), on the device, and room for 4 losses.
struct Inputs {
  tb::ops::DeviceBuffer tokens, targets, losses;
  const std::int32_t *tok = nullptr, *tgt = nullptr;
  float* loss = nullptr;
};
Inputs random_inputs(tb::ops::DeviceContext& dc, const ModelConfig& cfg, std::uint64_t seed) {
  const std::size_t n = std::size_t(kBatch) * kSeq;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> u(0, cfg.vocab - 1);
  std::vector<std::int32_t> tokens(kMicro * n), targets(kMicro * n);
  for (auto& t : tokens) t = u(rng);
  for (auto& t : targets) t = u(rng);
  Inputs in{tb::ops::DeviceBuffer(dc.device(), tokens.size() * 4), tb::ops::DeviceBuffer(dc.device(), targets.size() * 4),
            tb::ops::DeviceBuffer(dc.device(), 4 * sizeof(float))};
  in.tok = upload(in.tokens, tokens);
  in.tgt = upload(in.targets, targets);
  in.loss = in.losses.as<float>();
  return in;
}

void two_stages_equal_one(const ModelConfig& cfg, CudaDecoder::Recompute rc) {
  const std::string what = cfg.name + " recompute " + std::to_string(int(rc));
  tb::ops::DeviceContext dc(0);
  const std::size_t n = std::size_t(kBatch) * kSeq, d = std::size_t(cfg.d_model);
  tb::model::CpuDecoder<float> init(cfg, 21);
  const std::vector<float> host(init.params().begin(), init.params().end());
  const Inputs in = random_inputs(dc, cfg, 4);
  const std::int32_t *tok = in.tok, *tgt = in.tgt;
  float* loss = in.loss;
  const double scale = 1.0 / kMicro;

  // The whole model, one micro-batch after the other.
  CudaDecoder whole(dc, cfg, rc, /*deterministic=*/true);
  whole.load_params(host);
  whole.zero_grads();
  whole.prepare(kBatch, kSeq);
  for (int a = 0; a < kMicro; ++a)
    whole.forward_backward_device(tok + a * n, tgt + a * n, kBatch, kSeq, scale, loss + a);
  std::vector<float> want_loss(2);
  TB_CHECK(cudaMemcpy(want_loss.data(), loss, 2 * sizeof(float), cudaMemcpyDeviceToHost));
  const std::vector<float> want = whole.grads_to_host();
  const tb::model::DenseLayout& full = whole.dense_layout();

  // Two stages in pp 2's 1F1B order.
  CudaDecoder s0(dc, cfg, rc, true, {}, 0, LayerRange{0, 2}), s1(dc, cfg, rc, true, {}, 0, LayerRange{2, 4});
  ASSERT_TRUE(s0.first_stage() && !s0.last_stage() && !s1.first_stage() && s1.last_stage()) << what;
  const std::size_t copy = cfg.tied_embeddings ? std::size_t(cfg.vocab) * d : 0;  // stage 1's LM head
  EXPECT_EQ(s0.dense_layout().total + s1.dense_layout().total, full.total + copy) << what;
  s0.load_params(stage_values(full, s0.dense_layout(), host));
  s1.load_params(stage_values(full, s1.dense_layout(), host));
  s0.zero_grads(), s1.zero_grads();
  s0.prepare(kBatch, kSeq, 2);
  s1.prepare(kBatch, kSeq, 1);
  EXPECT_EQ(s0.activation_bytes(), CudaDecoder::activation_bytes(cfg, kBatch, kSeq, rc, {}, 1, {0, 2}, 2)) << what;
  EXPECT_EQ(s1.activation_bytes(), CudaDecoder::activation_bytes(cfg, kBatch, kSeq, rc, {}, 1, {2, 4}, 1)) << what;
  EXPECT_LT(s1.activation_bytes(), whole.activation_bytes()) << what << ": a stage keeps half the layers";
  ASSERT_EQ(s0.boundary_rows(), std::int64_t(n));
  std::vector<tb::ops::DeviceBuffer> h, dh;
  for (int a = 0; a < kMicro; ++a) {
    h.emplace_back(dc.device(), n * d * sizeof(bf16));
    dh.emplace_back(dc.device(), n * d * sizeof(bf16));
  }
  for (int a = 0; a < kMicro; ++a) s0.forward(a, tok + a * n, nullptr, nullptr, h[a].as<bf16>(), scale, nullptr);
  for (int a = 0; a < kMicro; ++a) {
    s1.forward(0, nullptr, tgt + a * n, h[a].as<bf16>(), nullptr, scale, loss + 2 + a);
    s1.backward(0, nullptr, nullptr, dh[a].as<bf16>());
  }
  for (int a = 0; a < kMicro; ++a) s0.backward(a, tok + a * n, dh[a].as<bf16>(), nullptr);
  std::vector<float> got_loss(2);
  TB_CHECK(cudaMemcpy(got_loss.data(), loss + 2, 2 * sizeof(float), cudaMemcpyDeviceToHost));
  for (int a = 0; a < kMicro; ++a) EXPECT_EQ(got_loss[a], want_loss[a]) << what << " micro-batch " << a;

  // Every slot's gradient, in the whole model's layout; a tied embedding's two copies (stage 0's embedding, stage
  // 1's LM head) add up to the whole model's, as the trainer sums them.
  std::vector<float> got(full.total, 0.f);
  std::size_t slots = 0;
  for (CudaDecoder* s : {&s0, &s1}) {
    const std::vector<float> g = s->grads_to_host();
    for (const tb::model::Slot& slot : s->dense_layout().slots) {
      const tb::model::Slot& f = full.at(slot.name);
      for (std::size_t i = 0; i < slot.size; ++i) got[f.offset + i] += g[slot.offset + i];
      ++slots;
    }
  }
  for (const tb::model::Slot& slot : full.slots)
    EXPECT_LE(slot_error(full, want, slot, got), 1e-6) << what << ": gradient of " << slot.name;
  EXPECT_EQ(slots, full.slots.size() + (cfg.tied_embeddings ? 1 : 0)) << what;
}

TEST(CudaDecoderStages, TwoStagesInOneFOneBOrderEqualTheWholeModel) {
  SKIP_WITHOUT_GPU();
  for (auto rc : {CudaDecoder::Recompute::none, CudaDecoder::Recompute::full}) {
    two_stages_equal_one(config("llama"), rc);
    two_stages_equal_one(config("nemotron"), rc);
    two_stages_equal_one(config("gpt"), rc);
  }
}

// A whole-model decoder with two activation sets: F0 F1 B0 B1 equals forward_backward_device twice, in BF16 and in
// FP8 (current scaling: micro-batch 0's weight gradients must use its own input scales, not those micro-batch 1's
// forward computed in between; delayed: one scale for the step, the amaxes of both recorded).
TEST(CudaDecoderStages, ActivationSetsDoNotAlias) {
  SKIP_WITHOUT_GPU();
  const ModelConfig cfg = config("llama");
  tb::ops::DeviceContext dc(0);
  const std::size_t n = std::size_t(kBatch) * kSeq;
  tb::model::CpuDecoder<float> init(cfg, 5);
  const std::vector<float> host(init.params().begin(), init.params().end());
  const Inputs in = random_inputs(dc, cfg, 9);
  const std::int32_t *tok = in.tok, *tgt = in.tgt;
  float* loss = in.loss;
  for (const char* precision : {"bf16", "fp8 current", "fp8 delayed"}) {
    tb::model::Fp8Options fp8;
    fp8.enabled = std::string(precision) != "bf16";
    fp8.delayed = std::string(precision) == "fp8 delayed";
    const auto rc = CudaDecoder::Recompute::none;
    CudaDecoder a(dc, cfg, rc, true, fp8), b(dc, cfg, rc, true, fp8);
    for (CudaDecoder* x : {&a, &b}) x->load_params(host), x->zero_grads();
    for (int step = 0; step < 2; ++step) {  // delayed: step 2 scales by step 1's amaxes
      a.prepare(kBatch, kSeq);
      a.fp8_begin_step();
      for (int m = 0; m < kMicro; ++m) a.forward_backward_device(tok + m * n, tgt + m * n, kBatch, kSeq, 0.5, loss + m);
      a.fp8_end_step();
      b.prepare(kBatch, kSeq, 2);
      EXPECT_EQ(b.slots(), 2);
      b.fp8_begin_step();
      for (int m = 0; m < kMicro; ++m) b.forward(m, tok + m * n, tgt + m * n, nullptr, nullptr, 0.5, loss + 2 + m);
      for (int m = 0; m < kMicro; ++m) b.backward(m, tok + m * n, nullptr, nullptr);
      b.fp8_end_step();
      std::vector<float> l(4);
      TB_CHECK(cudaMemcpy(l.data(), loss, 4 * sizeof(float), cudaMemcpyDeviceToHost));
      EXPECT_EQ(l[0], l[2]) << precision << " step " << step;
      EXPECT_EQ(l[1], l[3]) << precision << " step " << step;
      const std::vector<float> ga = a.grads_to_host(), gb = b.grads_to_host();
      for (const tb::model::Slot& s : a.dense_layout().slots)
        EXPECT_LE(slot_error(a.dense_layout(), ga, s, gb), 1e-6) << precision << " step " << step << ": gradient of "
                                                                 << s.name;
    }
  }
}

TEST(CudaDecoderStages, StageMisuseRaises) {
  SKIP_WITHOUT_GPU();
  tb::ops::DeviceContext dc(0);
  ModelConfig cfg = config("llama");
  CudaDecoder s1(dc, cfg, CudaDecoder::Recompute::none, false, {}, 0, LayerRange{2, 4});
  s1.prepare(kBatch, kSeq);
  std::vector<std::int32_t> t(kBatch * kSeq, 0);
  EXPECT_THROW(s1.forward_backward(t.data(), t.data(), kBatch, kSeq), tb::Error);  // not the whole model
  EXPECT_THROW(s1.forward(1, nullptr, nullptr, nullptr, nullptr, 1.0, nullptr), tb::Error);  // set 1 not prepared
}

}  // namespace
