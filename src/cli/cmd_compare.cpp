// cli/cmd_compare.cpp: `trainbench compare RESULTS...`: every "run" record of the given results (.jsonl files, or
// folders searched recursively as `report` does) against the published references (report/compare.h); exit 1 when
// any is below.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/jsonl.h"
#include "core/record.h"
#include "recipe/reference.h"
#include "recipe/system.h"
#include "report/compare.h"

namespace tb::cli {
namespace {

void read_runs_of(const std::filesystem::path& file, std::vector<nlohmann::json>& out) {
  TB_REQUIRE(std::filesystem::exists(file),
             fmt::format("cannot read {} (give results.jsonl files or the folders holding them)", file.string()));
  for (auto& l : read_jsonl(file).lines)
    if (l.value.value("bench", "") == "run" && l.value.value("status", "") == "ok") {
      for (const char* key : {"measured", "extrapolated"})
        TB_REQUIRE(!l.value.contains(key) || l.value[key].is_object(),
                   fmt::format("{}:{}: '{}' must be an object", file.string(), l.line, key));
      out.push_back(std::move(l.value));
    }
}

// A file as given; a folder: every .jsonl below it (a sweep's or a Slurm collection's subfolders too).
std::vector<nlohmann::json> read_runs(const std::filesystem::path& p) {
  std::vector<nlohmann::json> out;
  if (!std::filesystem::is_directory(p)) {
    read_runs_of(p, out);
    return out;
  }
  const auto files = result_files_below(p);
  TB_REQUIRE(!files.empty(), fmt::format("no .jsonl results below {}", p.string()));
  for (const auto& f : files) read_runs_of(f, out);
  return out;
}

}  // namespace

int cmd_compare(int argc, char** argv) {
  CLI::App app{"compare run results with the published references (exit 1 when any is below)", "trainbench compare"};
  std::vector<std::filesystem::path> inputs;
  std::optional<std::filesystem::path> references;
  std::string ref_gpu;
  app.add_option("results", inputs, "results folders (searched recursively) or .jsonl files")->required();
  app.add_option("--references", references, "references folder (default: next to the binary)");
  app.add_option("--reference-gpu", ref_gpu, "GPU model of the reference (default: H100; CPU for CPU runs)");
  if (auto rc = parse(app, argc, argv)) return *rc;
  const auto rows = recipe::load_reference_dir(recipe::find_references_dir(references));
  std::vector<report::Comparison> cs;
  for (const auto& in : inputs)
    for (const auto& j : read_runs(in)) {
      const std::string gpu = !ref_gpu.empty() ? ref_gpu : j.value("backend", "cuda") == "cpu" ? "CPU" : "H100";
      cs.push_back(report::compare_run(j, rows, gpu));
    }
  if (cs.empty()) {
    std::fprintf(stderr, "trainbench compare: no finished `run` records in the given results\n");
    return kUsage;
  }
  std::printf("%s", report::render_comparisons(cs).c_str());
  bool below = false;
  for (const auto& c : cs) below = below || c.verdict == report::RefVerdict::below;
  return below ? kFailed : kOk;
}

}  // namespace tb::cli
