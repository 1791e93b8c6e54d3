// Tests train/trainer on the CPU backend: the tiny model learns the markov task to near its floor in a
// hundred-odd steps, the same seed gives the same losses, and bad specs fail before any work (also the CUDA-only
// --fp8-attention combinations, checked by validate() without a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <string>
#include <tuple>

#include "core/error.h"
#include "core/interrupt.h"
#include "train/trainer.h"
#include "../support/config_error.h"

namespace {
tb::train::TrainSpec tiny(int steps) {
  tb::train::TrainSpec s;
  s.model = "tiny";
  s.device = "cpu";
  s.seq = 32;
  s.micro_batch = 8;
  s.steps = steps;
  s.warmup_steps = 1;
  s.data = "markov";
  return s;
}

// validate()'s config error for s, or "accepted".
std::string refusal(const tb::train::TrainSpec& s) {
  return tb::testing_support::config_error([&] { tb::train::validate(s); }, "accepted");
}

// A CUDA run of `small` in FP8 with the FP8 LM head (validated only: no GPU needed).
tb::train::TrainSpec fp8_head_spec() {
  tb::train::TrainSpec s;
  s.model = "small", s.device = "cuda", s.precision = "fp8", s.fp8_lm_head = true;
  return s;
}

}  // namespace

TEST(TrainerCpu, LearnsTheMarkovTaskToNearItsFloor) {
  const auto res = tb::train::train_cpu(tiny(150), nullptr);
  ASSERT_EQ(res.steps.size(), 150u);
  EXPECT_NEAR(res.steps.front().loss, std::log(256.0), 0.1 * std::log(256.0));  // starts at chance
  EXPECT_LT(res.steps.back().loss, 1.15 * res.loss_floor) << "floor " << res.loss_floor;
  EXPECT_GT(res.steps.back().loss, 0.95 * res.loss_floor);  // and not below what is possible
  EXPECT_GT(res.tokens_per_s, 0);
  EXPECT_EQ(res.step_s.n, 149u);
}

TEST(TrainerCpu, SameSeedSameLossesWithAccumulation) {
  auto spec = tiny(5);
  spec.micro_batch = 2;
  spec.global_batch = 8;  // 4 micro-batches accumulate: the same data as one batch of 8
  const auto a = tb::train::train_cpu(spec, nullptr), b = tb::train::train_cpu(spec, nullptr);
  const auto whole = tb::train::train_cpu(tiny(5), nullptr);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(a.steps[i].loss, b.steps[i].loss) << i;
    EXPECT_NEAR(a.steps[i].loss, whole.steps[i].loss, 1e-4) << i;  // accumulation == one big batch
  }
}

TEST(TrainerCpu, BadSpecsFailBeforeWork) {
  auto s = tiny(5);
  s.global_batch = 12;
  s.micro_batch = 8;
  EXPECT_THROW(tb::train::train_cpu(s, nullptr), tb::Error);
  s = tiny(5);
  s.model = "nope";
  EXPECT_THROW(tb::train::train_cpu(s, nullptr), tb::Error);
  s = tiny(5);
  s.warmup_steps = 5;
  EXPECT_THROW(tb::train::train_cpu(s, nullptr), tb::Error);
  s = tiny(5);
  s.grad_buffer = "pooled";
  EXPECT_NE(tb::testing_support::config_error([&] { tb::train::validate(s); }).find("--grad-buffer"),
            std::string::npos);
  s = tiny(5);
  s.autotune = true;  // nothing to tune on the CPU: refused, not ignored
  EXPECT_NE(tb::testing_support::config_error([&] { tb::train::validate(s); }).find("--autotune"), std::string::npos);
}

