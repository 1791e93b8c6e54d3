// launch/process.h: runs a program (sbatch, squeue, scontrol, sacct, srun) without a shell and without a
// terminal: stdin is /dev/null, stdout and stderr are captured. Also shell quoting for rendered scripts.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tb::launch {

struct ProcResult {
  int rc = 0;            // exit status; 127: not found or not executable; 128+N: killed by signal N
  std::string out, err;  // what it printed
};

// Runs argv[0] (looked up on PATH) with the given arguments and waits for it.
ProcResult run_process(const std::vector<std::string>& argv);
bool on_path(std::string_view program);
std::string find_on_path(std::string_view program);  // "" when absent

// 'text' quoted for bash when it needs it (plain words such as --nodes=2 or /a/b stay as they are).
std::string shell_quote(std::string_view text);
std::string shell_join(const std::vector<std::string>& args);  // each quoted, separated by spaces
std::string join(const std::vector<std::string>& items, std::string_view sep);

}  // namespace tb::launch
