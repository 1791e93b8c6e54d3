// Tests train/trainer on the CPU backend: the tiny model learns the markov task to near its floor in a
// hundred-odd steps, the same seed gives the same losses, packed data counts its answers, a run resumed from its
// checkpoint continues with the same losses (a LoRA run from its adapter checkpoint too), and bad specs fail before
// any work (also the CUDA-only --fp8-attention combinations, checked by validate() without a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <tuple>

#include "core/error.h"
#include "core/interrupt.h"
#include "model/lora.h"
#include "model/param_layout.h"
#include "train/safetensors.h"
#include "train/trainer.h"
#include "../support/config_error.h"

namespace {
tb::train::TrainSpec tiny(int steps) {
  tb::train::TrainSpec s;
  s.model.preset = "tiny";
  s.run.device = tb::train::Device::cpu;
  s.model.seq = 32;
  s.batch.micro = 8;
  s.run.steps = steps;
  s.run.warmup_steps = 1;
  s.run.data = "markov";
  return s;
}

// validate()'s config error for s, or "accepted".
std::string refusal(const tb::train::TrainSpec& s) {
  return tb::testing_support::config_error([&] { tb::train::validate(s); }, "accepted");
}

// A CUDA run of `small` in FP8 with the FP8 LM head (validated only: no GPU needed).
tb::train::TrainSpec fp8_head_spec() {
  tb::train::TrainSpec s;
  s.model.preset = "small", s.run.device = tb::train::Device::cuda, s.precision.linear = tb::train::Precision::fp8,
  s.precision.fp8.lm_head = true;
  return s;
}

// The resume tests' run: tiny at seq 128 on packed-squad, 2 micro-batches of 2 rows per step, 6 steps.
tb::train::TrainSpec packed_tiny() {
  auto s = tiny(6);
  s.model.seq = 128, s.run.data = "packed-squad";
  s.batch.micro = 2, s.batch.global = 4;
  return s;
}

// spec run whole, saving `file` after step 3, then resumed from it: the resumed run's steps 4 to 6 equal the whole
// run's bit for bit (step, loss, gradient norm, learning rate).
struct Resumed {
  tb::train::TrainResult whole, resumed;
};
Resumed expect_resume_continues(const tb::train::TrainSpec& spec, const std::string& file) {
  std::filesystem::remove(file);
  auto saving = spec;
  saving.run.save = file, saving.run.save_step = 3;
  Resumed r{tb::train::train_cpu(saving, nullptr), {}};
  EXPECT_TRUE(std::filesystem::exists(file));
  auto resuming = spec;
  resuming.run.resume = file;
  r.resumed = tb::train::train_cpu(resuming, nullptr);
  EXPECT_EQ(r.resumed.steps.size(), 3u);
  for (std::size_t i = 0; i < r.resumed.steps.size(); ++i) {
    const auto &a = r.whole.steps[i + 3], &b = r.resumed.steps[i];
    EXPECT_EQ(b.step, a.step);
    EXPECT_EQ(b.loss, a.loss) << "step " << a.step;
    EXPECT_EQ(b.grad_norm, a.grad_norm) << "step " << a.step;
    EXPECT_EQ(b.lr, a.lr) << "step " << a.step;
  }
  return r;
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
  spec.batch.micro = 2;
  spec.batch.global = 8;  // 4 micro-batches accumulate: the same data as one batch of 8
  const auto a = tb::train::train_cpu(spec, nullptr), b = tb::train::train_cpu(spec, nullptr);
  const auto whole = tb::train::train_cpu(tiny(5), nullptr);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(a.steps[i].loss, b.steps[i].loss) << i;
    EXPECT_NEAR(a.steps[i].loss, whole.steps[i].loss, 1e-4) << i;  // accumulation == one big batch
  }
}