// --fp8-attention: each combination cuDNN's FP8 attention cannot run is refused by validate() (no GPU needed) with
// one config error naming the flag and what to do.
TEST(TrainerCpu, Fp8AttentionRefusalsNameTheFlag) {
  tb::train::TrainSpec ok;
  ok.model = "small-hd128", ok.device = "cuda", ok.precision = "fp8", ok.fp8_attention = true;
  EXPECT_NO_THROW(tb::train::validate(ok));
  ok.tp = 2, ok.pp = 2;  // tensor and pipeline parallel: each rank's heads, each activation set's own q|k|v scale
  EXPECT_NO_THROW(tb::train::validate(ok));
  tb::train::TrainSpec s = ok;
  s.precision = "bf16";
  EXPECT_EQ(refusal(s), "--fp8-attention needs --precision fp8");
  s = ok, s.model = "small";
  EXPECT_NE(refusal(s).find("--fp8-attention needs head_dim 128"), std::string::npos) << refusal(s);
  EXPECT_NE(refusal(s).find("small has head_dim 64"), std::string::npos) << refusal(s);
  s = ok, s.cp = 2;
  EXPECT_NE(refusal(s).find("--fp8-attention does not combine with context parallel (--cp 2)"), std::string::npos)
      << refusal(s);
  s = ok, s.deterministic = true;
  EXPECT_NE(refusal(s).find("drop --deterministic or --fp8-attention"), std::string::npos) << refusal(s);
  s = ok, s.fp8_format = "e4m3";  // all-E4M3: the attention gradients too
  EXPECT_EQ(refusal(s), "accepted");
  s = ok, s.fp8_format = "e5m2";
  EXPECT_EQ(refusal(s), "--fp8-format must be hybrid or e4m3, not 'e5m2'");
}

// --fp8-lm-head-grad: refused without the FP8 head or with an unknown format; the head's logit gradients follow
// --fp8-format unless told.
TEST(TrainerCpu, Fp8LmHeadGradFormat) {
  const tb::train::TrainSpec ok = fp8_head_spec();
  tb::train::TrainSpec s = ok;
  s.fp8_lm_head_grad = "e5m2";
  EXPECT_EQ(refusal(s), "accepted");
  s.fp8_lm_head_grad = "hybrid";
  EXPECT_EQ(refusal(s), "--fp8-lm-head-grad must be e4m3 or e5m2, not 'hybrid'");
  s = ok, s.fp8_lm_head = false, s.fp8_lm_head_grad = "e4m3";
  EXPECT_EQ(refusal(s), "--fp8-lm-head-grad sets the FP8 LM head's logit gradients: add --fp8-lm-head (or drop it)");
  s = ok;
  EXPECT_EQ(tb::train::fp8_head_grad_format(s), "e5m2");
  s.fp8_format = "e4m3";
  EXPECT_EQ(tb::train::fp8_head_grad_format(s), "e4m3");
  s.fp8_lm_head_grad = "e5m2";
  EXPECT_EQ(tb::train::fp8_head_grad_format(s), "e5m2");
  s = ok, s.fp8_lm_head_grad = "e4m3";
  EXPECT_EQ(tb::train::fp8_head_grad_format(s), "e4m3");
}

// --fp8-lm-head-gemms: a subset of forward, dgrad, wgrad in the head's order (empty: all three); refused without the
// FP8 head, with an unknown, repeated or empty name.
TEST(TrainerCpu, Fp8LmHeadGemms) {
  const tb::train::TrainSpec ok = fp8_head_spec();
  using V = std::vector<std::string>;
  tb::train::TrainSpec s = ok;
  EXPECT_EQ(tb::train::fp8_head_gemms(s), (V{"forward", "dgrad", "wgrad"}));
  s.fp8_lm_head_gemms = "wgrad,dgrad";
  EXPECT_EQ(refusal(s), "accepted");
  EXPECT_EQ(tb::train::fp8_head_gemms(s), (V{"dgrad", "wgrad"}));
  s.fp8_lm_head_gemms = "forward";
  EXPECT_EQ(tb::train::fp8_head_gemms(s), (V{"forward"}));
  s.fp8_lm_head_gemms = "forward,fwd";
  EXPECT_EQ(refusal(s), "--fp8-lm-head-gemms takes forward, dgrad and wgrad, comma-separated; 'fwd' is none of them");
  s.fp8_lm_head_gemms = "dgrad,dgrad";
  EXPECT_EQ(refusal(s), "--fp8-lm-head-gemms names 'dgrad' twice");
  s.fp8_lm_head_gemms = "dgrad,";
  EXPECT_EQ(refusal(s), "--fp8-lm-head-gemms takes forward, dgrad and wgrad, comma-separated; it ends with an empty "
                        "item");
  s = ok, s.fp8_lm_head = false, s.fp8_lm_head_gemms = "dgrad";
  EXPECT_EQ(refusal(s), "--fp8-lm-head-gemms chooses the FP8 LM head's GEMMs: add --fp8-lm-head (or drop it)");
}

