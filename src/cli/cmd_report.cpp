// cli/cmd_report.cpp: `trainbench report RESULTS... [--format html|md|csv] [-o FILE]`: the records of the given
// results folders / JSONL files as one self-contained HTML page with charts, or Markdown, or CSV (report/render.h).
#include <fmt/chrono.h>
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <fstream>

#include <unistd.h>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/build_info.h"
#include "core/error.h"
#include "core/output_path.h"
#include "core/log.h"
#include "recipe/reference.h"
#include "report/charts.h"
#include "report/exec.h"
#include "report/inputs.h"
#include "report/render.h"
#include "report/tables.h"

namespace tb::cli {

int cmd_report(int argc, char** argv) {
  CLI::App app{"render results as one self-contained HTML page (charts, tables), Markdown or CSV", "trainbench report"};
  std::vector<std::filesystem::path> inputs;
  std::string format, title = "trainbench report", gnuplot = "gnuplot";
  std::optional<std::filesystem::path> output, references, charts_dir;
  bool no_charts = false;
  app.add_option("results", inputs, "results folders (searched recursively) or .jsonl files")->required();
  app.add_option("--format", format, "html | md | csv (default: from -o's extension, else html)")
      ->check(CLI::IsMember({"html", "md", "csv"}));
  app.add_option("-o,--output", output, "the file to write (default: report.<format>; '-' for stdout)");
  app.add_option("--title", title, "the page's title")->capture_default_str();
  app.add_option("--references", references, "references folder for the comparison (default: next to the binary)");
  app.add_option("--charts-dir", charts_dir, "keep the charts' data, gnuplot scripts and PNGs here");
  app.add_option("--gnuplot", gnuplot, "the gnuplot program")->capture_default_str();
  app.add_flag("--no-charts", no_charts, "HTML without charts (no gnuplot needed)");
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
  const auto tables = report::build_tables(in, refs);
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
  } else {
    text = format == "md" ? report::render_markdown(tables, meta) : report::render_csv(tables);
  }
  if (*output == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return kOk;
  }
  if (output->has_parent_path()) std::filesystem::create_directories(output->parent_path());
  std::ofstream f(*output, std::ios::binary);
  f << text;
  f.close();
  if (!f) raise_error(Error::Kind::io, fmt::format("cannot write {}", output->string()));
  if (format == "html") std::printf("report: %s (self-contained; open it in any browser)\n", output->c_str());
  return kOk;
}

}  // namespace tb::cli