// Packed data: the loss counts the answers (far fewer than the tokens), the FLOPs count the documents at their own
// lengths (below the unpacked rows'), the loss falls (the markov chain inside the documents), and accumulation over
// micro-batches normalises by the step's counted tokens (the same losses as one batch of the same rows).
TEST(TrainerCpu, PackedDataCountsTheAnswersAndLearns) {
  auto spec = tiny(30);
  spec.model.seq = 128;
  spec.run.data = "packed-squad";
  const auto res = tb::train::train_cpu(spec, nullptr);
  EXPECT_NEAR(res.loss_floor, std::log(4.0), 1e-12);
  EXPECT_GT(res.loss_tokens_per_step, 0);
  EXPECT_LT(res.loss_tokens_per_step, 0.2 * res.tokens_per_step);
  auto unpacked = tiny(3);
  unpacked.model.seq = 128;
  const auto plain = tb::train::train_cpu(unpacked, nullptr);
  EXPECT_EQ(plain.loss_tokens_per_step, plain.tokens_per_step);
  EXPECT_LT(res.flops_per_step, plain.flops_per_step);
  EXPECT_LT(res.steps.back().loss, res.steps.front().loss - 0.5);  // ln 256 = 5.5 at the start, ln 4 the floor
  auto whole = tiny(3);
  whole.model.seq = 128, whole.run.data = "packed-squad";
  auto accumulated = whole;
  accumulated.batch.micro = 2, accumulated.batch.global = 8;
  const auto one = tb::train::train_cpu(whole, nullptr), acc = tb::train::train_cpu(accumulated, nullptr);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(acc.steps[i].loss, one.steps[i].loss, 1e-4) << i;
}

