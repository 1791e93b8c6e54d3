// tests/support/cli_run.h: runs `trainbench ARGS...` in-process through the command table (cli/dispatch.cpp, which
// maps errors to exit codes), capturing stdout, stderr and the exit code.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/commands.h"

namespace tb::testing_support {

struct CliResult {
  int rc;
  std::string out, err;
};

inline CliResult run_cli(std::vector<std::string> args) {
  args.insert(args.begin(), "trainbench");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  const int rc = tb::cli::dispatch(int(argv.size()), argv.data());
  return {rc, testing::internal::GetCapturedStdout(), testing::internal::GetCapturedStderr()};
}

}  // namespace tb::testing_support
