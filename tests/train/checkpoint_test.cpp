// checkpoint_test: train/checkpoint.h.
//   - the state of `tiny` (its parameters and two moments, every bit pattern of random floats) round-trips bit for bit
//     with its info; the file is a safetensors file the Python package reads: every parameter by its registry name and
//     both moments;
//   - a checkpoint of another run (model, data, seed, global batch) or of other shapes is refused naming each
//     difference, and the state it was loaded into is untouched; so is a safetensors file that is no checkpoint;
//   - a LoRA state's file holds the adapters and their moments alone (an adapter checkpoint): they round-trip bit for
//     bit and the frozen base of the state loaded into stays its own; a run without those adapters refuses it.
#include "train/checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/lora.h"
#include "model/param_layout.h"
#include "train/safetensors.h"
#include "../support/config_error.h"
#include "../support/shell.h"

namespace tb::train {
namespace {

namespace fs = std::filesystem;

struct State {
  model::DenseLayout layout;
  std::vector<float> params, m, v;
  explicit State(const model::ModelConfig& c)
      : layout(model::dense_layout(c)), params(layout.total), m(layout.grad_total), v(layout.grad_total) {}
  TrainState view() { return {layout.slots, params, m, v}; }
  void randomize(std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (auto* buf : {&params, &m, &v})
      for (float& x : *buf) {
        const auto bits = std::uint32_t(rng());
        std::memcpy(&x, &bits, 4);
      }
  }
  static bool same(std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
  }
  bool operator==(const State& o) const { return same(params, o.params) && same(m, o.m) && same(v, o.v); }
};

const CheckpointInfo kInfo{7, "tiny", "packed-squad", 1234, 4, ""};

TEST(Checkpoint, RoundTripsBitForBitAndPythonReadsIt) {
  const fs::path p = fs::temp_directory_path() / "tb_checkpoint_round.safetensors";
  const model::ModelConfig c = model::preset("tiny");
  State a(c), b(c);
  a.randomize(1);
  save_checkpoint(p, a.view(), kInfo);
  CheckpointInfo run = kInfo;
  run.step = 0;  // the run's own step is not compared
  const CheckpointInfo got = load_checkpoint(p, b.view(), run);
  EXPECT_TRUE(a == b);
  EXPECT_EQ(got.step, 7);
  EXPECT_EQ(got.model, "tiny");
  EXPECT_EQ(got.global_batch, 4);
  const std::size_t slots = a.layout.slots.size();
  const auto py = testing_support::run_shell(
      "PYTHONPATH=.deps/pytools python3 -c \"import sys; from safetensors import deserialize; "
      "t = dict(deserialize(open(sys.argv[1], 'rb').read())); "
      "print(len(t), t['exp_avg_sq.layers.1.attn.qkv.weight']['shape'], t['final_norm.weight']['dtype'])\" " +
      p.string() + " 2>&1");
  EXPECT_EQ(py.rc, 0) << py.out << "(scripts/setup.sh installs the safetensors package into .deps/pytools)";
  const auto& qkv = *std::find_if(a.layout.slots.begin(), a.layout.slots.end(),
                                  [](const model::Slot& s) { return s.name == "layers.1.attn.qkv.weight"; });
  EXPECT_EQ(py.out, std::to_string(3 * slots) + " [" + std::to_string(qkv.shape[0]) + ", " +
                        std::to_string(qkv.shape[1]) + "] F32\n");
  fs::remove(p);
}

TEST(Checkpoint, AnotherRunsFileIsRefusedAndNothingIsLoaded) {
  const fs::path p = fs::temp_directory_path() / "tb_checkpoint_other.safetensors";
  const model::ModelConfig c = model::preset("tiny");
  State a(c), into(c);
  a.randomize(2), into.randomize(3);
  const State before = into;
  save_checkpoint(p, a.view(), kInfo);
  CheckpointInfo other = kInfo;
  other.seed = 99, other.model = "small";
  std::string msg = testing_support::config_error([&] { load_checkpoint(p, into.view(), other); });
  EXPECT_NE(msg.find("written by another run: model tiny (this run: small), seed 1234 (this run: 99)"),
            std::string::npos)
      << msg;
  model::ModelConfig wider = c;
  wider.ffn = 256;  // the same names, other shapes
  State w(wider);
  msg = testing_support::config_error([&] { load_checkpoint(p, w.view(), kInfo); });
  EXPECT_NE(msg.find("'layers.0.mlp.fc1.weight' is f32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("nothing was loaded"), std::string::npos) << msg;
  std::vector<float> x(4);
  save_tensors(p, std::vector<NamedTensor>{{"x", DType::f32, {4}, std::as_writable_bytes(std::span(x))}});
  msg = testing_support::config_error([&] { load_checkpoint(p, into.view(), kInfo); });
  EXPECT_NE(msg.find("not a trainbench checkpoint"), std::string::npos) << msg;
  EXPECT_TRUE(into == before);
  fs::remove(p);
}

TEST(Checkpoint, LoraFileHoldsTheAdaptersAlone) {
  const fs::path p = fs::temp_directory_path() / "tb_checkpoint_lora.safetensors";
  model::ModelConfig c = model::preset("tiny");
  c.lora.rank = 4, c.lora.targets = model::kLoraCanonical;
  State a(c), into(c);
  a.randomize(4), into.randomize(5);
  const State before = into;
  CheckpointInfo info = kInfo;
  info.lora = model::lora_text(c.lora);
  save_checkpoint(p, a.view(), info);
  std::size_t adapters = 0;
  for (const model::Slot& s : a.layout.slots) adapters += s.has_grad();
  ASSERT_GT(adapters, 0u);
  ASSERT_LT(adapters, a.layout.slots.size());
  const std::vector<TensorEntry> entries = read_tensor_entries(p);
  EXPECT_EQ(entries.size(), 3 * adapters);
  for (const TensorEntry& e : entries) EXPECT_NE(e.name.find(".lora_"), std::string::npos) << e.name;
  load_checkpoint(p, into.view(), info);
  for (const model::Slot& s : a.layout.slots) {  // the adapters are a's, the frozen base still its own
    const std::span<const float> got = std::span(into.params).subspan(s.offset, s.size);
    EXPECT_TRUE(State::same(got, std::span(s.has_grad() ? a.params : before.params).subspan(s.offset, s.size)))
        << s.name;
  }
  EXPECT_TRUE(State::same(into.m, a.m) && State::same(into.v, a.v));
  State full(model::preset("tiny"));
  const std::string msg = testing_support::config_error([&] { load_checkpoint(p, full.view(), kInfo); });
  EXPECT_NE(msg.find("adapters LoRA r 4 alpha 8 dropout 0 on canonical (this run: none)"), std::string::npos) << msg;
  fs::remove(p);
}

}  // namespace
}  // namespace tb::train
