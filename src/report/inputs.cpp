// report/inputs.cpp: reading result folders and files (inputs.h).
#include "report/inputs.h"

#include <fmt/format.h>

#include <fstream>

#include "core/error.h"
#include "core/record.h"

namespace tb::report {
namespace fs = std::filesystem;
namespace {

void read_jsonl(const fs::path& file, Inputs& in) {
  std::ifstream f(file);
  TB_REQUIRE(f.good(), fmt::format("cannot read {}", file.string()));
  std::string line;
  for (int n = 1; std::getline(f, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      in.records.push_back(nlohmann::json::parse(line));
    } catch (const std::exception& e) {
      raise_config(fmt::format("{}:{}: not JSON: {}", file.string(), n, e.what()));
    }
  }
  in.files.push_back(file.string());
}

void read_run_json(const fs::path& file, Inputs& in) {
  std::ifstream f(file);
  try {
    in.provenance.push_back(nlohmann::json::parse(f));
    in.files.push_back(file.string());
  } catch (const std::exception& e) {
    raise_config(fmt::format("{}: not JSON: {}", file.string(), e.what()));
  }
}

}  // namespace

Inputs load_inputs(const std::vector<fs::path>& paths) {
  Inputs in;
  for (const auto& p : paths) {
    TB_REQUIRE(fs::exists(p), fmt::format("{} does not exist (give results folders or .jsonl files)", p.string()));
    if (!fs::is_directory(p)) {
      read_jsonl(p, in);
      continue;
    }
    for (const auto& f : result_files_below(p, /*run_json=*/true)) f.extension() == ".jsonl" ? read_jsonl(f, in) : read_run_json(f, in);
  }
  return in;
}

std::vector<const nlohmann::json*> select(const Inputs& in, std::string_view bench) {
  const bool prefix = !bench.empty() && bench.back() == '*';
  const std::string_view want = prefix ? bench.substr(0, bench.size() - 1) : bench;
  std::vector<const nlohmann::json*> out;
  for (const auto& r : in.records) {
    if (!r.is_object()) continue;
    const std::string b = r.value("bench", "");
    if (prefix ? b.starts_with(want) : b == want) out.push_back(&r);
  }
  return out;
}

}  // namespace tb::report
