// recipe/toml_util.cpp: toml++ parse errors and unknown keys as "file:line:col: message".
#include "recipe/toml_util.h"

#include <fmt/format.h>

#include <vector>

#include "core/error.h"
#include "core/suggest.h"

namespace tb::recipe {

toml::table parse_toml_file(const std::string& path) {
  try {
    return toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    raise_config(fmt::format("{}:{}:{}: {}", path, b.line, b.column, e.description()));
  }
}

std::string where(const std::string& path, const toml::node& node) {
  return fmt::format("{}:{}", path, node.source().begin.line);
}

void reject_unknown_keys(const std::string& path, const toml::table& t, std::string_view table_name,
                         std::initializer_list<std::string_view> allowed) {
  const std::vector<std::string> names(allowed.begin(), allowed.end());
  for (const auto& [key, node] : t) {
    const std::string k(key.str());
    bool known = false;
    for (const auto& a : names) known = known || a == k;
    if (!known)
      raise_config(fmt::format("{}: unknown key '{}' in {}{}", where(path, node), k, table_name, did_you_mean(k, names)));
  }
}

}  // namespace tb::recipe
