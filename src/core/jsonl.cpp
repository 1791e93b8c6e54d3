// core/jsonl.cpp: see jsonl.h.
#include "core/jsonl.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "core/record.h"

namespace tb {
namespace {

// The JSON library's message without its "[json.exception.parse_error.101] " prefix.
std::string short_what(const std::exception& e) {
  std::string w = e.what();
  if (w.starts_with("[json.exception.")) w.erase(0, w.find(']') + 1);
  while (!w.empty() && w.front() == ' ') w.erase(0, 1);
  return w;
}

}  // namespace

JsonlRead read_jsonl(const std::filesystem::path& file, bool records) {
  std::error_code ec;
  TB_REQUIRE(!std::filesystem::is_directory(file, ec),
             fmt::format("{} is a folder, not a results file", file.string()));
  std::ifstream in(file, std::ios::binary);
  TB_REQUIRE(in.good(), fmt::format("cannot read {}", file.string()));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  JsonlRead out;
  size_t at = 0;
  for (int n = 1; at < text.size(); ++n) {
    const size_t nl = text.find('\n', at);
    const bool last_open = nl == std::string::npos;  // no newline after it: perhaps cut by a crash
    const std::string_view line(text.data() + at, (last_open ? text.size() : nl) - at);
    at = last_open ? text.size() : nl + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = fmt::format("{}:{}", file.string(), n);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      if (last_open) {
        log::warn("{}: the last line is incomplete (a run stopped while writing it): skipped", where);
        out.cut = true;
        break;
      }
      raise_config(fmt::format("{}: not JSON: {}", where, short_what(e)));
    }
    TB_REQUIRE(j.is_object(), fmt::format("{}: not a JSON object (each line of a results file is one record)", where));
    if (records)
      if (const std::string problem = check_record(j); !problem.empty())
        raise_config(fmt::format("{}: not a trainbench.result.v1 record: {}", where, problem));
    out.lines.push_back({std::move(j), n});
  }
  return out;
}

nlohmann::json read_run_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  TB_REQUIRE(in.good(), fmt::format("cannot read {}", file.string()));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    raise_config(fmt::format("{}: not JSON: {}", file.string(), short_what(e)));
  }
  TB_REQUIRE(j.is_object(), fmt::format("{}: not a JSON object (a run.json holds one run's provenance)", file.string()));
  for (const char* key : {"schema", "run"})
    TB_REQUIRE(j.contains(key) && j[key].is_string(), fmt::format("{}: missing string key '{}'", file.string(), key));
  TB_REQUIRE(j["schema"] == "trainbench.run.v1",
             fmt::format("{}: schema is '{}', expected 'trainbench.run.v1'", file.string(),
                         j["schema"].get<std::string>()));
  for (const char* key : {"host", "time_utc", "os"})
    TB_REQUIRE(!j.contains(key) || j[key].is_string(), fmt::format("{}: '{}' must be a string", file.string(), key));
  if (j.contains("argv")) {
    TB_REQUIRE(j["argv"].is_array(), fmt::format("{}: 'argv' must be an array of strings", file.string()));
    for (const auto& a : j["argv"])
      TB_REQUIRE(a.is_string(), fmt::format("{}: 'argv' must be an array of strings", file.string()));
  }
  for (const char* key : {"build", "system", "versions", "env", "cpu"})
    TB_REQUIRE(!j.contains(key) || j[key].is_object() || j[key].is_array() || j[key].is_null(),
               fmt::format("{}: '{}' must be an object", file.string(), key));
  return j;
}

}  // namespace tb
