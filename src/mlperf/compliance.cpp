// mlperf/compliance.cpp: the checker as a subprocess (launch/process.h: no shell, output captured).
#include "mlperf/compliance.h"

#include <fmt/format.h>

#include <cstdlib>
#include <sstream>

#include "launch/process.h"

namespace tb::mlperf {
namespace {

std::vector<std::string> python(const std::string& pythonpath) {
  std::vector<std::string> argv = {"env"};
  if (!pythonpath.empty()) {
    const char* old = std::getenv("PYTHONPATH");
    argv.push_back("PYTHONPATH=" + pythonpath + (old && *old ? std::string(":") + old : ""));
  }
  argv.push_back("python3");
  return argv;
}

}  // namespace

std::string checker_unavailable(const std::string& pythonpath) {
  if (!launch::on_path("python3")) return "python3 is not on PATH";
  auto argv = python(pythonpath);
  argv.insert(argv.end(), {"-c", "import mlperf_logging.compliance_checker.mlp_compliance"});
  const launch::ProcResult r = launch::run_process(argv);
  if (r.rc == 0) return "";
  return fmt::format("python3 cannot import mlperf_logging{} (scripts/setup.sh installs mlperf-logging==4.1.68 into "
                     ".deps/mlperf; or pip install mlperf-logging==4.1.68)",
                     pythonpath.empty() ? "" : " with PYTHONPATH " + pythonpath);
}

CheckerVerdict check_compliance(const std::filesystem::path& log, const std::string& ruleset,
                                const std::string& pythonpath) {
  CheckerVerdict v;
  v.ruleset = ruleset;
  v.why = checker_unavailable(pythonpath);
  if (!v.why.empty()) return v;
  v.checked = true;
  auto argv = python(pythonpath);
  const std::string out = std::filesystem::path(log).replace_extension("").string() + ".compliance-" + ruleset + ".log";
  argv.insert(argv.end(), {"-m", "mlperf_logging.compliance_checker", "--usage", "training", "--ruleset", ruleset,
                           "--log_output", out, log.string()});
  const launch::ProcResult r = launch::run_process(argv);
  const std::string all = r.out + r.err;
  v.passed = r.rc == 0 && all.find("SUCCESS") != std::string::npos;
  if (!v.passed) {
    std::istringstream in(all);
    std::string line, errors;
    // the checker logs its findings as WARNING lines (and the lines below them, between lines of dashes)
    while (std::getline(in, line))
      if (!line.empty() && !line.starts_with("INFO") && !line.starts_with("** ") && !line.starts_with("---") &&
          line != "ERROR - FAILED")
        errors += (errors.empty() ? "" : "; ") + line;
    v.why = errors.empty() ? fmt::format("exit {}: {}", r.rc, all.substr(0, 400)) : errors;
  }
  return v;
}

}  // namespace tb::mlperf
