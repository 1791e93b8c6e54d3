// launch/yaml.cpp: the emitter (mappings, sequences, scalars; empty containers as {} and []).
#include "launch/yaml.h"

#include <algorithm>
#include <array>
#include <string_view>

namespace tb::launch {
namespace {

bool needs_quotes(std::string_view s) {
  if (s.empty()) return true;
  // Words YAML 1.1 or 1.2 would read as booleans or null.
  constexpr std::array<std::string_view, 22> special = {"true", "false", "yes",  "no",    "on",    "off", "y",  "n",
                                                        "null", "~",     "True", "False", "Yes",   "No",  "On", "Off",
                                                        "Y",    "N",     "Null", "TRUE",  "FALSE", "NULL"};
  for (auto w : special)
    if (s == w) return true;
  // Anything that starts like a number (or a sign, dot) is quoted rather than second-guessed.
  const char c0 = s.front();
  if ((c0 >= '0' && c0 <= '9') || c0 == '-' || c0 == '+' || c0 == '.') return true;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || c == '.' || c == '/';
    if (!ok) return true;
  }
  return false;
}

std::string scalar(const nlohmann::ordered_json& v) {
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    return needs_quotes(s) ? v.dump() : s;
  }
  if (v.is_null()) return "null";
  return v.dump();  // numbers and booleans
}

bool is_block(const nlohmann::ordered_json& v) { return (v.is_object() || v.is_array()) && !v.empty(); }

// A multi-line string as a literal block ("|" keeps the final newline, "|-" strips it), where that reads back
// the same: no tabs or carriage returns, no leading space on the first line, no blank-only lines at the end.
bool literal_block(const nlohmann::ordered_json& v) {
  if (!v.is_string()) return false;
  const auto& s = v.get_ref<const std::string&>();
  if (s.find('\n') == std::string::npos || s.find_first_of("\t\r") != std::string::npos) return false;
  if (s.front() == ' ' || s.front() == '\n') return false;
  const auto body = s.substr(0, s.find_last_not_of('\n') + 1);
  return s.size() - body.size() <= 1 && body.back() != ' ';
}

std::string emit_literal(const std::string& s, int indent) {
  std::string out = s.back() == '\n' ? "|\n" : "|-\n";
  size_t at = 0;
  while (at < s.size()) {
    const auto nl = std::min(s.find('\n', at), s.size());
    const std::string line = s.substr(at, nl - at);
    out += (line.empty() ? std::string() : std::string(indent, ' ') + line) + "\n";
    at = nl + 1;
  }
  return out;
}

void emit(const nlohmann::ordered_json& v, int indent, std::string& out);

void emit_map(const nlohmann::ordered_json& v, int indent, std::string& out, bool first_inline) {
  bool first = true;
  for (const auto& [k, x] : v.items()) {
    if (!(first && first_inline)) out += std::string(indent, ' ');
    first = false;
    out += scalar(nlohmann::ordered_json(k)) + ":";
    if (literal_block(x)) {
      out += ' ';
      out += emit_literal(x.get_ref<const std::string&>(), indent + 2);
    } else if (is_block(x)) {
      out += "\n";
      emit(x, x.is_array() ? indent : indent + 2, out);
    } else {
      out += ' ';
      out += x.is_object() ? std::string("{}") : x.is_array() ? std::string("[]") : scalar(x);
      out += '\n';
    }
  }
}

void emit(const nlohmann::ordered_json& v, int indent, std::string& out) {
  if (v.is_object()) {
    emit_map(v, indent, out, false);
  } else if (v.is_array()) {
    for (const auto& x : v) {
      out += std::string(indent, ' ') + "- ";
      if (literal_block(x)) {
        out += emit_literal(x.get_ref<const std::string&>(), indent + 2);
      } else if (x.is_object() && !x.empty()) {
        emit_map(x, indent + 2, out, true);
      } else if (x.is_array() && !x.empty()) {
        out += "\n";
        emit(x, indent + 2, out);
      } else {
        out += (x.is_object() ? std::string("{}") : x.is_array() ? std::string("[]") : scalar(x)) + "\n";
      }
    }
  } else {
    out += std::string(indent, ' ') + scalar(v) + "\n";
  }
}

}  // namespace

std::string to_yaml(const nlohmann::ordered_json& doc) {
  std::string out;
  emit(doc, 0, out);
  return out;
}

}  // namespace tb::launch
