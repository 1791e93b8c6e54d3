// model/lora.cpp: LoRA target names and the checks of a model's LoRA config (model/lora.h).
#include "model/lora.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/suggest.h"
#include "model/config.h"

namespace tb::model {
namespace {

constexpr std::array<std::pair<std::string_view, unsigned>, 9> kTargets = {{{"q", kLoraQ},
                                                                            {"k", kLoraK},
                                                                            {"v", kLoraV},
                                                                            {"qkv", kLoraQkv},
                                                                            {"o", kLoraO},
                                                                            {"gate", kLoraGate},
                                                                            {"up", kLoraUp},
                                                                            {"fc1", kLoraFc1},
                                                                            {"down", kLoraDown}}};
constexpr std::array<std::pair<std::string_view, unsigned>, 3> kSets = {
    {{"fused", kLoraFused}, {"canonical", kLoraCanonical}, {"mlperf", kLoraMlperf}}};

std::vector<std::string> all_names() {
  std::vector<std::string> names;
  for (const auto& [name, bits] : kSets) names.emplace_back(name);
  for (const auto& [name, bits] : kTargets) names.emplace_back(name);
  return names;
}

}  // namespace

std::string lora_targets_name(unsigned targets) {
  for (const auto& [name, bits] : kSets)
    if (bits == targets) return std::string(name);
  std::string out;
  for (const auto& [name, bits] : kTargets) {
    if (!(targets & bits)) continue;
    if (!out.empty()) out += ',';
    out.append(name);
  }
  return out;
}

std::string lora_text(const LoraConfig& l) {
  return fmt::format("LoRA r {} alpha {:g} dropout {:g} on {}", l.rank, l.scale() * l.rank, l.dropout,
                     lora_targets_name(l.targets));
}

unsigned parse_lora_targets(std::string_view text) {
  for (const auto& [name, bits] : kSets)
    if (name == text) return bits;
  const std::string expected = "fused, canonical, mlperf, or a comma-separated list of q, k, v, qkv, o, gate, up, fc1, "
                               "down";
  TB_REQUIRE(!text.empty() && text.back() != ',', fmt::format("LoRA targets '{}': an empty item; expected {}", text,
                                                              expected));
  unsigned targets = 0;
  for (std::size_t at = 0; at <= text.size();) {
    const std::size_t end = std::min(text.find(',', at), text.size());
    const std::string_view item = text.substr(at, end - at);
    const auto it = std::find_if(kTargets.begin(), kTargets.end(), [&](const auto& t) { return t.first == item; });
    if (it == kTargets.end())
      raise_config(fmt::format("LoRA targets: unknown target '{}'{}; expected {}", item,
                               did_you_mean(item, all_names()), expected));
    TB_REQUIRE(!(targets & it->second), fmt::format("LoRA targets '{}' name '{}' twice", text, item));
    targets |= it->second;
    at = end + 1;
  }
  TB_REQUIRE(!((targets & kLoraQkv) && (targets & (kLoraQ | kLoraK | kLoraV))),
             fmt::format("LoRA targets '{}': qkv is the whole fused projection, q, k and v are its blocks; name either",
                         text));
  TB_REQUIRE(!((targets & kLoraFc1) && (targets & (kLoraGate | kLoraUp))),
             fmt::format("LoRA targets '{}': fc1 is the whole fused gate|up projection, gate and up its blocks; name "
                         "either",
                         text));
  return targets;
}

void validate_lora(const ModelConfig& c) {
  const LoraConfig& l = c.lora;
  const std::string who = c.name.empty() ? std::string("model") : fmt::format("model '{}'", c.name);
  TB_REQUIRE(l.rank >= 0, fmt::format("{}: LoRA rank {} must be at least 1", who, l.rank));
  if (!l.enabled()) return;
  TB_REQUIRE(l.targets != 0, fmt::format("{}: LoRA names no target linear", who));
  TB_REQUIRE(std::isfinite(l.alpha) && l.alpha >= 0, fmt::format("{}: LoRA alpha {} must be > 0", who, l.alpha));
  TB_REQUIRE(l.dropout >= 0 && l.dropout < 1, fmt::format("{}: LoRA dropout {} must be in [0, 1)", who, l.dropout));
  TB_REQUIRE(!c.moe.enabled(), fmt::format("{}: LoRA on a Mixture-of-Experts model is not built (its experts' "
                                           "adapters); use a dense model",
                                           who));
  TB_REQUIRE(!c.is_mla(), fmt::format("{}: LoRA on multi-head latent attention is not built (its projections' "
                                      "adapters); use grouped-query attention",
                                      who));
  TB_REQUIRE(!(l.targets & kLoraGate) || c.act == Act::swiglu,
             fmt::format("{}: LoRA target 'gate': the {} MLP has no gate (its fc1 is up alone); target up or fc1", who,
                         act_name(c.act)));
  const std::int64_t d = c.d_model, qd = c.q_dim(), kvd = c.kv_dim(), fc1 = c.act == Act::swiglu ? 2 * c.ffn : c.ffn;
  const std::tuple<unsigned, const char*, std::int64_t, std::int64_t> blocks[] = {
      {kLoraQ, "q (attn.qkv's Q rows)", d, qd},       {kLoraK, "k (attn.qkv's K rows)", d, kvd},
      {kLoraV, "v (attn.qkv's V rows)", d, kvd},      {kLoraQkv, "qkv (attn.qkv)", d, qd + 2 * kvd},
      {kLoraO, "o (attn.out)", qd, d},                {kLoraGate, "gate (mlp.fc1's gate rows)", d, c.ffn},
      {kLoraUp, "up (mlp.fc1's up rows)", d, c.ffn},  {kLoraFc1, "fc1 (mlp.fc1)", d, fc1},
      {kLoraDown, "down (mlp.fc2)", c.ffn, d}};
  for (const auto& [bit, name, in, out] : blocks)
    TB_REQUIRE(!(l.targets & bit) || l.rank <= std::min(in, out),
               fmt::format("{}: LoRA rank {} is above min(in, out) = {} of target {} (in {}, out {}): choose a rank of "
                           "at most {}",
                           who, l.rank, std::min(in, out), name, in, out, std::min(in, out)));
}

}  // namespace tb::model
