// report/render.h: the report as one self-contained HTML page (inline CSS, charts as base64 PNG data URIs, no
// network needed), as Markdown, or as CSV; all three render the same Table objects (tables.h).
// CSV layout: for each table a line "# <id>: <title>", its notes as "# note: ..." lines, the header row, the rows
// (RFC 4180 quoting), then an empty line.
#pragma once

#include <string>
#include <vector>

#include "report/charts.h"
#include "report/tables.h"

namespace tb::report {

struct ReportMeta {
  std::string title = "trainbench report";
  std::vector<std::string> inputs;  // the files read, listed at the bottom
  std::string generated;            // e.g. "trainbench 0.1.0 (git describe), 2026-11-30T12:00:00Z"
  std::string charts_note;          // why there are no charts, when there are none
};

std::string render_html(const std::vector<Table>& tables, const std::vector<Chart>& charts, const ReportMeta& meta);
std::string render_markdown(const std::vector<Table>& tables, const ReportMeta& meta);
std::string render_csv(const std::vector<Table>& tables);

std::string base64(const std::string& bytes);
std::string html_escape(const std::string& s);

}  // namespace tb::report
