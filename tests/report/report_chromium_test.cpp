// tests/report/report_chromium_test.cpp: the golden report opened in headless Chromium (Debian's `chromium`, as root
// with --no-sandbox): the page loads with no script error, every chart image decodes (the page's own check sets
// <body data-render="ok N/N">), and a screenshot is written. Skipped, saying why, only when Chromium cannot run here.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "report/charts.h"
#include "report/exec.h"
#include "report/inputs.h"
#include "report/render.h"
#include "report/tables.h"

namespace tb::report {
namespace {
namespace fs = std::filesystem;

std::string chromium() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"})
    if (auto p = find_program(name); !p.empty()) return p;
  return "";
}

std::vector<std::string> browser_args(const std::string& exe, const fs::path& profile) {
  std::vector<std::string> a{exe, "--headless", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
                             "--user-data-dir=" + profile.string(), "--enable-logging=stderr", "--v=0"};
  if (geteuid() == 0) a.push_back("--no-sandbox");  // Chromium refuses to start its sandbox as root
  return a;
}

TEST(ReportChromium, RendersWithoutErrorsAndScreenshots) {
  const std::string exe = chromium();
  if (exe.empty()) GTEST_SKIP() << "chromium is not installed (scripts/setup.sh installs Debian's chromium)";
  if (find_program("gnuplot").empty()) GTEST_SKIP() << "gnuplot is not installed (scripts/setup.sh installs gnuplot-nox)";
  const fs::path dir = fs::temp_directory_path() / fmt::format("tb-report-chromium-{}", getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const Inputs in = load_inputs({"tests/report/golden"});
  const auto charts = build_charts(in, {dir / "charts", "gnuplot"});
  const fs::path html = dir / "report.html";
  std::ofstream(html) << render_html(build_tables(in, {}), charts, {});

  const ExecResult probe = exec({exe, "--version"});
  if (probe.rc != 0) GTEST_SKIP() << "chromium cannot run here: " << probe.output;

  auto args = browser_args(exe, dir / "profile");
  args.insert(args.end(), {"--virtual-time-budget=5000", "--dump-dom", "file://" + html.string()});
  const ExecResult dom = exec(args);
  ASSERT_EQ(dom.rc, 0) << dom.output;
  EXPECT_NE(dom.output.find(fmt::format("data-render=\"ok {}/{}\"", charts.size(), charts.size())), std::string::npos)
      << "chart images did not all decode:\n" << dom.output.substr(0, 4000);
  EXPECT_EQ(dom.output.find("Uncaught"), std::string::npos) << dom.output;
  EXPECT_NE(dom.output.find("tb-render: ok"), std::string::npos) << "the page's load check did not run";

  auto shot = browser_args(exe, dir / "profile");
  const fs::path png = dir / "report.png";
  shot.insert(shot.end(), {"--window-size=1280,2400", "--screenshot=" + png.string(), "file://" + html.string()});
  const ExecResult s = exec(shot);
  ASSERT_EQ(s.rc, 0) << s.output;
  ASSERT_TRUE(fs::exists(png)) << s.output;
  EXPECT_GT(fs::file_size(png), 20000u);  // tables and charts, not a blank page
  std::ifstream f(png, std::ios::binary);
  std::string head(4, '\0');
  f.read(head.data(), 4);
  EXPECT_EQ(head, "\x89PNG");
  if (const char* keep = std::getenv("TB_REPORT_SCREENSHOT")) fs::copy_file(png, keep, fs::copy_options::overwrite_existing);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tb::report
