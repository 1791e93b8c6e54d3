// report/charts.cpp: gnuplot scripts and data files for each chart (charts.h).
#include "report/charts.h"

#include <fmt/format.h>

#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"
#include "report/analysis.h"
#include "report/exec.h"

namespace tb::report {
namespace fs = std::filesystem;
namespace {

using nlohmann::json;

constexpr const char* kHeader =
    "set terminal pngcairo size 960,420 noenhanced font 'DejaVu Sans,10'\n"
    "set grid lc rgb '#dddddd'\nset key outside right top\nset border lc rgb '#555555'\n";

// gnuplot strings in single quotes: a quote is doubled.
std::string q(std::string s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

struct Writer {
  const ChartOptions& opt;
  std::vector<Chart> charts;

  fs::path data(const std::string& name, const std::string& text) {
    const fs::path p = opt.workdir / name;
    std::ofstream(p) << text;
    return p;
  }
  void draw(const std::string& id, const std::string& title, const std::string& caption, const std::string& body) {
    const fs::path png = opt.workdir / (id + ".png"), gp = opt.workdir / (id + ".gp");
    std::ofstream(gp) << kHeader << "set output " << q(png.string()) << "\nset title " << q(title) << "\n" << body;
    fs::remove(png);
    const ExecResult r = exec({opt.gnuplot, gp.string()});
    if (r.rc != 0 || !fs::exists(png) || fs::file_size(png) == 0)
      raise_error(Error::Kind::io, fmt::format("gnuplot failed on {} (exit {}): {}", gp.string(), r.rc, r.output));
    std::ifstream in(png, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    charts.push_back({id, title, caption, ss.str()});
  }
};

void scaling(const Inputs& in, Writer& w) {
  const auto rows = scale_rows(select(in, "scale.point"));
  std::map<std::string, std::string> by_source;
  for (const auto& s : rows)
    if (s.status == "ok") by_source[s.source] += fmt::format("{} {} {}\n", s.gpus, s.tokens_per_s_per_gpu, 100 * s.efficiency);
  if (by_source.empty()) return;
  std::string plot = "plot ";
  for (const auto& [src, text] : by_source) {
    const fs::path p = w.data("scaling-" + src + ".dat", text);
    plot += fmt::format("{} u 1:2 w lp lw 2 pt 7 t {}, {} u 1:3 axes x1y2 w lp dt 2 pt 6 t {}, ", q(p.string()),
                        q(src + " tokens/s/GPU"), q(p.string()), q(src + " efficiency %"));
  }
  plot.resize(plot.size() - 2);
  w.draw("scaling", "Throughput and efficiency vs GPUs",
         "tokens/s/GPU (solid, left) and efficiency relative to the smallest GPU count (dashed, right)",
         "set logscale x 2\nset xlabel 'GPUs'\nset ylabel 'tokens/s/GPU'\nset y2label 'efficiency %'\n"
         "set yrange [0:*]\nset y2range [0:110]\nset y2tics\nset ytics nomirror\n" +
             plot + "\n");
}

void sweep(const Inputs& in, Writer& w) {
  std::string text;
  int n = 0;
  for (const auto& s : sweep_rows(select(in, "sweep.point")))
    if (s.status == "ok") text += fmt::format("{} \"{}\" {} {}\n", n++, s.name, s.tokens_per_s_per_gpu, s.best ? 1 : 0);
  if (!n) return;
  const fs::path p = w.data("sweep.dat", text);
  w.draw("sweep", "Sweep: tokens/s/GPU per point", "the best point in green; skipped points are not drawn",
         "set style fill solid 0.8 border -1\nset boxwidth 0.7\nset yrange [0:*]\nset xtics rotate by -30 left\n"
         "set ylabel 'tokens/s/GPU'\nset bmargin 8\nunset key\n"
         "plot " +
             q(p.string()) + " u 1:3:($4 > 0 ? 0x2ca02c : 0x1f77b4):xtic(2) w boxes lc rgb variable\n");
}

void ranks(const Inputs& in, Writer& w) {
  const auto reps = analyze_stragglers(select(in, "rank_steps"));
  for (std::size_t k = 0; k < reps.size(); ++k) {
    const auto& rep = reps[k];
    const std::string sfx = reps.size() > 1 ? fmt::format("-{}", k) : "";
    std::string box;
    for (const auto& s : rep.ranks)
      box += fmt::format("{} {} {} {} {} {} {}\n", s.rank, s.step_ms.p10, s.step_ms.min, s.step_ms.max, s.step_ms.p90,
                         s.step_ms.median, s.rank == rep.slowest ? 1 : 0);
    const fs::path pb = w.data("rank_dist" + sfx + ".dat", box);
    w.draw("rank_dist" + sfx, "Step time per rank: " + rep.run,
           "box p10..p90, whiskers min..max, bar the median; the slowest rank in red. " + rep.summary(),
           "set boxwidth 0.5\nset xlabel 'rank'\nset ylabel 'step ms'\nset xtics 1\nunset key\nset offsets 0.5,0.5,0,0\n"
           "plot " + q(pb.string()) + " u 1:2:3:4:5:($7 > 0 ? 0xd62728 : 0x1f77b4) w candlesticks lc rgb variable "
           "whiskerbars 0.5, '' u 1:6:6:6:6 w candlesticks lc rgb 'black' lw 2\n");
    std::string plot = "plot ";
    for (std::size_t r = 0; r < rep.ranks.size(); ++r) {
      std::string t;
      for (std::size_t i = 0; i < rep.steps[r].size(); ++i) t += fmt::format("{} {}\n", i + 1, rep.steps[r][i]);
      const fs::path p = w.data(fmt::format("rank_timeline{}-{}.dat", sfx, rep.ranks[r].rank), t);
      plot += fmt::format("{} u 1:2 w lp pt 7 ps 0.5 lw {} t {}, ", q(p.string()),
                          rep.ranks[r].rank == rep.slowest ? 3 : 1, q(fmt::format("rank {}", rep.ranks[r].rank)));
    }
    plot.resize(plot.size() - 2);
    w.draw("rank_timeline" + sfx, "Step time per step and rank: " + rep.run, "one line per rank; the slowest drawn thick",
           "set xlabel 'measured step'\nset ylabel 'step ms'\n" + plot + "\n");
  }
}

void telemetry(const Inputs& in, Writer& w) {
  std::string body = "set multiplot layout 1,3\nset xlabel 's'\nset key bottom right\n";
  std::vector<std::string> panels{"", "", ""};
  int n = 0;
  for (const auto* r : select(in, "telemetry.series")) {
    if (!r->contains("t_ms") && !r->contains("t_s")) continue;
    auto t = (*r)[r->contains("t_ms") ? "t_ms" : "t_s"].get<std::vector<double>>();  // t_s: older records
    if (r->contains("t_ms"))
      for (double& x : t) x /= 1e3;  // the chart's axis is in s
    auto col = [&](const char* k) {
      return r->contains(k) ? (*r)[k].get<std::vector<double>>() : std::vector<double>(t.size(), 0.0);
    };
    const auto pw = col("power_w"), clk = col("sm_clock_mhz"), tc = col("temp_c");
    std::string text;
    for (std::size_t i = 0; i < t.size() && i < pw.size() && i < clk.size() && i < tc.size(); ++i)
      text += fmt::format("{} {} {} {}\n", t[i], pw[i], clk[i], tc[i]);
    const int dev = r->value("device", n);
    const fs::path p = w.data(fmt::format("telemetry-{}.dat", n++), text);
    for (int c = 0; c < 3; ++c) panels[std::size_t(c)] += fmt::format("{} u 1:{} w l lw 2 t {}, ", q(p.string()), c + 2, q(fmt::format("GPU {}", dev)));
  }
  if (!n) return;
  const char* labels[] = {"power W", "SM clock MHz", "temperature C"};
  for (int c = 0; c < 3; ++c) {
    auto& pl = panels[std::size_t(c)];
    pl.resize(pl.size() - 2);
    body += fmt::format("set title '{}'\nset ylabel '{}'\nplot {}\n", labels[c], labels[c], pl);
  }
  w.draw("telemetry", "Power, clock and temperature", "NVML samples per GPU over the run", "set terminal pngcairo size 1200,360 noenhanced font 'DejaVu Sans,10'\nset output " + q((w.opt.workdir / "telemetry.png").string()) + "\n" + body + "unset multiplot\n");
}

void busbw(const Inputs& in, Writer& w) {
  std::map<std::string, std::string> ops;
  for (const auto* r : select(in, "micro.nccl.*"))
    if (r->value("status", "") == "ok" && r->contains("busbw_gbps"))
      ops[r->value("bench", "").substr(11)] += fmt::format("{} {}\n", r->value("bytes", 0.0), r->value("busbw_gbps", 0.0));
  if (ops.empty()) return;
  std::map<std::string, double> expect;  // check verdicts: "micro.nccl.<op>/..." with expected_min
  for (const auto* r : select(in, "check")) {
    const std::string c = r->value("case", "");
    if (c.starts_with("micro.nccl.") && r->contains("expected_min"))
      expect[c.substr(11, c.find('/') - 11)] = (*r)["expected_min"].get<double>();
  }
  std::string plot = "plot ";
  int i = 1;
  for (auto& [op, text] : ops) {
    const fs::path p = w.data("busbw-" + op + ".dat", text);
    plot += fmt::format("{} u 1:2 w lp lw 2 pt 7 lc {} t {}, ", q(p.string()), i, q(op));
    if (expect.count(op)) plot += fmt::format("{} dt 2 lw 2 lc {} t {}, ", expect[op], i, q(op + " expected min"));
    ++i;
  }
  plot.resize(plot.size() - 2);
  w.draw("busbw", "NCCL bus bandwidth vs message size", "busbw (nccl-tests convention) per collective; dashed: the check's expected minimum",
         "set logscale x 2\nset format x '%.0b%B'\nset xlabel 'message size (bytes)'\nset ylabel 'busbw GB/s'\nset yrange [0:*]\n" + plot + "\n");
}

}  // namespace

std::vector<Chart> build_charts(const Inputs& in, const ChartOptions& opt) {
  fs::create_directories(opt.workdir);
  Writer w{opt, {}};
  scaling(in, w);
  sweep(in, w);
  ranks(in, w);
  telemetry(in, w);
  busbw(in, w);
  return std::move(w.charts);
}

}  // namespace tb::report
