// mlperf/mllog.cpp: MLLOG lines with nlohmann's ordered_json, so the fields keep mllog.py's order.
#include "mlperf/mllog.h"

#include <chrono>
#include <filesystem>

#include "core/error.h"

namespace tb::mlperf {

std::string_view event_type_name(EventType t) {
  switch (t) {
    case EventType::interval_start: return "INTERVAL_START";
    case EventType::interval_end: return "INTERVAL_END";
    case EventType::point_in_time: return "POINT_IN_TIME";
  }
  return "POINT_IN_TIME";
}

std::string mllog_line(std::int64_t time_ms, EventType type, std::string_view key, const nlohmann::json& value,
                       const nlohmann::json& metadata, std::source_location where) {
  nlohmann::ordered_json meta;
  // The source file as a path below src/ (the build's absolute path says nothing to a reader of the log).
  std::string file = where.file_name();
  if (const auto at = file.rfind("/src/"); at != std::string::npos) file = file.substr(at + 1);
  meta["file"] = file;
  meta["lineno"] = where.line();
  if (metadata.is_object())
    for (const auto& [k, v] : metadata.items()) meta[k] = v;
  nlohmann::ordered_json j;
  j["namespace"] = "";
  j["time_ms"] = time_ms;
  j["event_type"] = event_type_name(type);
  j["key"] = key;
  j["value"] = value;
  j["metadata"] = meta;
  // mllog.py's json.dumps separators: ", " and ": "
  std::string body;
  const std::string compact = j.dump();
  body.reserve(compact.size() + 32);
  bool in_string = false, escaped = false;
  for (char c : compact) {
    body += c;
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == ',' || c == ':') {
      body += ' ';
    }
  }
  return ":::MLLOG " + body;
}

MllogWriter::MllogWriter(std::FILE* out, bool echo, Clock clock)
    : out_(out), echo_(echo), clock_(std::move(clock)) {}

std::int64_t MllogWriter::now() const {
  if (clock_) return clock_();
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::int64_t MllogWriter::log(EventType type, std::string_view key, const nlohmann::json& value,
                              const nlohmann::json& metadata, std::source_location where) {
  const std::int64_t t = now();
  const std::string line = mllog_line(t, type, key, value, metadata, where) + "\n";
  if (out_) {
    if (std::fputs(line.c_str(), out_) < 0 || std::fflush(out_) != 0)
      raise_error(Error::Kind::io, "MLLOG: writing the log failed (disk full?)");
  }
  if (echo_) std::fputs(line.c_str(), stdout), std::fflush(stdout);
  return t;
}

std::int64_t MllogWriter::start(std::string_view key, const nlohmann::json& value, const nlohmann::json& metadata,
                                std::source_location where) {
  return log(EventType::interval_start, key, value, metadata, where);
}
std::int64_t MllogWriter::end(std::string_view key, const nlohmann::json& value, const nlohmann::json& metadata,
                              std::source_location where) {
  return log(EventType::interval_end, key, value, metadata, where);
}
std::int64_t MllogWriter::event(std::string_view key, const nlohmann::json& value, const nlohmann::json& metadata,
                                std::source_location where) {
  return log(EventType::point_in_time, key, value, metadata, where);
}

}  // namespace tb::mlperf
