// cli/main.cpp: the trainbench binary.
#include "cli/commands.h"

int main(int argc, char** argv) { return tb::cli::dispatch(argc, argv); }
