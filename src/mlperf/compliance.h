// mlperf/compliance.h: MLCommons' compliance checker (pip package mlperf-logging) on one MLLOG file, as a
// subprocess: PYTHONPATH=<pythonpath>:$PYTHONPATH python3 -m mlperf_logging.compliance_checker --usage training
// --ruleset <ruleset> --log_output <log without .txt>.compliance-<ruleset>.log <log>. scripts/setup.sh installs the package
// (pinned) into .deps/mlperf.
#pragma once

#include <filesystem>
#include <string>

namespace tb::mlperf {

struct CheckerVerdict {
  bool checked = false;  // false: the checker could not run (python3 or the package missing): `why` says so
  bool passed = false;   // the checker printed SUCCESS and exited 0
  std::string ruleset;
  std::string why;       // not checked: the reason; failed: the checker's error lines
};

// Whether python3 can import mlperf_logging.compliance_checker with `pythonpath` in front ("" when it can, else why).
std::string checker_unavailable(const std::string& pythonpath);
CheckerVerdict check_compliance(const std::filesystem::path& log, const std::string& ruleset,
                                const std::string& pythonpath);

}  // namespace tb::mlperf
