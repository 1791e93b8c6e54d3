// report/exec.h: runs a helper program (gnuplot for the charts, trainbench itself for sweep and scale points,
// chromium in tests) without a shell: argv[0] looked up on PATH, stdin /dev/null, stdout and stderr appended to
// a log file (or captured and returned when no log is given). Waits for it. The child dies with this process
// (PR_SET_PDEATHSIG: SIGTERM) and runs in a process group of its own; a stop request to this process (Ctrl-C,
// SIGTERM: core/interrupt.h) is passed on to it once while waiting.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace tb::report {

struct ExecResult {
  int rc = 0;          // exit status; 127: could not start; 128+N: killed by signal N
  std::string output;  // stdout+stderr when no log file was given, else the log's last 4 KiB
};

ExecResult exec(const std::vector<std::string>& argv, const std::filesystem::path& log = {});
std::string find_program(std::string_view name);  // absolute path on PATH, "" when absent
std::string self_exe();  // $TRAINBENCH_EXE, else this process's binary (/proc/self/exe)

}  // namespace tb::report
