// trainer_cuda_packed_gpu_test: the CUDA trainer on packed fine-tuning data (train/packed_data.h) against the CPU
// trainer, the reference, on the same spec: `small` at 2 layers, seq 256, SQuAD-like packed rows, 2 micro-batches of
// 2 rows per step (the loss normalised by the step's counted tokens across them), 3 steps from the same initial
// weights (tests/train/init_weights_gpu_test.cpp). Both draw the same rows: the counted tokens and the FLOPs of the
// documents agree exactly; the losses agree within bf16's reach (step 1 within 1%, the next two within 2%) and the
// first gradient norm within 3%, with the step replayed as a CUDA graph (each step's documents reach the captured
// attention through its segment tables). The same with LoRA fine-tuning (canonical adapters of rank 8, dropout 0.1:
// the masks keyed by each row's place in the step, as on the CPU). Then a longer CUDA run learns the answers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>

#include "bench/sysinfo.h"
#include "model/lora.h"
#include "train/trainer.h"

namespace {

#define SKIP_WITHOUT_GPU() \
  if (tb::bench::visible_gpu_count() == 0) GTEST_SKIP() << tb::bench::no_gpu_reason()

tb::train::TrainSpec packed_small(int steps, tb::train::Device device) {
  tb::train::TrainSpec s;
  s.model.preset = "small";
  s.model.layers = 2;
  s.model.seq = 256;
  s.batch.micro = 2;
  s.batch.global = 4;
  s.run.steps = steps;
  s.run.warmup_steps = 1;
  s.run.device = device;
  s.run.data = "packed-squad";
  s.run.op_profile = false;
  return s;
}

// 3 steps of packed_small, `adjust`ed, on CUDA and on the CPU: the comparisons above.
void expect_cuda_matches_cpu(const std::function<void(tb::train::TrainSpec&)>& adjust) {
  auto gpu_spec = packed_small(3, tb::train::Device::cuda), cpu_spec = packed_small(3, tb::train::Device::cpu);
  adjust(gpu_spec), adjust(cpu_spec);
  const auto gpu = tb::train::train_cuda(gpu_spec, nullptr);
  const auto cpu = tb::train::train_cpu(cpu_spec, nullptr);
  ASSERT_EQ(gpu.steps.size(), 3u);
  ASSERT_EQ(cpu.steps.size(), 3u);
  EXPECT_EQ(gpu.graph, "captured");
  EXPECT_EQ(gpu.loss_tokens_per_step, cpu.loss_tokens_per_step);
  EXPECT_LT(gpu.loss_tokens_per_step, 0.2 * gpu.tokens_per_step);  // the answers, not the rows
  EXPECT_NEAR(gpu.flops_per_step / cpu.flops_per_step, 1.0, 1e-12);
  for (int i = 0; i < 3; ++i) {
    std::printf("step %d: loss cpu %.5f gpu %.5f | grad norm cpu %.5f gpu %.5f\n", i + 1, cpu.steps[i].loss,
                gpu.steps[i].loss, cpu.steps[i].grad_norm, gpu.steps[i].grad_norm);
    EXPECT_NEAR(gpu.steps[i].loss, cpu.steps[i].loss, (i == 0 ? 1e-2 : 2e-2) * cpu.steps[i].loss) << "step " << i + 1;
  }
  EXPECT_NEAR(gpu.steps[0].grad_norm, cpu.steps[0].grad_norm, 3e-2 * cpu.steps[0].grad_norm);
}

TEST(TrainerCudaPacked, MatchesTheCpuTrainer) {
  SKIP_WITHOUT_GPU();
  expect_cuda_matches_cpu([](tb::train::TrainSpec&) {});
}

TEST(TrainerCudaPacked, LoraMatchesTheCpuTrainer) {
  SKIP_WITHOUT_GPU();
  expect_cuda_matches_cpu([](tb::train::TrainSpec& s) {
    s.lora.rank = 8, s.lora.dropout = 0.1, s.lora.targets = tb::model::kLoraCanonical;
  });
}

TEST(TrainerCudaPacked, LearnsTheAnswers) {
  SKIP_WITHOUT_GPU();
  auto spec = packed_small(150, tb::train::Device::cuda);
  spec.model.layers = 4, spec.model.seq = 512, spec.batch.micro = 8, spec.batch.global = 8;
  const auto res = tb::train::train_cuda(spec, nullptr);
  ASSERT_EQ(res.steps.size(), 150u);
  std::printf("packed-squad: loss %.4f -> %.4f, floor %.4f\n", res.steps.front().loss, res.steps.back().loss,
              res.loss_floor);
  EXPECT_NEAR(res.steps.front().loss, std::log(512.0), 0.1 * std::log(512.0));  // starts at chance
  EXPECT_LT(res.steps.back().loss, res.steps.front().loss - 1.0);
  EXPECT_GT(res.steps.back().loss, 0.95 * res.loss_floor);
}

}  // namespace
