// recipe/toml_util.h: precise errors for TOML data files: "file:line:col: message", unknown keys
// reported with the nearest valid key (Levenshtein distance), and typed getters whose errors name the
// key's line ("file:line: 'tp' must be an integer").
#pragma once

#include <toml++/toml.h>

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tb::recipe {

toml::table parse_toml_file(const std::string& path);
// The *.toml files directly in dir (not in subfolders), sorted; Error{config} when dir cannot be read.
std::vector<std::filesystem::path> toml_files(const std::filesystem::path& dir);  // throws Error{config} "path:line:col: what"
std::string where(const std::string& path, const toml::node& node);  // "path:line"
// Throws Error{config} "path:line: unknown key 'x' in [table] (did you mean 'y'?)" for a key not in allowed.
void reject_unknown_keys(const std::string& path, const toml::table& t, std::string_view table_name,
                         std::initializer_list<std::string_view> allowed);
void reject_unknown_keys(const std::string& path, const toml::table& t, std::string_view table_name,
                         std::span<const std::string_view> allowed);

// Typed values: nullopt when the key is absent; Error{config} "path:line: 'key' must be ..." when the
// value has another type. get_int also rejects fractions; get_strings takes a string or an array of them.
std::optional<std::int64_t> get_int(const std::string& path, const toml::table& t, std::string_view key);
std::optional<double> get_number(const std::string& path, const toml::table& t, std::string_view key);
std::optional<std::string> get_string(const std::string& path, const toml::table& t, std::string_view key);
std::optional<bool> get_bool(const std::string& path, const toml::table& t, std::string_view key);
std::optional<std::vector<std::string>> get_strings(const std::string& path, const toml::table& t,
                                                    std::string_view key);
// "path:line" of t[key], or of t itself when the key is absent.
std::string where_key(const std::string& path, const toml::table& t, std::string_view key);

}  // namespace tb::recipe
