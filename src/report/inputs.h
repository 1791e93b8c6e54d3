// report/inputs.h: what `trainbench report` reads: result records (trainbench.result.v1 JSONL) and the run.json
// provenance next to them. A path is a .jsonl file or a folder; a folder is searched recursively for *.jsonl files
// and run.json files (a sweep's folder holds its own results.jsonl and one folder per point).
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

namespace tb::report {

struct Inputs {
  std::vector<nlohmann::json> records;     // every record, in file order (files sorted by path)
  std::vector<nlohmann::json> provenance;  // run.json objects
  std::vector<std::string> files;          // what was read
};

// Raises Error{config} for a path that does not exist, a line that is not a result record or a run file that is not
// one (file:line: what, core/jsonl.h); an incomplete last line (a crash) is skipped with a warning.
Inputs load_inputs(const std::vector<std::filesystem::path>& paths);

// Records of one bench ("run", "train", "sweep.point", ...); prefix match when bench ends with '*'.
std::vector<const nlohmann::json*> select(const Inputs& in, std::string_view bench);

}  // namespace tb::report
