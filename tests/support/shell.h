// tests/support/shell.h: runs a shell command (popen) and returns its exit code and stdout (append " 2>&1" to the
// command for stderr too); rc -1 when the command could not start or did not exit normally. trainbench_binary: the
// built binary the tests start ($TRAINBENCH_BIN, else next to the build's tests folder).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace tb::testing_support {

struct ShellResult {
  int rc;
  std::string out;
};

inline ShellResult run_shell(const std::string& cmd) {
  ShellResult r{0, ""};
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  for (std::size_t n; p && (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  const int st = p ? ::pclose(p) : -1;
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

inline std::filesystem::path trainbench_binary() {
  if (const char* b = std::getenv("TRAINBENCH_BIN")) return b;
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec && std::filesystem::exists(self.parent_path().parent_path() / "trainbench"))
    return self.parent_path().parent_path() / "trainbench";
  return std::filesystem::absolute("build/trainbench");
}

}  // namespace tb::testing_support
