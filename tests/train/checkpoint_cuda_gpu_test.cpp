// Tests checkpoints of the CUDA trainer on one GPU (train/checkpoint.h through OptimizerCuda's host state): a run of 6
// steps saving after step 3, resumed from the file, repeats steps 4 to 6 bit for bit (loss, gradient norm, learning
// rate; deterministic attention), and the state it saves after step 4 is byte-identical to the whole run's: full
// training with each master (split, f32, none) and moments (f32, bf16), and LoRA with dropout (an adapter checkpoint:
// the adapters and their moments only).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "../support/cuda_train_spec.h"
#include "bench/sysinfo.h"
#include "core/dtype.h"
#include "model/config.h"
#include "train/safetensors.h"
#include "train/trainer.h"

namespace tb::train {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (bench::visible_gpu_count() == 0) GTEST_SKIP() << bench::no_gpu_reason()

TrainSpec small6() {
  TrainSpec s = testing_support::small_cuda_spec(6);
  s.run.deterministic = true;
  return s;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// spec run whole twice (saving after step 3, then after step 4) and resumed from the first file (saving after its
// step 4): the resumed steps 4 to 6 equal the whole run's bit for bit, and so do both files of step 4's state.
void expect_resume_continues(const TrainSpec& spec, const std::string& what) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string at3 = (dir / "tb_cuda_ck3.safetensors").string(), at4 = (dir / "tb_cuda_ck4.safetensors").string(),
                    resumed4 = (dir / "tb_cuda_ck4r.safetensors").string();
  for (const auto& f : {at3, at4, resumed4}) std::filesystem::remove(f);
  TrainSpec saving = spec;
  saving.run.save = at3, saving.run.save_step = 3;
  const TrainResult whole = train_cuda(saving, nullptr);
  ASSERT_TRUE(std::filesystem::exists(at3)) << what;
  saving.run.save = at4, saving.run.save_step = 4;
  train_cuda(saving, nullptr);
  TrainSpec resuming = spec;
  resuming.run.resume = at3, resuming.run.save = resumed4, resuming.run.save_step = 4;
  const TrainResult resumed = train_cuda(resuming, nullptr);
  ASSERT_EQ(resumed.steps.size(), 3u) << what;
  for (std::size_t i = 0; i < 3; ++i) {
    const StepStats &a = whole.steps[i + 3], &b = resumed.steps[i];
    EXPECT_EQ(b.step, a.step) << what;
    EXPECT_EQ(b.loss, a.loss) << what << ", step " << a.step;
    EXPECT_EQ(b.grad_norm, a.grad_norm) << what << ", step " << a.step;
    EXPECT_EQ(b.lr, a.lr) << what << ", step " << a.step;
  }
  EXPECT_NE(resumed.steps[0].loss, whole.steps[0].loss) << what << ": not a fresh start";
  EXPECT_FALSE(read_tensor_entries(at4).empty()) << what;
  EXPECT_TRUE(file_bytes(at4) == file_bytes(resumed4)) << what << ": the state after step 4 differs once resumed";
  for (const auto& f : {at3, at4, resumed4}) std::filesystem::remove(f);
}

TEST(CheckpointCuda, FullTrainingResumesWithTheSameLossesForEveryMasterAndMoments) {
  SKIP_WITHOUT_GPU();
  for (const Master master : {Master::split, Master::f32, Master::none})
    for (const DType moments : {DType::f32, DType::bf16}) {
      TrainSpec s = small6();
      s.optimizer.master = master, s.optimizer.moments = moments;
      expect_resume_continues(s, fmt::format("master {}, moments {}", name(master), dtype_name(moments)));
    }
}

TEST(CheckpointCuda, LoraAdapterCheckpointResumesWithTheSameLosses) {
  SKIP_WITHOUT_GPU();
  TrainSpec s = small6();
  s.lora.rank = 8, s.lora.dropout = 0.1, s.lora.targets = model::kLoraCanonical;
  expect_resume_continues(s, "lora");
  // the adapters only: every tensor of the file is an adapter or an adapter's moment
  const std::string f = (std::filesystem::temp_directory_path() / "tb_cuda_lora.safetensors").string();
  s.run.save = f;
  train_cuda(s, nullptr);
  const auto entries = read_tensor_entries(f);
  ASSERT_FALSE(entries.empty());
  for (const auto& e : entries) EXPECT_NE(e.name.find("lora_"), std::string::npos) << e.name;
  std::filesystem::remove(f);
}

}  // namespace
}  // namespace tb::train
