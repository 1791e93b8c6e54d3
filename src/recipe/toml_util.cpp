// recipe/toml_util.cpp: toml++ parse errors and unknown keys as "file:line:col: message"; typed getters.
#include "recipe/toml_util.h"

#include <algorithm>

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
                         std::span<const std::string_view> allowed) {
  const std::vector<std::string> names(allowed.begin(), allowed.end());
  for (const auto& [key, node] : t) {
    const std::string k(key.str());
    bool known = false;
    for (const auto& a : names) known = known || a == k;
    if (!known)
      raise_config(fmt::format("{}: unknown key '{}' in {}{}", where(path, node), k, table_name, did_you_mean(k, names)));
  }
}

void reject_unknown_keys(const std::string& path, const toml::table& t, std::string_view table_name,
                         std::initializer_list<std::string_view> allowed) {
  reject_unknown_keys(path, t, table_name, std::span<const std::string_view>(allowed.begin(), allowed.size()));
}

std::optional<std::int64_t> get_int(const std::string& path, const toml::table& t, std::string_view key) {
  const toml::node* n = t.get(key);
  if (!n) return std::nullopt;
  TB_REQUIRE(n->is_integer(), fmt::format("{}: '{}' must be an integer", where(path, *n), key));
  return n->value<std::int64_t>();
}

std::optional<double> get_number(const std::string& path, const toml::table& t, std::string_view key) {
  const toml::node* n = t.get(key);
  if (!n) return std::nullopt;
  TB_REQUIRE(n->is_number(), fmt::format("{}: '{}' must be a number", where(path, *n), key));
  return n->value<double>();
}

std::optional<std::string> get_string(const std::string& path, const toml::table& t, std::string_view key) {
  const toml::node* n = t.get(key);
  if (!n) return std::nullopt;
  TB_REQUIRE(n->is_string(), fmt::format("{}: '{}' must be a string", where(path, *n), key));
  return n->value<std::string>();
}

std::optional<bool> get_bool(const std::string& path, const toml::table& t, std::string_view key) {
  const toml::node* n = t.get(key);
  if (!n) return std::nullopt;
  TB_REQUIRE(n->is_boolean(), fmt::format("{}: '{}' must be true or false", where(path, *n), key));
  return n->value<bool>();
}

std::optional<std::vector<std::string>> get_strings(const std::string& path, const toml::table& t,
                                                    std::string_view key) {
  const toml::node* n = t.get(key);
  if (!n) return std::nullopt;
  if (n->is_string()) return std::vector<std::string>{*n->value<std::string>()};
  const auto* arr = n->as_array();
  TB_REQUIRE(arr, fmt::format("{}: '{}' must be a string or a list of strings", where(path, *n), key));
  std::vector<std::string> out;
  for (const auto& e : *arr) {
    TB_REQUIRE(e.is_string(), fmt::format("{}: '{}' must be a list of strings", where(path, e), key));
    out.push_back(*e.value<std::string>());
  }
  return out;
}

std::string where_key(const std::string& path, const toml::table& t, std::string_view key) {
  const toml::node* n = t.get(key);
  return where(path, n ? *n : static_cast<const toml::node&>(t));
}

std::vector<std::filesystem::path> toml_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() != ".toml") continue;
    std::error_code file_ec;  // a symlink loop or a dangling link: one message naming it
    const bool regular = e.is_regular_file(file_ec);
    TB_REQUIRE(!file_ec, fmt::format("cannot read {}: {}", e.path().string(), file_ec.message()));
    if (regular) files.push_back(e.path());
  }
  TB_REQUIRE(!ec, fmt::format("cannot read {}: {}", dir.string(), ec.message()));
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace tb::recipe
