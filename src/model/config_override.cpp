// model/config_override.cpp: see config_override.h.
#include "model/config_override.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/suggest.h"

namespace tb::model {
namespace {

int positive_int(std::string_view key, std::string_view v) {
  int x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || end != v.data() + v.size() || x <= 0)
    raise_config(fmt::format("--set {}={}: {} takes a positive integer", key, v, key));
  return x;
}

// A finite number above 0 (or at least 0 with zero_ok).
double number(std::string_view key, std::string_view v, bool zero_ok) {
  const std::string s(v);
  char* end = nullptr;
  const double x = s.empty() ? -1.0 : std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(x) || x < 0 || (x == 0 && !zero_ok))
    raise_config(fmt::format("--set {}={}: {} takes a {}", key, v, key, zero_ok ? "number >= 0" : "positive number"));
  return x;
}
double positive_number(std::string_view key, std::string_view v) { return number(key, v, false); }
double non_negative(std::string_view key, std::string_view v) { return number(key, v, true); }

int non_negative_int(std::string_view key, std::string_view v) { return v == "0" ? 0 : positive_int(key, v); }

template <class E>
E one_of(std::string_view key, std::string_view v, std::initializer_list<std::pair<std::string_view, E>> choices) {
  std::string names;
  for (const auto& [name, value] : choices) {
    if (name == v) return value;
    names += (names.empty() ? "" : " | ") + std::string(name);
  }
  raise_config(fmt::format("--set {}={}: {} takes {}", key, v, key, names));
}

using Setter = void (*)(ModelConfig&, std::string_view key, std::string_view value);

template <int ModelConfig::*field>
void set_int(ModelConfig& m, std::string_view k, std::string_view v) {
  m.*field = positive_int(k, v);
}
template <double ModelConfig::*field>
void set_number(ModelConfig& m, std::string_view k, std::string_view v) {
  m.*field = positive_number(k, v);
}

