// cli/dispatch.cpp: `trainbench <command> ...`: the table, top-level help, "did you mean", and the
// mapping of errors to exit codes (config 2, fatal device error 3, anything else 1).
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "comm/mpi.h"
#include "comm/mpi_comm.h"
#include "cli/common.h"
#include "core/build_info.h"
#include "core/error.h"
#include "core/suggest.h"

namespace tb::cli {
namespace {

// In a job of several ranks an error names its rank, and ends the whole job (MPI_Abort): no rank is left waiting
// in a collective for the one that failed.
std::string rank_prefix() {
  if (!mpi_active() || comm::world().size < 2) return "";
  return fmt::format("rank {} of {}: ", comm::world().rank, comm::world().size);
}
int end_job(int code) {
  if (mpi_active() && comm::world().size > 1) {
    std::fflush(stdout);
    std::fflush(stderr);
    comm::abort_job(code);
  }
  return code;
}

constexpr Command kCommands[] = {
    {"info", "GPUs, links, clocks, power limits, driver and library versions (--json)", cmd_info},
    {"check", "system check: GEMM, HBM, links, NCCL vs references and sibling GPUs; verdict table", cmd_check},
    {"micro", "one microbenchmark suite: gemm, membw, nccl, links", cmd_micro},
    {"run", "run a recipe (a proxy of its per-GPU layout) and compare it with the published reference", cmd_run},
    {"compare", "compare run results with the published references; exit 1 when any is below", cmd_compare},
    {"train", "train a model preset for a few steps: step time, tokens/s, TFLOP/s, MFU, memory, loss", cmd_train},
    {"sweep", "run a recipe over a grid of settings; infeasible points skipped with the reason; resumable; best named",
     cmd_sweep},
    {"scale", "a recipe at several GPU counts: per-GPU throughput, efficiency, communication share", cmd_scale},
    {"report", "results as one self-contained HTML page with charts (or --format md|csv)", cmd_report},
    {"project", "project a recipe to N GPUs: measured per-GPU work + modelled network (--validate: vs the references)",
     cmd_project},
    {"slurm", "launch a recipe, sweep, scale series or check on Slurm; status and collect its jobs' records", cmd_slurm},
    {"k8s", "render a Kubernetes manifest (indexed Job + headless Service, or MPIJob) for a recipe", cmd_k8s},
    {"mlperf", "MLPerf Training time-to-train runs with MLLOG logs; `mlperf summarize DIR`: the score", cmd_mlperf},
    {"list", "the micro suites, recipes and reference rows this build knows", cmd_list},
};

// -1 when text is valid UTF-8, else the offset of the first byte that is not.
long bad_utf8_at(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (n == 0 || i + n > s.size() || (n == 2 && c < 0xc2)) return long(i);
    for (int k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return long(i);
    i += n;
  }
  return -1;
}

// The JSON library's message without its "[json.exception.type_error.302] " prefix.
std::string json_what(const std::exception& e) {
  std::string w = e.what();
  if (w.starts_with("[json.exception.")) w.erase(0, w.find(']') + 1);
  while (!w.empty() && w.front() == ' ') w.erase(0, 1);
  return w;
}

void usage() {
  std::printf("trainbench %s (%s): measures how well GPU systems train AI models\n\n", build_info().version,
              build_info().git_describe);
  std::printf("usage: trainbench <command> [options]     (trainbench <command> --help for its options)\n\n");
  for (const auto& c : kCommands)
    std::printf("  %-8.*s %.*s\n", int(c.name.size()), c.name.data(), int(c.summary.size()), c.summary.data());
  std::printf("\nexit codes: 0 ok, 1 a case failed or a check did not pass, 2 usage error or no GPU, 3 fatal device error\n");
}

}  // namespace

std::span<const Command> commands() { return kCommands; }

int dispatch(int argc, char** argv) {
  if (argc < 2 || std::string_view(argv[1]) == "-h" || std::string_view(argv[1]) == "--help" ||
      std::string_view(argv[1]) == "help") {
    usage();
    return argc < 2 ? kUsage : kOk;
  }
  const std::string_view name = argv[1];
  if (name == "--version" || name == "version") return cmd_version(argc, argv);
  const Command* cmd = nullptr;
  std::vector<std::string> names;
  for (const auto& c : kCommands) {
    names.emplace_back(c.name);
    if (c.name == name) cmd = &c;
  }
  if (!cmd) {
    std::fprintf(stderr, "trainbench: unknown command '%.*s'%s; run 'trainbench --help' for the list\n",
                 int(name.size()), name.data(), did_you_mean(name, names).c_str());
    return kUsage;
  }
  for (int i = 2; i < argc; ++i)  // every argument lands in run.json and records: text, as JSON needs
    if (const long at = bad_utf8_at(argv[i]); at >= 0) {
      std::fprintf(stderr, "trainbench %s: argument %d is not UTF-8 text (byte %ld); trainbench takes paths and values "
                   "as UTF-8\n", std::string(cmd->name).c_str(), i - 1, at);
      return kUsage;
    }
  if (launched_by_mpi()) comm::world();  // MPI up first: any rank's error can then end the whole job (end_job)
  std::string prog = fmt::format("trainbench {}", cmd->name);
  std::vector<char*> args{prog.data()};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  try {
    return cmd->run(int(args.size()), args.data());
  } catch (const Error& e) {
    const int code = e.kind() == Error::Kind::config ? kUsage : e.fatal() ? kFatal : kFailed;
    std::string_view what = e.what();  // a library's own "slurm: ..." under `trainbench slurm` is said once
    if (const std::string own = std::string(cmd->name) + ": "; what.starts_with(own)) what.remove_prefix(own.size());
    std::fprintf(stderr, "trainbench %s: %s%.*s\n", std::string(cmd->name).c_str(), rank_prefix().c_str(),
                 int(what.size()), what.data());
    return end_job(code);
  } catch (const nlohmann::json::exception& e) {  // a value of the wrong type in a results or run file
    std::fprintf(stderr, "trainbench %s: %sa results or run file holds a value of the wrong type or lacks one: %s\n",
                 std::string(cmd->name).c_str(), rank_prefix().c_str(), json_what(e).c_str());
    return end_job(kUsage);
  } catch (const std::filesystem::filesystem_error& e) {  // a symlink loop, a folder without permission, ...
    std::fprintf(stderr, "trainbench %s: %s%s: %s\n", std::string(cmd->name).c_str(), rank_prefix().c_str(),
                 e.path1().empty() ? "file system error" : e.path1().c_str(), e.code().message().c_str());
    return end_job(kUsage);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainbench %s: %sinternal error: %s\n", std::string(cmd->name).c_str(),
                 rank_prefix().c_str(), e.what());
    return end_job(kFailed);
  }
}

}  // namespace tb::cli
