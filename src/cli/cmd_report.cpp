// cli/cmd_report.cpp: `trainbench report RESULTS... [--format html|md|csv] [-o FILE] [--table ID]`: the records of
// the given results folders / JSONL files as one self-contained HTML page with charts, or Markdown, or CSV
// (report/render.h). CSV is one file per table: -o report.csv writes report.<table id>.csv for each table and
// report.csv as their index; with --table ID (or one table) -o names that table's file, '-' is stdout.
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/build_info.h"
#include "core/error.h"
#include "core/log.h"
#include "core/output_path.h"
#include "recipe/reference.h"
#include "report/charts.h"
#include "report/exec.h"
#include "report/inputs.h"
#include "report/render.h"
#include "report/tables.h"

namespace tb::cli {
namespace {

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  f.close();
  if (!f) raise_error(Error::Kind::io, fmt::format("cannot write {}", path.string()));
}

}  // namespace

int cmd_report(int argc, char** argv) {
  CLI::App app{"render results as one self-contained HTML page (charts, tables), Markdown or CSV", "trainbench report"};
  std::vector<std::filesystem::path> inputs;
  std::string format, title = "trainbench report", gnuplot = "gnuplot";
  std::optional<std::filesystem::path> output, references, charts_dir;
  bool no_charts = false;
  std::string table_id;
  app.add_option("results", inputs, "results folders (searched recursively) or .jsonl files")->required();
  app.add_option("--format", format, "html | md | csv (default: from -o's extension, else html)")
      ->check(CLI::IsMember({"html", "md", "csv"}));
  app.add_option("-o,--output", output, "the file to write (default: report.<format>; '-' for stdout)");
  app.add_option("--title", title, "the page's title")->capture_default_str();
  app.add_option("--references", references, "references folder for the comparison (default: next to the binary)");
  app.add_option("--charts-dir", charts_dir, "keep the charts' data, gnuplot scripts and PNGs here");
  app.add_option("--gnuplot", gnuplot, "the gnuplot program")->capture_default_str();
  app.add_flag("--no-charts", no_charts, "HTML without charts (no gnuplot needed)");
  app.add_option(
      "--table", table_id,
      "csv: only this table (provenance, comparison, train, sweep, scaling, stragglers, check, collectives)");
  if (auto rc = parse(app, argc, argv)) return *rc;

  if (format.empty()) {
    const std::string ext = output ? output->extension().string() : "";
    format = ext == ".md" ? "md" : ext == ".csv" ? "csv" : "html";
  }
  if (!output) output = "report." + format;
  if (*output != "-") require_output_file(*output, "-o");  // before reading anything
  const report::Inputs in = report::load_inputs(inputs);
  if (in.records.empty()) {
    std::fprintf(stderr, "trainbench report: no records in the given results\n");
    return kUsage;
  }
  std::vector<recipe::ReferenceRow> refs;
  try {
    refs = recipe::load_reference_dir(recipe::find_references_dir(references));
  } catch (const Error& e) {
    log::warn("no references ({}): the comparison uses each record's own", e.what());
  }
  auto tables = report::build_tables(in, refs);
  if (!table_id.empty()) {
    std::vector<std::string> ids;
    for (const auto& t : tables) ids.push_back(t.id);
    const auto it = std::find(ids.begin(), ids.end(), table_id);
    if (it == ids.end()) {
      std::fprintf(stderr, "trainbench report: --table %s: the results have no such table; they have: %s\n",
                   table_id.c_str(), fmt::format("{}", fmt::join(ids, ", ")).c_str());
      return kUsage;
    }
    tables = {tables[std::size_t(it - ids.begin())]};
  }
  report::ReportMeta meta;
  meta.title = title;
  meta.inputs = in.files;
  meta.generated = fmt::format("trainbench {} ({}), generated {:%Y-%m-%d %H:%M:%S} UTC from {} records", build_info().version,
                               build_info().git_describe, std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::now()),
                               in.records.size());
  std::string text;
  if (format == "html") {
    std::vector<report::Chart> charts;
    if (no_charts) {
      meta.charts_note = "charts left out (--no-charts)";
    } else if (report::find_program(gnuplot).empty()) {
      meta.charts_note = "no charts: gnuplot is not installed (scripts/setup.sh installs gnuplot-nox)";
      log::warn("{}", meta.charts_note);
    } else {
      const bool keep = charts_dir.has_value();
      const auto dir = keep ? *charts_dir
                            : std::filesystem::temp_directory_path() / fmt::format("tb-report-{}", ::getpid());
      charts = report::build_charts(in, {dir, gnuplot});
      if (!keep) std::filesystem::remove_all(dir);
    }
    text = report::render_html(tables, charts, meta);
    std::printf("report: %zu tables, %zu charts\n", tables.size(), charts.size());
  } else if (format == "md") {
    text = report::render_markdown(tables, meta);
  } else if (tables.size() == 1) {
    text = report::render_csv(tables.front());
  } else if (*output == "-") {
    std::vector<std::string> ids;
    for (const auto& t : tables) ids.push_back(t.id);
    std::fprintf(stderr,
                 "trainbench report: CSV is one file per table and the results have %zu (%s): choose one with "
                 "--table ID, or give -o FILE.csv for FILE.<table>.csv each\n",
                 tables.size(), fmt::format("{}", fmt::join(ids, ", ")).c_str());
    return kUsage;
  } else {  // one file per table beside the index
    const std::filesystem::path dir = output->parent_path();
    std::vector<std::string> files;
    if (!dir.empty()) std::filesystem::create_directories(dir);
    for (const auto& t : tables) {
      const std::filesystem::path f = dir / (output->stem().string() + "." + t.id + ".csv");
      write_text(f, report::render_csv(t));
      files.push_back(f.filename().string());
    }
    text = report::render_csv_index(tables, files);
    std::printf("report: %zu CSV tables (%s.<table>.csv), index %s\n", tables.size(), (dir / output->stem()).c_str(),
                output->c_str());
  }
  if (*output == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return kOk;
  }
  if (output->has_parent_path()) std::filesystem::create_directories(output->parent_path());
  write_text(*output, text);
  if (format == "html") std::printf("report: %s (self-contained; open it in any browser)\n", output->c_str());
  return kOk;
}

}  // namespace tb::cli
