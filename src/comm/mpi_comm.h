// comm/mpi_comm.h: the multi-process bootstrap and the MPI communicator (host buffers).
// world(): this process's place in the job. Launched by mpirun / srun --mpi=pmix (comm/mpi.h launched_by_mpi()),
// the first call initializes MPI (MPI_THREAD_FUNNELED) and finalizes it at exit; local ranks come from
// MPI_Comm_split_type(SHARED) (the ranks on this node), which picks the GPU. Without a launcher: rank 0 of 1, no MPI.
#pragma once

#include <memory>

#include "comm/communicator.h"

namespace tb::comm {

struct World {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;  // on this node
  bool mpi = false;
};

const World& world();
// MPI_COMM_WORLD (a duplicate) when launched by MPI, else the one-rank communicator.
std::unique_ptr<Communicator> world_communicator();
// Ends every rank of the job with `code` (MPI_Abort when MPI runs; else std::exit): a failing rank must not leave
// the others waiting in a collective.
[[noreturn]] void abort_job(int code);
// The MPI collectives' watchdog (what NCCL's wait timeout is for GPUs): a collective or transfer of the MPI
// communicator that has not returned after timeout_s (a peer rank stopped, hangs or died) prints which one and on
// which rank, and ends this process with exit 1, so mpirun ends the job instead of waiting forever. Default 600 s.
void set_collective_timeout(double timeout_s);

}  // namespace tb::comm