// --fp8-lm-head-rounding: nearest or stochastic (the default), only with the FP8 head.
TEST(TrainerCpu, Fp8LmHeadRounding) {
  const tb::train::TrainSpec ok = fp8_head_spec();
  tb::train::TrainSpec s = ok;
  EXPECT_EQ(tb::train::fp8_head_rounding(s), "stochastic");
  s.fp8_lm_head_rounding = "nearest";
  EXPECT_EQ(refusal(s), "accepted");
  EXPECT_EQ(tb::train::fp8_head_rounding(s), "nearest");
  s.fp8_lm_head_rounding = "random";
  EXPECT_EQ(refusal(s), "--fp8-lm-head-rounding must be nearest or stochastic, not 'random'");
  s = ok, s.fp8_lm_head = false;
  EXPECT_EQ(refusal(s), "accepted");
  s.fp8_lm_head_rounding = "nearest";
  EXPECT_EQ(refusal(s), "--fp8-lm-head-rounding rounds the FP8 LM head's logit gradients: add --fp8-lm-head (or drop "
                        "it)");
}

// --fp8-grad-rounding: nearest (the default) or stochastic, only in FP8.
TEST(TrainerCpu, Fp8GradRounding) {
  tb::train::TrainSpec s = fp8_head_spec();
  EXPECT_EQ(s.fp8_grad_rounding, "nearest");
  s.fp8_grad_rounding = "stochastic";
  EXPECT_EQ(refusal(s), "accepted");
  s.fp8_grad_rounding = "random";
  EXPECT_EQ(refusal(s), "--fp8-grad-rounding must be nearest or stochastic, not 'random'");
  s.fp8_grad_rounding = "stochastic", s.fp8_lm_head = false, s.precision = "bf16";
  EXPECT_EQ(refusal(s),
            "--fp8-grad-rounding rounds the FP8 linear layers' gradients: add --precision fp8 (or drop it)");
}

// --fp8-attention-emulate: qkv, o or both, with FP8 and BF16 attention only.
TEST(TrainerCpu, Fp8AttentionEmulate) {
  tb::train::TrainSpec s = fp8_head_spec();
  for (const char* v : {"qkv", "o", "qkv,o"}) {
    s.fp8_attention_emulate = v;
    EXPECT_EQ(refusal(s), "accepted") << v;
  }
  s.fp8_attention_emulate = "p";
  EXPECT_EQ(refusal(s), "--fp8-attention-emulate takes qkv, o or qkv,o, not 'p'");
  const std::string needs = "--fp8-attention-emulate (a diagnostic of BF16 attention) needs --precision fp8 without "
                            "--fp8-attention, --cp 1 and --recompute none";
  s.fp8_attention_emulate = "qkv", s.recompute = "selective";
  EXPECT_EQ(refusal(s), needs);
  s.recompute = "none", s.precision = "bf16", s.fp8_lm_head = false;
  EXPECT_EQ(refusal(s), needs);
}

// --fp8-weight-cast: auto (the default), fused or separate.
TEST(TrainerCpu, Fp8WeightCast) {
  tb::train::TrainSpec s = fp8_head_spec();
  EXPECT_EQ(s.fp8_weight_cast, "auto");
  for (const char* v : {"fused", "separate"}) {
    s.fp8_weight_cast = v;
    EXPECT_EQ(refusal(s), "accepted") << v;
  }
  s.fp8_weight_cast = "adamw";
  EXPECT_EQ(refusal(s), "--fp8-weight-cast must be auto, fused or separate, not 'adamw'");
}

// --grads: f32 (the default) or bf16, the latter on one GPU only.
TEST(TrainerCpu, GradsBf16OnOneGpu) {
  tb::train::TrainSpec s = fp8_head_spec();
  EXPECT_EQ(s.grads, "f32");
  s.grads = "bf16";
  EXPECT_EQ(refusal(s), "accepted");
  s.grads = "fp16";
  EXPECT_EQ(refusal(s), "--grads must be f32 or bf16, not 'fp16'");
  const std::string one_gpu = "--grads bf16 runs on one GPU (--device cuda, dp, tp, pp and cp 1): the CPU backend and "
                              "the parallel layouts' gradient reductions are fp32; drop --grads bf16 for them";
  for (auto [tp, pp, cp, dp] : {std::tuple{2, 1, 1, 1}, {1, 2, 1, 1}, {1, 1, 2, 1}, {1, 1, 1, 2}}) {
    tb::train::TrainSpec p = s;
    p.grads = "bf16", p.tp = tp, p.pp = pp, p.cp = cp, p.dp = dp;
    EXPECT_EQ(refusal(p), one_gpu) << tp << pp << cp << dp;
  }
  tb::train::TrainSpec cpu = tiny(2);
  cpu.grads = "bf16";
  EXPECT_EQ(refusal(cpu), one_gpu);
}

