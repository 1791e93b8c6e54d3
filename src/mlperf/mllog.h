// mlperf/mllog.h: MLPerf's MLLOG lines, as mlperf_logging's mllog.py writes them and its compliance checker reads
// them (one per event, in this field order):
//   :::MLLOG {"namespace": "", "time_ms": T, "event_type": E, "key": K, "value": V, "metadata": {"file": F,
//             "lineno": L, ...}}
//   T = milliseconds since the Unix epoch (int); E = INTERVAL_START (start), INTERVAL_END (end) or POINT_IN_TIME
//   (event); F:L = where trainbench logged it (std::source_location of the caller, as mllog's get_caller()).
// Each line is written and flushed at once (a crash loses nothing already logged).
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <source_location>
#include <string>
#include <string_view>

namespace tb::mlperf {

enum class EventType { interval_start, interval_end, point_in_time };
std::string_view event_type_name(EventType t);  // "INTERVAL_START" | "INTERVAL_END" | "POINT_IN_TIME"

// One MLLOG line without its newline. metadata: extra fields after file and lineno (an object or null).
std::string mllog_line(std::int64_t time_ms, EventType type, std::string_view key, const nlohmann::json& value,
                       const nlohmann::json& metadata, std::source_location where);

class MllogWriter {
 public:
  using Clock = std::function<std::int64_t()>;  // ms since the epoch; the system clock unless given (tests)
  // Lines go to `out` (a file the caller owns; nullptr: nowhere) and, when echo is set, to stdout as well.
  explicit MllogWriter(std::FILE* out, bool echo = false, Clock clock = {});

  // Each returns the time_ms it logged.
  std::int64_t start(std::string_view key, const nlohmann::json& value = nullptr, const nlohmann::json& metadata = {},
                     std::source_location where = std::source_location::current());
  std::int64_t end(std::string_view key, const nlohmann::json& value = nullptr, const nlohmann::json& metadata = {},
                   std::source_location where = std::source_location::current());
  std::int64_t event(std::string_view key, const nlohmann::json& value = nullptr, const nlohmann::json& metadata = {},
                     std::source_location where = std::source_location::current());
  std::int64_t now() const;

 private:
  std::int64_t log(EventType type, std::string_view key, const nlohmann::json& value, const nlohmann::json& metadata,
                   std::source_location where);
  std::FILE* out_;
  bool echo_;
  Clock clock_;
};

}  // namespace tb::mlperf
