// cli/commands.h: the command table. Each command turns flags into a spec and calls a library.
#pragma once

#include <span>
#include <string_view>

namespace tb::cli {

struct Command {
  std::string_view name, summary;
  int (*run)(int argc, char** argv);  // argv[0] is "trainbench <name>"
};

int cmd_info(int argc, char** argv);
int cmd_check(int argc, char** argv);
int cmd_micro(int argc, char** argv);
int cmd_list(int argc, char** argv);
int cmd_train(int argc, char** argv);
int cmd_run(int argc, char** argv);
int cmd_compare(int argc, char** argv);
int cmd_project(int argc, char** argv);
int cmd_sweep(int argc, char** argv);
int cmd_scale(int argc, char** argv);
int cmd_report(int argc, char** argv);
int cmd_slurm(int argc, char** argv);
int cmd_k8s(int argc, char** argv);
int cmd_mlperf(int argc, char** argv);
int cmd_version(int argc, char** argv);  // `--version`: this build and the CUDA libraries loaded

std::span<const Command> commands();
int dispatch(int argc, char** argv);  // the whole CLI: finds the command, maps errors to exit codes

}  // namespace tb::cli
