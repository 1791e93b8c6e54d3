// model/config_override.cpp: see config_override.h.
#include "model/config_override.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>
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

double positive_number(std::string_view key, std::string_view v) {
  const std::string s(v);
  char* end = nullptr;
  const double x = s.empty() ? 0.0 : std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(x) || x <= 0)
    raise_config(fmt::format("--set {}={}: {} takes a positive number", key, v, key));
  return x;
}

template <class E>
E one_of(std::string_view key, std::string_view v, std::initializer_list<std::pair<std::string_view, E>> choices) {
  std::string names;
  for (const auto& [name, value] : choices) {
    if (name == v) return value;
    names += (names.empty() ? "" : " | ") + std::string(name);
  }
  raise_config(fmt::format("--set {}={}: {} takes {}", key, v, key, names));
}

struct Key {
  std::string_view name;
  std::function<void(ModelConfig&, std::string_view)> set;
};

const std::vector<Key>& keys() {
  static const std::vector<Key> all = {
      {"layers", [](ModelConfig& m, std::string_view v) { m.layers = positive_int("layers", v); }},
      {"d_model", [](ModelConfig& m, std::string_view v) { m.d_model = positive_int("d_model", v); }},
      {"ffn", [](ModelConfig& m, std::string_view v) { m.ffn = positive_int("ffn", v); }},
      {"heads", [](ModelConfig& m, std::string_view v) { m.heads = positive_int("heads", v); }},
      {"kv_heads", [](ModelConfig& m, std::string_view v) { m.kv_heads = positive_int("kv_heads", v); }},
      {"head_dim", [](ModelConfig& m, std::string_view v) { m.head_dim = positive_int("head_dim", v); }},
      {"vocab", [](ModelConfig& m, std::string_view v) { m.vocab = positive_int("vocab", v); }},
      {"seq", [](ModelConfig& m, std::string_view v) { m.seq = positive_int("seq", v); }},
      {"norm",
       [](ModelConfig& m, std::string_view v) {
         m.norm = one_of<Norm>("norm", v, {{"rmsnorm", Norm::rmsnorm}, {"layernorm", Norm::layernorm},
                                           {"layernorm1p", Norm::layernorm1p}});
       }},
      {"act",
       [](ModelConfig& m, std::string_view v) {
         m.act = one_of<Act>("act", v, {{"swiglu", Act::swiglu}, {"gelu", Act::gelu}, {"sqrelu", Act::sqrelu}});
       }},
      {"pos",
       [](ModelConfig& m, std::string_view v) {
         m.pos = one_of<Pos>("pos", v, {{"rope", Pos::rope}, {"learned", Pos::learned}});
       }},
      {"tied",
       [](ModelConfig& m, std::string_view v) {
         m.tied_embeddings = one_of<bool>("tied", v, {{"true", true}, {"false", false}});
       }},
      {"rope_theta", [](ModelConfig& m, std::string_view v) { m.rope_theta = positive_number("rope_theta", v); }},
      {"rope_scaling",
       [](ModelConfig& m, std::string_view v) {
         m.rope_scaling.enabled = one_of<bool>("rope_scaling", v, {{"on", true}, {"off", false}});
       }},
      {"norm_eps", [](ModelConfig& m, std::string_view v) { m.norm_eps = positive_number("norm_eps", v); }},
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
    const Key* found = nullptr;
    std::vector<std::string> names;
    for (const Key& k : keys()) {
      if (k.name == key) found = &k;
      names.emplace_back(k.name);
    }
    if (!found) {
      std::string list;
      for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
      raise_config(fmt::format("--set {}: unknown key '{}'{}; keys: {}", kv, key, did_you_mean(key, names), list));
    }
    found->set(m, value);
    applied += (applied.empty() ? "" : ",") + kv;
  }
  if (!applied.empty()) m.name = fmt::format("{}[{}]", base.name, applied);
  return m;
}

}  // namespace tb::model
