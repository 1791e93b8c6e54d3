// cli/ranks.h: `--gpus N` on one node. Outside an MPI launcher the command re-executes itself as N ranks under
// `mpirun -np N` (one rank per GPU, the node-local rank picks the GPU, one run id shared through TRAINBENCH_RUN_ID);
// under mpirun / srun --mpi=pmix it checks that the job has N ranks and carries on.
#pragma once

#include <optional>

#include "comm/communicator.h"
#include "core/record.h"
#include "train/trainer.h"

namespace tb::cli {

// nullopt: this process does the work (one rank, or a rank of the job); otherwise the exit status to return
// (exec failed). Does not return when it re-executes. args: the command's own argv (argv[0] "trainbench <cmd>").
// The caller checks the node's GPUs against N (train: N may exceed them with --share-gpus).
std::optional<int> start_ranks(int gpus, const char* command, int argc, char** argv);
// The job's rank count: the launcher's world size, 1 without a launcher.
int job_ranks();
// The node-local rank as the launcher gives it (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, LOCAL_RANK), without
// starting MPI; 0 without a launcher.
int launcher_local_rank();
// True in rank 0 (or without a launcher): the rank that prints progress and summaries.
bool is_rank0();
// A job of several ranks started by a launcher that set no TRAINBENCH_RUN_ID (srun, the user's own mpirun): rank 0's
// run id to every rank (collective), so their records name one run. No-op otherwise.
void share_run_id(comm::Communicator& world);
// This rank's "rank_steps" record: its measured step times, host, GPU and telemetry; the report's straggler and
// jitter analysis joins the ranks of one run id.
Record rank_steps_record(const train::TrainSpec& spec, const train::TrainResult& res, bool cuda);

}  // namespace tb::cli
