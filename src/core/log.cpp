// core/log.cpp: level from TRAINBENCH_LOG, one line per message, prefixed "trainbench:".
#include "core/log.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace tb::log {

Level level() {
  static const Level lvl = [] {
    const char* env = std::getenv("TRAINBENCH_LOG");
    std::string v = env ? env : "info";
    if (v == "debug") return Level::debug;
    if (v == "warn") return Level::warn;
    if (v == "error") return Level::error;
    return Level::info;
  }();
  return lvl;
}

void write(Level lvl, std::string_view msg) {
  static std::mutex mu;
  const char* tag = lvl == Level::warn ? "warning: " : lvl == Level::error ? "error: " : "";
  std::lock_guard lock(mu);
  std::fprintf(stderr, "trainbench: %s%.*s\n", tag, int(msg.size()), msg.data());
  std::fflush(stderr);
}

}  // namespace tb::log