const std::vector<std::pair<std::string_view, Setter>>& keys() {
  static const std::vector<std::pair<std::string_view, Setter>> all = {
      {"layers", set_int<&ModelConfig::layers>},
      {"d_model", set_int<&ModelConfig::d_model>},
      {"ffn", set_int<&ModelConfig::ffn>},
      {"heads", set_int<&ModelConfig::heads>},
      {"kv_heads", set_int<&ModelConfig::kv_heads>},
      {"head_dim", set_int<&ModelConfig::head_dim>},
      {"vocab", set_int<&ModelConfig::vocab>},
      {"seq", set_int<&ModelConfig::seq>},
      {"norm",
       [](ModelConfig& m, std::string_view k, std::string_view v) {
         m.norm = one_of<Norm>(k, v, {{"rmsnorm", Norm::rmsnorm}, {"layernorm", Norm::layernorm},
                                      {"layernorm1p", Norm::layernorm1p}});
       }},
      {"act",
       [](ModelConfig& m, std::string_view k, std::string_view v) {
         m.act = one_of<Act>(k, v, {{"swiglu", Act::swiglu}, {"gelu", Act::gelu}, {"sqrelu", Act::sqrelu}});
       }},
      {"pos",
       [](ModelConfig& m, std::string_view k, std::string_view v) {
         m.pos = one_of<Pos>(k, v, {{"rope", Pos::rope}, {"learned", Pos::learned}});
       }},
      {"tied",
       [](ModelConfig& m, std::string_view k, std::string_view v) {
         m.tied_embeddings = one_of<bool>(k, v, {{"true", true}, {"false", false}});
       }},
      {"rope_theta", set_number<&ModelConfig::rope_theta>},
      {"rope_scaling",
       [](ModelConfig& m, std::string_view k, std::string_view v) {
         m.rope_scaling.enabled = one_of<bool>(k, v, {{"on", true}, {"off", false}});
       }},
      {"norm_eps", set_number<&ModelConfig::norm_eps>},
      // Mixture of Experts (MoeConfig)
      {"experts", [](ModelConfig& m, std::string_view k, std::string_view v) { m.moe.experts = positive_int(k, v); }},
      {"top_k", [](ModelConfig& m, std::string_view k, std::string_view v) { m.moe.top_k = positive_int(k, v); }},
      {"expert_ffn",
       [](ModelConfig& m, std::string_view k, std::string_view v) { m.moe.expert_ffn = positive_int(k, v); }},
      {"shared_ffn",
       [](ModelConfig& m, std::string_view k, std::string_view v) { m.moe.shared_ffn = non_negative_int(k, v); }},
      {"dense_first",
       [](ModelConfig& m, std::string_view k, std::string_view v) { m.moe.dense_first = non_negative_int(k, v); }},
      {"moe_every", [](ModelConfig& m, std::string_view k, std::string_view v) { m.moe.every = positive_int(k, v); }},
      {"routing",
       [](ModelConfig& m, std::string_view k, std::string_view v) {
         m.moe.routing = one_of<Routing>(k, v, {{"learned", Routing::learned}, {"balanced", Routing::balanced}});
       }},
      {"router_score",
       [](ModelConfig& m, std::string_view k, std::string_view v) {
         m.moe.score =
             one_of<RouterScore>(k, v, {{"softmax", RouterScore::softmax}, {"sigmoid", RouterScore::sigmoid}});
       }},
      {"router_normalize",
       [](ModelConfig& m, std::string_view k, std::string_view v) {
         m.moe.normalize = one_of<bool>(k, v, {{"true", true}, {"false", false}});
       }},
      {"routed_scale",
       [](ModelConfig& m, std::string_view k, std::string_view v) { m.moe.scale = positive_number(k, v); }},
      {"aux_loss", [](ModelConfig& m, std::string_view k, std::string_view v) { m.moe.aux_loss = non_negative(k, v); }},
      {"seq_aux_loss",
       [](ModelConfig& m, std::string_view k, std::string_view v) { m.moe.seq_aux_loss = non_negative(k, v); }},
      {"z_loss", [](ModelConfig& m, std::string_view k, std::string_view v) { m.moe.z_loss = non_negative(k, v); }},
      {"bias_update_rate",
       [](ModelConfig& m, std::string_view k, std::string_view v) { m.moe.bias_update_rate = non_negative(k, v); }},
      {"capacity_factor",
       [](ModelConfig& m, std::string_view k, std::string_view v) { m.moe.capacity_factor = non_negative(k, v); }},
      {"pad_to_capacity",
       [](ModelConfig& m, std::string_view k, std::string_view v) {
         m.moe.pad_to_capacity = one_of<bool>(k, v, {{"true", true}, {"false", false}});
       }},
      // Multi-head latent attention (MlaConfig)
      {"attention",
       [](ModelConfig& m, std::string_view k, std::string_view v) {
         m.attention = one_of<AttentionKind>(k, v, {{"gqa", AttentionKind::gqa}, {"mla", AttentionKind::mla}});
       }},
      {"q_lora_rank",
       [](ModelConfig& m, std::string_view k, std::string_view v) { m.mla.q_lora_rank = non_negative_int(k, v); }},
      {"kv_lora_rank",
       [](ModelConfig& m, std::string_view k, std::string_view v) { m.mla.kv_lora_rank = positive_int(k, v); }},
      {"qk_nope_head_dim",
       [](ModelConfig& m, std::string_view k, std::string_view v) { m.mla.qk_nope_head_dim = positive_int(k, v); }},
      {"qk_rope_head_dim",
       [](ModelConfig& m, std::string_view k, std::string_view v) { m.mla.qk_rope_head_dim = positive_int(k, v); }},
      {"v_head_dim",
       [](ModelConfig& m, std::string_view k, std::string_view v) { m.mla.v_head_dim = positive_int(k, v); }},
  };
  return all;
}

}  // namespace

ModelConfig with_overrides(const ModelConfig& base, std::span<const std::string> key_values) {
  ModelConfig m = base;
  std::string applied;
  for (const std::string& kv : key_values) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      raise_config(fmt::format("--set {}: expected key=value, e.g. --set d_model=2048", kv));
    const std::string_view key = std::string_view(kv).substr(0, eq), value = std::string_view(kv).substr(eq + 1);
    const auto found = std::find_if(keys().begin(), keys().end(), [&](const auto& k) { return k.first == key; });
    if (found == keys().end()) {
      std::vector<std::string> names;
      for (const auto& k : keys()) names.emplace_back(k.first);
      raise_config(fmt::format("--set {}: unknown key '{}'{}; keys: {}", kv, key, did_you_mean(key, names),
                               fmt::join(names, ", ")));
    }
    found->second(m, key, value);
    applied += (applied.empty() ? "" : ",") + kv;
  }
  if (!applied.empty()) m.name = fmt::format("{}[{}]", base.name, applied);
  return m;
}

}  // namespace tb::model
