// core/jsonl.h: the one way result files are read back (report, compare, project --from, sweep resume, collect).
// A JSON Lines file whose last line has no newline and is not JSON was cut by a crash: that line is skipped with a
// warning and everything before it is read. Any other line that is not JSON, not an object or (records) not a
// trainbench.result.v1 record raises Error{config} "<file>:<line>: <what>", so a wrong file is one message and
// exit 2, never an exception from the JSON library.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace tb {

struct JsonlLine {
  nlohmann::json value;
  int line = 0;  // 1-based
};

struct JsonlRead {
  std::vector<JsonlLine> lines;
  bool cut = false;  // the last line was incomplete and skipped
};

// records: each line checked with check_record.
JsonlRead read_jsonl(const std::filesystem::path& file, bool records = true);

// A run.json (trainbench.run.v1): an object with string schema, run and host, an argv of strings; the fields the
// report shows have their types. Raises Error{config} "<file>: <what>".
nlohmann::json read_run_file(const std::filesystem::path& file);

}  // namespace tb
