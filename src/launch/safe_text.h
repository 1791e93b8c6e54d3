// launch/safe_text.h: the checks on every value trainbench writes into a generated batch script, manifest or their
// comments. A value may not end a line, a comment or a document early: no control characters at all (newline,
// carriage return, tab, NUL, escape, DEL, ...), names in the shapes their readers require (Kubernetes DNS-1123,
// shell and container environment variable names), #SBATCH directives one option each.
#pragma once

#include <string>
#include <string_view>

namespace tb::launch {

// "" when text holds no control character (bytes 0x00-0x1f and 0x7f); else e.g. "a newline at byte 5".
std::string control_char_problem(std::string_view text);
// The text with control characters written as \n, \t, \xNN: for messages.
std::string printable(std::string_view text);
// Raises Error{config} "<what> 'a\nb' holds a newline at byte 1: ..." when text has a control character.
void require_printable(std::string_view what, std::string_view text);

// Kubernetes names: an RFC 1123 label (lowercase letters, digits, '-', alphanumeric at both ends, at most max_len)
// and a DNS subdomain (labels joined by '.', at most 253 characters).
bool dns1123_label(std::string_view s, size_t max_len = 63);
bool dns1123_subdomain(std::string_view s);
// An environment variable name that bash can export: [A-Za-z_][A-Za-z0-9_]*.
bool env_name(std::string_view s);

}  // namespace tb::launch
