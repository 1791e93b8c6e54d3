// recipe/toml_util.h: precise errors for TOML data files: "file:line:col: message", and unknown keys
// reported with the nearest valid key (Levenshtein distance).
#pragma once

#include <toml++/toml.h>

#include <initializer_list>
#include <string>
#include <string_view>

namespace tb::recipe {

toml::table parse_toml_file(const std::string& path);  // throws Error{config} "path:line:col: what"
std::string where(const std::string& path, const toml::node& node);  // "path:line"
// Throws Error{config} "path:line: unknown key 'x' in [table] (did you mean 'y'?)" for a key not in allowed.
void reject_unknown_keys(const std::string& path, const toml::table& t, std::string_view table_name,
                         std::initializer_list<std::string_view> allowed);

}  // namespace tb::recipe
