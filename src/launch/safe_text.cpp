// launch/safe_text.cpp: see safe_text.h.
#include "launch/safe_text.h"

#include <fmt/format.h>

#include "core/error.h"

namespace tb::launch {
namespace {

bool control(unsigned char c) { return c < 0x20 || c == 0x7f; }

std::string char_name(unsigned char c) {
  switch (c) {
    case '\n': return "a newline";
    case '\r': return "a carriage return";
    case '\t': return "a tab";
    case '\0': return "a NUL byte";
    case 0x1b: return "an escape character";
    default: return fmt::format("the control character 0x{:02x}", c);
  }
}

bool lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

}  // namespace

std::string control_char_problem(std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i)
    if (control(static_cast<unsigned char>(text[i])))
      return fmt::format("{} at byte {}", char_name(static_cast<unsigned char>(text[i])), i);
  return {};
}

std::string printable(std::string_view text) {
  std::string s;
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n') s += "\\n";
    else if (c == '\r') s += "\\r";
    else if (c == '\t') s += "\\t";
    else if (control(c)) s += fmt::format("\\x{:02x}", c);
    else s += ch;
  }
  return s;
}

void require_printable(std::string_view what, std::string_view text) {
  const std::string problem = control_char_problem(text);
  if (!problem.empty())
    raise_config(fmt::format("{} '{}' holds {}: values written into scripts and manifests may not hold control "
                             "characters",
                             what, printable(text), problem));
}

bool dns1123_label(std::string_view s, size_t max_len) {
  if (s.empty() || s.size() > max_len || !lower_alnum(s.front()) || !lower_alnum(s.back())) return false;
  for (char c : s)
    if (!lower_alnum(c) && c != '-') return false;
  return true;
}

bool dns1123_subdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  while (true) {
    const auto dot = s.find('.');
    if (!dns1123_label(s.substr(0, dot))) return false;
    if (dot == std::string_view::npos) return true;
    s.remove_prefix(dot + 1);
  }
}

bool env_name(std::string_view s) {
  if (s.empty() || (s.front() >= '0' && s.front() <= '9')) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

}  // namespace tb::launch
