// report/render.h: the report as one self-contained HTML page (inline CSS, charts as base64 PNG data URIs, no
// network needed), as Markdown, or as CSV; all three render the same Table objects (tables.h).
// CSV: one file per table, each a header row and its rows (RFC 4180 quoting) and nothing else, so any CSV reader
// (pandas.read_csv, Python's csv module) reads it as it is: headers named as the record keys with the unit in the
// name (step_ms, tokens_per_s_per_gpu, peak_alloc_gib; mfu, efficiency, ratio as fractions), cells plain numbers
// in that unit (no units, % signs or thousands separators; empty where there is no value) or text (tables.h).
// The index (render_csv_index) lists the tables: table, file, title, rows, notes (the notes joined by " | ").
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
std::string render_csv(const Table& table);
std::string render_csv_index(const std::vector<Table>& tables, const std::vector<std::string>& files);

std::string base64(const std::string& bytes);
std::string html_escape(const std::string& s);

}  // namespace tb::report
