// core/log.h: human-facing messages on stderr (results go to stdout tables and JSONL, never here).
// TRAINBENCH_LOG=debug|info|warn|error sets the level (default info).
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace tb::log {
enum class Level { debug, info, warn, error };
Level level();
void write(Level lvl, std::string_view msg);

template <class... A> void debug(fmt::format_string<A...> f, A&&... a) {
  if (level() <= Level::debug) write(Level::debug, fmt::format(f, std::forward<A>(a)...));
}
template <class... A> void info(fmt::format_string<A...> f, A&&... a) {
  if (level() <= Level::info) write(Level::info, fmt::format(f, std::forward<A>(a)...));
}
template <class... A> void warn(fmt::format_string<A...> f, A&&... a) {
  if (level() <= Level::warn) write(Level::warn, fmt::format(f, std::forward<A>(a)...));
}
template <class... A> void error(fmt::format_string<A...> f, A&&... a) {
  write(Level::error, fmt::format(f, std::forward<A>(a)...));
}
}  // namespace tb::log
