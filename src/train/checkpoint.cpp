// train/checkpoint.cpp: checkpoint.h's tensors and metadata over train/safetensors.h.
#include "train/checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <map>
#include <vector>

#include "core/error.h"
#include "train/safetensors.h"

namespace tb::train {
namespace {

constexpr const char* kFormat = "trainbench.checkpoint.v1";

// The trainable slots' weights (at their offset), then both moments (at their grad_offset).
std::vector<NamedTensor> tensors(const TrainState& s) {
  std::vector<NamedTensor> out;
  const auto add = [&](const std::string& prefix, std::span<float> buf, bool moment) {
    for (const model::Slot& slot : s.slots) {
      if (!slot.has_grad()) continue;  // frozen: the seed's weights, no optimizer state
      const std::size_t at = moment ? slot.grad_offset : slot.offset;
      TB_REQUIRE(at + slot.size <= buf.size(), "checkpoint: " + prefix + slot.name + " lies beyond its buffer");
      out.push_back({prefix + slot.name, DType::f32, slot.shape, std::as_writable_bytes(buf.subspan(at, slot.size))});
    }
  };
  add("", s.params, false);
  add("exp_avg.", s.exp_avg, true);
  add("exp_avg_sq.", s.exp_avg_sq, true);
  return out;
}

std::map<std::string, std::string> metadata(const CheckpointInfo& i) {
  return {{"format", kFormat},
          {"step", std::to_string(i.step)},
          {"model", i.model},
          {"data", i.data},
          {"seed", std::to_string(i.seed)},
          {"global_batch", std::to_string(i.global_batch)},
          {"lora", i.lora}};
}

template <class T>
T number(const std::map<std::string, std::string>& meta, const std::string& key, const std::string& what) {
  const auto it = meta.find(key);
  T v{};
  const bool ok = it != meta.end() &&
                  std::from_chars(it->second.data(), it->second.data() + it->second.size(), v).ec == std::errc{};
  TB_REQUIRE(ok, fmt::format("{}: its metadata has no number '{}'; not a trainbench checkpoint?", what, key));
  return v;
}

}  // namespace

void save_checkpoint(const std::filesystem::path& path, const TrainState& s, const CheckpointInfo& info) {
  save_tensors(path, tensors(s), metadata(info));
}

CheckpointInfo load_checkpoint(const std::filesystem::path& path, const TrainState& s, const CheckpointInfo& run) {
  const std::string what = fmt::format("checkpoint '{}'", path.string());
  std::map<std::string, std::string> meta;
  read_tensor_entries(path, &meta);
  TB_REQUIRE(meta["format"] == kFormat,
             fmt::format("{}: format '{}', not {}: a safetensors file, but not a trainbench checkpoint", what,
                         meta["format"], kFormat));
  CheckpointInfo file;
  file.step = number<int>(meta, "step", what);
  file.model = meta["model"], file.data = meta["data"];
  file.seed = number<std::uint64_t>(meta, "seed", what);
  file.global_batch = number<int>(meta, "global_batch", what);
  file.lora = meta["lora"];
  std::vector<std::string> differ;
  if (file.model != run.model) differ.push_back(fmt::format("model {} (this run: {})", file.model, run.model));
  if (file.data != run.data) differ.push_back(fmt::format("data {} (this run: {})", file.data, run.data));
  if (file.seed != run.seed) differ.push_back(fmt::format("seed {} (this run: {})", file.seed, run.seed));
  if (file.global_batch != run.global_batch)
    differ.push_back(fmt::format("global batch {} (this run: {})", file.global_batch, run.global_batch));
  const auto adapters = [](const std::string& l) { return l.empty() ? std::string("none") : l; };
  if (file.lora != run.lora)
    differ.push_back(fmt::format("adapters {} (this run: {})", adapters(file.lora), adapters(run.lora)));
  TB_REQUIRE(differ.empty(), fmt::format("{}: written by another run: {}; resume with the options it was written with; "
                                         "nothing was loaded",
                                         what, fmt::join(differ, ", ")));
  load_tensors(path, tensors(s));
  return file;
}

}  // namespace tb::train
