// cli/ranks.cpp: --gpus N: re-execution under mpirun, and the rank checks (cli/ranks.h).
#include "cli/ranks.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/telemetry.h"
#include "comm/mpi.h"
#include "comm/mpi_comm.h"
#include "core/error.h"
#include "core/provenance.h"
#include "launch/process.h"

namespace tb::cli {

int launcher_local_rank() {
  for (const char* key : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"})
    if (const char* v = std::getenv(key); v && *v) return std::max(0, std::atoi(v));
  return 0;
}

bool is_rank0() { return launch_rank().rank == 0; }
int job_ranks() { return launched_by_mpi() ? comm::world().size : 1; }

void share_run_id(comm::Communicator& world) {
  if (world.size() < 2 || std::getenv("TRAINBENCH_RUN_ID")) return;  // every rank sees the same environment
  const std::string id = world.broadcast_text(world.rank() == 0 ? make_run_id() : std::string(), 0);
  setenv("TRAINBENCH_RUN_ID", id.c_str(), 1);
}

Record rank_steps_record(const train::TrainSpec& spec, const train::TrainResult& res, bool cuda) {
  const LaunchRank lr = launch_rank();
  Record rs;
  rs.bench = "rank_steps";
  rs.name = fmt::format("rank{}", lr.rank);
  rs.world = lr.world;
  if (res.interrupted) rs.status = Status::interrupted;  // every rank of a stopped job says so
  if (cuda) rs.device = res.gpu;
  auto ms = nlohmann::json::array();
  for (const auto& s : res.steps)
    if (s.step > spec.run.warmup_steps) ms.push_back(s.step_s * 1e3);
  rs.data = {{"rank", lr.rank}, {"host", hostname()}, {"step_ms", ms}};
  if (res.telemetry) rs.data["telemetry"] = bench::to_json(*res.telemetry);  // this rank's GPU
  if (spec.debug.delay_rank >= 0)
    rs.data["debug_delay"] = {{"rank", spec.debug.delay_rank}, {"ms", spec.debug.delay_ms}};
  return rs;
}

std::optional<int> start_ranks(int gpus, const char* command, int argc, char** argv) {
  TB_REQUIRE(gpus >= 1, fmt::format("--gpus {}: must be at least 1", gpus));
  if (launched_by_mpi()) {
    const comm::World& w = comm::world();
    TB_REQUIRE(gpus == 1 || w.size == gpus,
               fmt::format("--gpus {} but the launcher started {} rank{}: give mpirun -np / srun --ntasks the same "
                           "count, or leave --gpus out under a launcher",
                           gpus, w.size, w.size == 1 ? "" : "s"));
    return std::nullopt;
  }
  if (gpus == 1) return std::nullopt;
  const std::string mpirun = launch::find_on_path("mpirun");
  TB_REQUIRE(!mpirun.empty(), "--gpus: mpirun is not on PATH (install Open MPI: openmpi-bin, or start the ranks with "
                              "your own launcher: mpirun -np N / srun --mpi=pmix)");
  char exe[4096] = {};
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  TB_REQUIRE(len > 0, "--gpus: cannot find this program's path (/proc/self/exe)");
  if (!std::getenv("TRAINBENCH_RUN_ID")) setenv("TRAINBENCH_RUN_ID", make_run_id().c_str(), 1);  // one run, N ranks
  std::vector<std::string> args = {mpirun, "-np", std::to_string(gpus), "--bind-to", "none"};
  if (geteuid() == 0) args.push_back("--allow-run-as-root");
  args.push_back(exe);
  args.push_back(command);
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  std::fprintf(stderr, "trainbench %s: starting %d ranks: %s\n", command, gpus, launch::shell_join(args).c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  execv(mpirun.c_str(), cargs.data());
  std::fprintf(stderr, "trainbench %s: could not start %s: %s\n", command, mpirun.c_str(), std::strerror(errno));
  return 1;
}

}  // namespace tb::cli
