// launch/slurm.h: talking to Slurm through its commands (sbatch, scontrol, sacct, srun --mpi=list), behind an
// interface so tests use a fake scheduler, as ninja tests builds through a fake CommandRunner. Job states are
// Slurm's words (PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, ...), keyed by
// job tag: the job id, or <array job id>_<task> for array tasks.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tb::launch {

struct JobState {
  std::string state;   // Slurm's state word
  int exit_code = 0;   // the batch script's exit status
  int signal = 0;      // the signal that ended it, if any
  std::string reason;  // why pending, or why it ended (NonZeroExitCode, TimeLimit, ...)
};

class Scheduler {
 public:
  virtual ~Scheduler() = default;
  // sbatch --parsable [extra...] script; returns the job id. Error{io} with sbatch's message on failure.
  virtual std::string submit(const std::filesystem::path& script, const std::vector<std::string>& extra) = 0;
  // What the scheduler still knows of these jobs (array jobs: every task), by tag; a purged job is absent.
  virtual std::map<std::string, JobState> query(const std::vector<std::string>& job_ids) = 0;
  // srun --mpi=list: the MPI plugin types this cluster's srun offers; empty when unknown.
  virtual std::vector<std::string> mpi_types() = 0;
};

// The real one: runs the Slurm commands found on PATH (SLURM_CONF chooses the cluster, as for any client).
std::unique_ptr<Scheduler> slurm_commands();

// Parsers of the commands' output (tested on captured text).
std::map<std::string, JobState> parse_scontrol(std::string_view one_liners);  // scontrol show job -o
std::map<std::string, JobState> parse_sacct(
    std::string_view parsable);                                  // sacct -n -P -X -o JobID,State,ExitCode,Reason
std::vector<std::string> parse_mpi_list(std::string_view text);  // srun --mpi=list
std::string parse_job_id(std::string_view sbatch_parsable);      // "123" or "123;cluster" -> "123"

// The MPI type to use: `wanted` when offered (or when nothing is known); else pmi2, else none, with `note` saying so.
std::string choose_mpi(const std::string& wanted, const std::vector<std::string>& offered, std::string& note);

bool is_finished(std::string_view state);  // a final state: nothing more will happen to the job
bool is_success(std::string_view state);   // COMPLETED

}  // namespace tb::launch
