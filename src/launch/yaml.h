// launch/yaml.h: block-style YAML from a JSON tree (nlohmann::ordered_json keeps the key order). Strings are
// plain where YAML reads them back as the same string, else double-quoted with JSON escapes (valid YAML).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace tb::launch {

std::string to_yaml(const nlohmann::ordered_json& doc);

}  // namespace tb::launch
