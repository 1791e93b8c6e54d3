// comm/mpi.h: MPI for trainbench (minimal for now: errors and launch detection; the multi-process
// bootstrap comes later). MPI functions return a plain int, so callers wrap it to pick this overload:
//   TB_CHECK(tb::MpiStatus{MPI_Barrier(comm)});
// This header does not include <mpi.h>; callers of MPI functions include it themselves.
#pragma once

#include <source_location>

#include "core/error.h"

namespace tb {

struct MpiStatus {
  int code;  // MPI_SUCCESS (0) or an MPI error code
};

inline bool ok(MpiStatus s) { return s.code == 0; }  // MPI_SUCCESS is 0 in every MPI implementation
// Error::Kind::mpi, not fatal; status and text from MPI_Error_string ("MPI_ERR_COMM: invalid communicator").
[[noreturn]] void raise(MpiStatus s, const char* expr, std::source_location where);

// True when this process was started by an MPI launcher: OMPI_COMM_WORLD_SIZE (Open MPI), PMI_SIZE
// (MPICH / Hydra, PMI-1/2), PMIX_RANK (PMIx: srun --mpi=pmix, prterun), or a Slurm job step with more
// than one task (SLURM_STEP_ID set and SLURM_NTASKS > 1).
bool launched_by_mpi();

// Whether MPI is initialized and not yet finalized in this process (MPI calls are allowed).
bool mpi_active();

}  // namespace tb
