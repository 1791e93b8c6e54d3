// report/render.cpp: HTML, Markdown and CSV renderings of the tables (render.h).
#include "report/render.h"

#include <fmt/format.h>

#include <algorithm>

namespace tb::report {
namespace {

constexpr const char* kCss = R"(
body{font:14px/1.45 "DejaVu Sans",Helvetica,Arial,sans-serif;margin:24px auto;max-width:1280px;color:#222;padding:0 16px}
h1{font-size:24px;margin-bottom:4px} h2{font-size:18px;margin-top:32px;border-bottom:2px solid #76b900;padding-bottom:3px}
table{border-collapse:collapse;margin:8px 0 16px;font-size:13px} th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f2f2f2} td:first-child,th:first-child{text-align:left} tr.hl td{background:#e6f4d7;font-weight:bold}
tr:nth-child(even) td{background:#fafafa} tr.hl:nth-child(even) td{background:#e6f4d7}
p.note{margin:4px 0;color:#333} figure{margin:12px 0 24px} figcaption{color:#555;font-size:13px}
img{max-width:100%;border:1px solid #eee} nav a{margin-right:12px} .small{color:#777;font-size:12px}
)";

// Sets <body data-render="ok N/N"> once every chart image has decoded (checked by the headless-Chromium test).
constexpr const char* kCheckJs = R"(
window.addEventListener('load',function(){var im=document.images,ok=0;for(var i=0;i<im.length;i++)
if(im[i].complete&&im[i].naturalWidth>0)ok++;document.body.setAttribute('data-render',(ok==im.length?'ok ':'bad ')+ok+'/'+im.length);
console.log('tb-render: '+document.body.getAttribute('data-render'));});
)";

bool is_highlighted(const Table& t, std::size_t i) {
  return std::find(t.highlight.begin(), t.highlight.end(), int(i)) != t.highlight.end();
}

std::string md_cell(std::string s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else out.push_back(c == '\n' ? ' ' : c);
  }
  return out;
}

std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string base64(const std::string& bytes) {
  static constexpr char k[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const unsigned v = unsigned(uint8_t(bytes[i])) << 16 | unsigned(uint8_t(bytes[i + 1])) << 8 | uint8_t(bytes[i + 2]);
    out += {k[v >> 18], k[v >> 12 & 63], k[v >> 6 & 63], k[v & 63]};
  }
  if (i + 1 == bytes.size()) {
    const unsigned v = unsigned(uint8_t(bytes[i])) << 16;
    out += {k[v >> 18], k[v >> 12 & 63], '=', '='};
  } else if (i + 2 == bytes.size()) {
    const unsigned v = unsigned(uint8_t(bytes[i])) << 16 | unsigned(uint8_t(bytes[i + 1])) << 8;
    out += {k[v >> 18], k[v >> 12 & 63], k[v >> 6 & 63], '='};
  }
  return out;
}

std::string render_html(const std::vector<Table>& tables, const std::vector<Chart>& charts, const ReportMeta& meta) {
  std::string h = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>" + html_escape(meta.title) +
                  "</title>\n<style>" + kCss + "</style>\n<script>" + kCheckJs + "</script></head>\n<body>\n";
  h += "<h1>" + html_escape(meta.title) + "</h1>\n<p class=\"small\">" + html_escape(meta.generated) + "</p>\n<nav>";
  for (const auto& t : tables) h += fmt::format("<a href=\"#{}\">{}</a>", t.id, html_escape(t.title));
  if (!charts.empty()) h += "<a href=\"#charts\">Charts</a>";
  h += "</nav>\n";
  for (const auto& t : tables) {
    h += fmt::format("<h2 id=\"{}\">{}</h2>\n", t.id, html_escape(t.title));
    for (const auto& n : t.notes) h += "<p class=\"note\">" + html_escape(n) + "</p>\n";
    h += fmt::format("<table data-table=\"{}\">\n<tr>", t.id);
    for (const auto& c : t.columns) h += "<th>" + html_escape(c) + "</th>";
    h += "</tr>\n";
    for (std::size_t i = 0; i < t.rows.size(); ++i) {
      h += is_highlighted(t, i) ? "<tr class=\"hl\">" : "<tr>";
      for (const auto& c : t.rows[i]) h += "<td>" + html_escape(c) + "</td>";
      h += "</tr>\n";
    }
    h += "</table>\n";
  }
  if (!charts.empty() || !meta.charts_note.empty()) h += "<h2 id=\"charts\">Charts</h2>\n";
  if (!meta.charts_note.empty()) h += "<p class=\"note\">" + html_escape(meta.charts_note) + "</p>\n";
  for (const auto& c : charts)
    h += fmt::format("<figure id=\"chart-{}\"><img alt=\"{}\" src=\"data:image/png;base64,{}\">\n<figcaption>{}</figcaption></figure>\n",
                     c.id, html_escape(c.title), base64(c.png), html_escape(c.caption));
  h += "<p class=\"small\">inputs: ";
  for (const auto& f : meta.inputs) h += html_escape(f) + " ";
  h += "</p>\n</body></html>\n";
  return h;
}

std::string render_markdown(const std::vector<Table>& tables, const ReportMeta& meta) {
  std::string m = "# " + meta.title + "\n\n" + meta.generated + "\n";
  for (const auto& t : tables) {
    m += "\n## " + t.title + "\n\n";
    for (const auto& n : t.notes) m += n + "\n\n";
    m += "|";
    for (const auto& c : t.columns) m += fmt::format(" {} |", md_cell(c));
    m += "\n|";
    for (std::size_t i = 0; i < t.columns.size(); ++i) m += i ? " ---: |" : " --- |";
    m += "\n";
    for (std::size_t i = 0; i < t.rows.size(); ++i) {
      const bool hl = is_highlighted(t, i);
      m += "|";
      for (const auto& c : t.rows[i]) m += fmt::format(" {}{}{} |", hl && !c.empty() ? "**" : "", md_cell(c), hl && !c.empty() ? "**" : "");
      m += "\n";
    }
  }
  return m;
}

namespace {
void csv_line(std::string& s, const std::vector<std::string>& cells) {
  for (std::size_t i = 0; i < cells.size(); ++i) {
    if (i) s += ',';
    s += csv_cell(cells[i]);
  }
  s += "\n";
}
}  // namespace

std::string render_csv(const Table& t) {
  std::string s;
  csv_line(s, t.csv_columns);
  for (const auto& r : t.csv_rows) csv_line(s, r);
  return s;
}

std::string render_csv_index(const std::vector<Table>& tables, const std::vector<std::string>& files) {
  std::string s;
  csv_line(s, {"table", "file", "title", "rows", "notes"});
  for (std::size_t i = 0; i < tables.size(); ++i) {
    std::string notes;
    for (const auto& n : tables[i].notes) notes += (notes.empty() ? "" : " | ") + n;
    csv_line(s, {tables[i].id, i < files.size() ? files[i] : "", tables[i].title,
                 std::to_string(tables[i].csv_rows.size()), notes});
  }
  return s;
}

}  // namespace tb::report