// A checkpoint taken after step 3 of 6 (train/checkpoint.h), resumed: steps 4 to 6 have the losses, gradient norms
// and learning rates of the run that went on, bit for bit (weights, moments, the step count, the schedule and the
// packed data stream all continue). Resuming into another model, data or global batch is refused with one message
// naming the difference, and the file is left as it was.
TEST(TrainerCpu, ResumedRunContinuesWithTheSameLosses) {
  const std::string file = (std::filesystem::temp_directory_path() / "tb_trainer_resume.safetensors").string();
  const auto spec = packed_tiny();
  const Resumed r = expect_resume_continues(spec, file);
  ASSERT_FALSE(r.resumed.steps.empty());
  EXPECT_NE(r.resumed.steps[0].loss, tb::train::train_cpu(spec, nullptr).steps[0].loss);  // not a fresh start
  auto resuming = spec;
  resuming.run.resume = file;

  const auto bytes = [&] {
    std::ifstream in(file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string before = bytes();
  auto other = resuming;
  other.model.layers = 1;  // other shapes: every tensor of the second layer is in the file but not here
  other.run.save = file;
  std::string msg = tb::testing_support::config_error([&] { tb::train::train_cpu(other, nullptr); });
  EXPECT_NE(msg.find("'layers.1.attn.qkv.weight' is in the file but not here"), std::string::npos) << msg;
  EXPECT_NE(msg.find("nothing was loaded"), std::string::npos) << msg;
  other = resuming;
  other.batch.global = 8, other.run.data = "markov";
  msg = tb::testing_support::config_error([&] { tb::train::train_cpu(other, nullptr); });
  EXPECT_NE(msg.find("data packed-squad (this run: markov), global batch 4 (this run: 8)"),
            std::string::npos)
      << msg;
  other = resuming;
  other.run.steps = 3;  // nothing left to run
  msg = tb::testing_support::config_error([&] { tb::train::train_cpu(other, nullptr); });
  EXPECT_NE(msg.find("it holds 3 steps"), std::string::npos) << msg;
  EXPECT_EQ(bytes(), before) << "a refused resume left the checkpoint as it was";
  std::filesystem::remove(file);
}

// LoRA fine-tuning on packed data (dropout on, keyed by the step), checkpointed after step 3 of 6: the file holds the
// adapters and their two moments alone, not the frozen base (the resumed run draws it from the seed), and the resumed
// run repeats steps 4 to 6 bit for bit; a run without the adapters refuses the file, naming them.
TEST(TrainerCpu, ResumedLoraRunContinuesFromItsAdapterCheckpoint) {
  const std::string file = (std::filesystem::temp_directory_path() / "tb_trainer_lora_resume.safetensors").string();
  auto spec = packed_tiny();
  spec.lora.rank = 4, spec.lora.dropout = 0.1, spec.lora.targets = tb::model::kLoraCanonical;
  const Resumed r = expect_resume_continues(spec, file);

  const tb::model::DenseLayout layout = tb::model::dense_layout(r.whole.model);
  std::size_t adapters = 0;
  for (const auto& s : layout.slots) adapters += s.has_grad();
  ASSERT_GT(adapters, 0u);
  const auto entries = tb::train::read_tensor_entries(file);
  EXPECT_EQ(entries.size(), 3 * adapters) << "the adapters and their two moments";
  std::size_t bytes = 0;
  for (const auto& e : entries) {
    EXPECT_NE(e.name.find(".lora_"), std::string::npos) << e.name << ": the frozen base is not in the file";
    bytes += e.bytes;
  }
  EXPECT_EQ(bytes, 3 * 4 * layout.grad_total);

  auto full = spec;
  full.lora = {}, full.run.resume = file;
  const std::string msg = tb::testing_support::config_error([&] { tb::train::train_cpu(full, nullptr); });
  EXPECT_NE(msg.find("adapters LoRA r 4 alpha 8 dropout 0.1 on canonical (this run: none)"), std::string::npos)
      << msg;
  std::filesystem::remove(file);
}

TEST(TrainerCpu, BadSpecsFailBeforeWork) {
  auto s = tiny(5);
  s.batch.global = 12;
  s.batch.micro = 8;
  EXPECT_THROW(tb::train::train_cpu(s, nullptr), tb::Error);
  s = tiny(5);
  s.model.preset = "nope";
  EXPECT_THROW(tb::train::train_cpu(s, nullptr), tb::Error);
  s = tiny(5);
  s.run.warmup_steps = 5;
  EXPECT_THROW(tb::train::train_cpu(s, nullptr), tb::Error);
  s = tiny(5);
  s.run.save_step = 2;  // without --save
  EXPECT_NE(refusal(s).find("--save-step 2"), std::string::npos) << refusal(s);
  s = tiny(5);
  s.run.resume = "x.safetensors", s.parallel.tp = 2;  // one rank only
  EXPECT_NE(refusal(s).find("one-rank runs so far"), std::string::npos) << refusal(s);
  s = tiny(5);
  s.run.save = "x.safetensors", s.parallel.dp = 2;
  EXPECT_NE(refusal(s).find("one-rank runs so far"), std::string::npos) << refusal(s);
  s = tiny(5);
  s.run.resume = "x.safetensors", s.run.device = tb::train::Device::cuda;
  s.precision.linear = tb::train::Precision::fp8;  // its scaling history is not in the file
  EXPECT_NE(refusal(s).find("--resume with --precision fp8"), std::string::npos) << refusal(s);
  s.precision.linear = tb::train::Precision::bf16, s.run.resume.clear(), s.run.save = "x.safetensors";
  s.model.preset = "small";  // (the CUDA kernels' alignment)
  EXPECT_EQ(refusal(s), "accepted");  // one GPU saves
  s = tiny(5);
  s.run.autotune = true;  // nothing to tune on the CPU: refused, not ignored
  EXPECT_NE(tb::testing_support::config_error([&] { tb::train::validate(s); }).find("--autotune"), std::string::npos);
}

// Names become enums once, through the choice tables; an unknown name is one config error listing the choices.
TEST(TrainSpec, ChoicesParseByName) {
  using namespace tb::train;
  EXPECT_EQ(parse_choice(kRecomputeModes, "selective", "--recompute"), tb::model::Recompute::selective);
  EXPECT_EQ(parse_choice(kSwitches, "auto", "--graph"), Switch::automatic);
  EXPECT_EQ(parse_choice(kStateTypes, "bf16", "--moments"), tb::DType::bf16);
  EXPECT_EQ(name(WeightCast::automatic), "auto");
  EXPECT_EQ(name(tb::model::Recompute::full), "full");
  EXPECT_EQ(tb::testing_support::config_error([] { parse_choice(kGradBuffers, "pooled", "--grad-buffer"); }),
            "--grad-buffer 'pooled': expected shared or separate");
  EXPECT_EQ(tb::testing_support::config_error([] { parse_choice(kWeightCasts, "adamw", "--fp8-weight-cast"); }),
            "--fp8-weight-cast 'adamw': expected auto, fused or separate");
  EXPECT_EQ(tb::testing_support::config_error([] { parse_choice(kStateTypes, "fp16", "--grads"); }),
            "--grads 'fp16': expected f32 or bf16");
  for (const auto& c : kFp8Formats) EXPECT_EQ(parse_choice(kFp8Formats, c.name, "--fp8-format"), c.value);
}

// --fp8-attention: each combination cuDNN's FP8 attention cannot run is refused by validate() (no GPU needed) with
// one config error naming the flag and what to do.
TEST(TrainerCpu, Fp8AttentionRefusalsNameTheFlag) {
  tb::train::TrainSpec ok;
  ok.model.preset = "small-hd128", ok.run.device = tb::train::Device::cuda;
  ok.precision.linear = tb::train::Precision::fp8, ok.precision.fp8.attention = true;
  EXPECT_NO_THROW(tb::train::validate(ok));
  ok.parallel.tp = 2, ok.parallel.pp = 2;  // tensor and pipeline parallel: each rank's heads, each set's own scale
  EXPECT_NO_THROW(tb::train::validate(ok));
  tb::train::TrainSpec s = ok;
  s.precision.linear = tb::train::Precision::bf16;
  EXPECT_EQ(refusal(s), "--fp8-attention needs --precision fp8");
  s = ok, s.model.preset = "small";
  EXPECT_NE(refusal(s).find("--fp8-attention needs head_dim 128"), std::string::npos) << refusal(s);
  EXPECT_NE(refusal(s).find("small has head_dim 64"), std::string::npos) << refusal(s);
  s = ok, s.parallel.cp = 2;
  EXPECT_NE(refusal(s).find("--fp8-attention does not combine with context parallel (--cp 2)"), std::string::npos)
      << refusal(s);
  s = ok, s.run.deterministic = true;
  EXPECT_NE(refusal(s).find("drop --deterministic or --fp8-attention"), std::string::npos) << refusal(s);
  s = ok, s.precision.fp8.format = tb::train::Fp8Format::e4m3;  // all-E4M3: the attention gradients too
  EXPECT_EQ(refusal(s), "accepted");
}

// --debug-fp8-lm-head-grad: refused without the FP8 head; the head's logit gradients follow --fp8-format unless told.
TEST(TrainerCpu, Fp8LmHeadGradFormat) {
  const tb::train::TrainSpec ok = fp8_head_spec();
  tb::train::TrainSpec s = ok;
  s.debug.fp8_head_grad = tb::DType::e5m2;
  EXPECT_EQ(refusal(s), "accepted");
  s = ok, s.precision.fp8.lm_head = false, s.debug.fp8_head_grad = tb::DType::e4m3;
  EXPECT_EQ(refusal(s),
            "--debug-fp8-lm-head-grad sets the FP8 LM head's logit gradients: add --fp8-lm-head (or drop it)");
  s = ok;
  EXPECT_EQ(tb::train::fp8_head_grad_format(s), tb::DType::e5m2);
  s.precision.fp8.format = tb::train::Fp8Format::e4m3;
  EXPECT_EQ(tb::train::fp8_head_grad_format(s), tb::DType::e4m3);
  s.debug.fp8_head_grad = tb::DType::e5m2;
  EXPECT_EQ(tb::train::fp8_head_grad_format(s), tb::DType::e5m2);
  s = ok, s.debug.fp8_head_grad = tb::DType::e4m3;
  EXPECT_EQ(tb::train::fp8_head_grad_format(s), tb::DType::e4m3);
}

// --debug-fp8-lm-head-gemms: a subset of forward, dgrad, wgrad (default: all three); refused without the FP8 head,
// with an unknown, repeated or empty name.
TEST(TrainerCpu, Fp8LmHeadGemms) {
  using tb::train::HeadGemms, tb::train::parse_head_gemms;
  const tb::train::TrainSpec ok = fp8_head_spec();
  tb::train::TrainSpec s = ok;
  EXPECT_TRUE(s.debug.fp8_head_gemms.all());
  EXPECT_EQ(parse_head_gemms("wgrad,dgrad"), (HeadGemms{false, true, true}));
  EXPECT_EQ(tb::train::head_gemm_names(parse_head_gemms("wgrad,dgrad")), "dgrad,wgrad");  // in the head's order
  EXPECT_EQ(parse_head_gemms("forward"), (HeadGemms{true, false, false}));
  auto refused = [](const char* text) { return tb::testing_support::config_error([&] { parse_head_gemms(text); }); };
  EXPECT_EQ(refused("forward,fwd"),
            "--debug-fp8-lm-head-gemms takes forward, dgrad, wgrad, comma-separated; 'fwd' is none of them");
  EXPECT_EQ(refused("dgrad,dgrad"), "--debug-fp8-lm-head-gemms names 'dgrad' twice");
  EXPECT_EQ(refused("dgrad,"),
            "--debug-fp8-lm-head-gemms takes forward, dgrad, wgrad, comma-separated; it has an empty item");
  s.debug.fp8_head_gemms = parse_head_gemms("dgrad,wgrad");
  EXPECT_EQ(refusal(s), "accepted");
  s.precision.fp8.lm_head = false;
  EXPECT_EQ(refusal(s), "--debug-fp8-lm-head-gemms chooses the FP8 LM head's GEMMs: add --fp8-lm-head (or drop it)");
}

// --debug-fp8-lm-head-rounding: nearest or stochastic (the default), only with the FP8 head.
TEST(TrainerCpu, Fp8LmHeadRounding) {
  const tb::train::TrainSpec ok = fp8_head_spec();
  tb::train::TrainSpec s = ok;
  EXPECT_EQ(tb::train::fp8_head_rounding(s), tb::train::Rounding::stochastic);
  s.debug.fp8_head_rounding = tb::train::Rounding::nearest;
  EXPECT_EQ(refusal(s), "accepted");
  EXPECT_EQ(tb::train::fp8_head_rounding(s), tb::train::Rounding::nearest);
  s = ok, s.precision.fp8.lm_head = false;
  EXPECT_EQ(refusal(s), "accepted");
  s.debug.fp8_head_rounding = tb::train::Rounding::nearest;
  EXPECT_EQ(refusal(s),
            "--debug-fp8-lm-head-rounding rounds the FP8 LM head's logit gradients: add --fp8-lm-head "
            "(or drop it)");
}

// --debug-fp8-grad-rounding: nearest (the default) or stochastic, only in FP8.
TEST(TrainerCpu, Fp8GradRounding) {
  tb::train::TrainSpec s = fp8_head_spec();
  EXPECT_EQ(s.debug.fp8_grad_rounding, tb::train::Rounding::nearest);
  s.debug.fp8_grad_rounding = tb::train::Rounding::stochastic;
  EXPECT_EQ(refusal(s), "accepted");
  s.precision.fp8.lm_head = false, s.precision.linear = tb::train::Precision::bf16;
  EXPECT_EQ(refusal(s),
            "--debug-fp8-grad-rounding rounds the FP8 linear layers' gradients: add --precision fp8 (or drop it)");
}

// --debug-fp8-attention-emulate: qkv, o or both, with FP8 and BF16 attention only.
TEST(TrainerCpu, Fp8AttentionEmulate) {
  tb::train::TrainSpec s = fp8_head_spec();
  for (const char* v : {"qkv", "o", "qkv,o", "o,qkv"}) {
    s.debug.fp8_attention_emulate = tb::train::parse_attention_emulation(v);
    EXPECT_EQ(refusal(s), "accepted") << v;
  }
  EXPECT_EQ(tb::train::attention_emulation_name(tb::train::parse_attention_emulation("o,qkv")), "qkv,o");
  EXPECT_EQ(tb::testing_support::config_error([] { tb::train::parse_attention_emulation("p"); }),
            "--debug-fp8-attention-emulate takes qkv, o, comma-separated; 'p' is none of them");
  const std::string needs =
      "--debug-fp8-attention-emulate (a diagnostic of BF16 attention) needs --precision fp8 "
      "without --fp8-attention, --cp 1 and --recompute none";
  s.debug.fp8_attention_emulate = tb::train::parse_attention_emulation("qkv");
  s.memory.recompute = tb::model::Recompute::selective;
  EXPECT_EQ(refusal(s), needs);
  s.memory.recompute = tb::model::Recompute::none, s.precision.linear = tb::train::Precision::bf16;
  s.precision.fp8.lm_head = false;
  EXPECT_EQ(refusal(s), needs);
}

// --fp8-weight-cast: auto (the default), fused or separate.
TEST(TrainerCpu, Fp8WeightCast) {
  tb::train::TrainSpec s = fp8_head_spec();
  EXPECT_EQ(s.precision.fp8.weight_cast, tb::train::WeightCast::automatic);
  for (const auto v : {tb::train::WeightCast::fused, tb::train::WeightCast::separate}) {
    s.precision.fp8.weight_cast = v;
    EXPECT_EQ(refusal(s), "accepted") << tb::train::name(v);
  }
}

// --grads: f32 (the default) or bf16, the latter on one GPU only.
TEST(TrainerCpu, GradsBf16OnOneGpu) {
  tb::train::TrainSpec s = fp8_head_spec();
  EXPECT_EQ(s.memory.grads, tb::DType::f32);
  s.memory.grads = tb::DType::bf16;
  EXPECT_EQ(refusal(s), "accepted");
  const std::string one_gpu = "--grads bf16 runs on one GPU (--device cuda, dp, tp, pp and cp 1): the CPU backend and "
                              "the parallel layouts' gradient reductions are fp32; drop --grads bf16 for them";
  for (auto [tp, pp, cp, dp] : {std::tuple{2, 1, 1, 1}, {1, 2, 1, 1}, {1, 1, 2, 1}, {1, 1, 1, 2}}) {
    tb::train::TrainSpec p = s;
    p.memory.grads = tb::DType::bf16, p.parallel.tp = tp, p.parallel.pp = pp, p.parallel.cp = cp, p.parallel.dp = dp;
    EXPECT_EQ(refusal(p), one_gpu) << tp << pp << cp << dp;
  }
  tb::train::TrainSpec cpu = tiny(2);
  cpu.memory.grads = tb::DType::bf16;
  EXPECT_EQ(refusal(cpu), one_gpu);
}

// Every CUDA layout takes GPT-3's form (learned positions, tied embeddings): validate() refuses none of them (context
// parallel with learned positions was refused until its 2-GPU check passed).
TEST(TrainerCpu, CudaLayoutsTakeLearnedPositionsAndTiedEmbeddings) {
  tb::train::TrainSpec s;
  s.model.preset = "small-gpt", s.run.device = tb::train::Device::cuda;
  for (auto [tp, pp, cp] : {std::tuple{2, 1, 1}, {1, 2, 1}, {1, 1, 2}, {2, 2, 2}, {4, 1, 1}, {1, 4, 1}, {4, 2, 1}}) {
    s.parallel.tp = tp, s.parallel.pp = pp, s.parallel.cp = cp;
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
