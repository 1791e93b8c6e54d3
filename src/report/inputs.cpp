// report/inputs.cpp: reading result folders and files (inputs.h).
#include "report/inputs.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/jsonl.h"
#include "core/record.h"

namespace tb::report {
namespace fs = std::filesystem;
namespace {

void read_jsonl(const fs::path& file, Inputs& in) {
  for (auto& l : tb::read_jsonl(file).lines) in.records.push_back(std::move(l.value));
  in.files.push_back(file.string());
}

void read_run_json(const fs::path& file, Inputs& in) {
  in.provenance.push_back(read_run_file(file));
  in.files.push_back(file.string());
}

}  // namespace

Inputs load_inputs(const std::vector<fs::path>& paths) {
  Inputs in;
  for (const auto& p : paths) {
    TB_REQUIRE(fs::exists(p), fmt::format("{} does not exist (give results folders or .jsonl files)", p.string()));
    if (!fs::is_directory(p)) {
      TB_REQUIRE(p.extension() != ".json" || !p.filename().string().starts_with("run"),
                 fmt::format("{} is a run file; give its folder or its results.jsonl", p.string()));
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
