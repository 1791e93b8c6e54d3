// cli/cmd_list.cpp: `trainbench list`: the micro suites (recipes join when they exist).
#include <cstdio>

#include "cli/commands.h"
#include "cli/common.h"
#include "micro/suite.h"

namespace tb::cli {

int cmd_list(int argc, char** argv) {
  CLI::App app{"the suites this build knows", "trainbench list"};
  if (auto rc = parse(app, argc, argv)) return *rc;
  std::printf("micro suites (trainbench micro <suite>):\n");
  for (const auto& s : micro::suites())
    std::printf("  %-8.*s %.*s (needs %d+ GPU%s)\n", int(s.name.size()), s.name.data(), int(s.summary.size()),
                s.summary.data(), s.min_gpus, s.min_gpus > 1 ? "s" : "");
  std::printf("recipes: none yet (the recipe catalogue comes with the recipes issue)\n");
  return kOk;
}

}  // namespace tb::cli