// Every CUDA layout takes GPT-3's form (learned positions, tied embeddings): validate() refuses none of them (context
// parallel with learned positions was refused until its 2-GPU check passed).
TEST(TrainerCpu, CudaLayoutsTakeLearnedPositionsAndTiedEmbeddings) {
  tb::train::TrainSpec s;
  s.model = "small-gpt", s.device = "cuda";
  for (auto [tp, pp, cp] : {std::tuple{2, 1, 1}, {1, 2, 1}, {1, 1, 2}, {2, 2, 2}, {4, 1, 1}, {1, 4, 1}, {4, 2, 1}}) {
    s.tp = tp, s.pp = pp, s.cp = cp;
    EXPECT_NO_THROW(tb::train::validate(s)) << tp << " " << pp << " " << cp;
  }
}

TEST(TrainerCpu, StopsAfterTheCurrentStepOnInterrupt) {
  tb::install_interrupt_handler();
  tb::clear_interrupt();
  const auto res = tb::train::train_cpu(tiny(20), [](const tb::train::StepStats& s) {
    if (s.step == 3) std::raise(SIGINT);  // as Ctrl-C would
  });
  tb::clear_interrupt();
  EXPECT_TRUE(res.interrupted);
  EXPECT_EQ(res.steps.size(), 3u);  // the steps that finished, no more
  EXPECT_GT(res.tokens_per_s, 0);
}

// The summary's memory line: every part in GiB, FP8 copies only when there are some, the parts add to total().
TEST(MemoryEstimate, PartsInGiB) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  tb::train::MemoryEstimate e;
  e.weights = 2 * kGiB, e.grads = 4 * kGiB, e.master = 2 * kGiB, e.moments = 8 * kGiB, e.activations = 1.5 * kGiB;
  e.workspaces = 0.25 * kGiB;
  EXPECT_EQ(e.parts_gib(), "weights 2.00 + gradients 4.00 + master 2.00 + moments 8.00 + activations 1.50 + "
                           "workspaces 0.25 GiB");
  e.fp8_weights = 1 * kGiB;
  EXPECT_NE(e.parts_gib().find("activations 1.50 + FP8 copies 1.00 + workspaces"), std::string::npos);
  EXPECT_DOUBLE_EQ(e.total(), 18.75 * kGiB);
}

// Which layouts build per-group communicators (a mix with tp or pp), and which can share a node's GPUs.
TEST(LayoutMix, GroupMixesAndSharedGpus) {
  using tb::parallel::MeshShape;
  EXPECT_FALSE(tb::train::is_group_mix({.dp = 4}));
  EXPECT_FALSE(tb::train::is_group_mix({.tp = 8}));
  EXPECT_FALSE(tb::train::is_group_mix({.dp = 2, .cp = 2}));  // the world's communicator
  EXPECT_TRUE(tb::train::is_group_mix({.dp = 2, .tp = 2}));
  EXPECT_TRUE(tb::train::is_group_mix({.cp = 2, .pp = 2}));
  EXPECT_TRUE(tb::train::is_group_mix({.dp = 2, .cp = 2, .pp = 2, .tp = 2}));
  EXPECT_EQ(tb::train::share_gpus_problem({.dp = 2, .pp = 2, .tp = 2}, 2), "");
  EXPECT_EQ(tb::train::share_gpus_problem({.cp = 2, .tp = 2}, 2), "");
  const std::string alone = tb::train::share_gpus_problem({.dp = 4}, 2);
  EXPECT_NE(alone.find("--share-gpus: 4 ranks of layout dp4 cp1 pp1 tp1 vp1 cannot share this node's 2 GPUs: not a "
                       "mix with tp or pp"),
            std::string::npos)
      << alone;
  const std::string big = tb::train::share_gpus_problem({.dp = 2, .tp = 4, .sequence_parallel = true}, 2);
  EXPECT_NE(big.find("tp (4) is above the GPU count (2)"), std::string::npos) << big;
  EXPECT_NE(tb::train::share_gpus_problem({.dp = 2, .cp = 2, .tp = 2}, 2).find("dp x cp shares one optimizer group"),
            std::string::npos);
}
