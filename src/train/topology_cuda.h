// train/topology_cuda.h: where a CUDA training rank sits and whom it talks to. From the job's ranks and the spec's
// tp x pp x cp (dp the rest, parallel/mesh.h): this rank's mesh coordinates and NCCL communicators:
//   one rank:             none
//   dp, cp, dp x cp:      one over the world (the groups' operations run on it; context parallel splits its own)
//   a mix with tp or pp:  one per group (tp, pp, cp, and dp x cp for the distributed optimizer), none over the world
//   tied embeddings over pipeline stages: one over pipeline ranks 0 and pp - 1 (the two copies' gradient sum)
// Creation is collective: every rank builds its topology at the same point, in the same order.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "comm/communicator.h"
#include "comm/mpi_comm.h"
#include "comm/nccl_comm.h"
#include "parallel/mesh.h"

namespace tb::train {

struct TopologyCuda {
  comm::World world;
  parallel::MeshShape mesh;
  parallel::Coord place;  // this rank's coordinates
  bool mix = false;       // tensor or pipeline parallel among the groups: one communicator per group
  int zero_ranks = 1, zero_rank = 0;  // the distributed optimizer's group (dp x cp) and this rank's place in it

  std::unique_ptr<comm::Communicator> host_world;  // MPI, several ranks only
  std::unique_ptr<parallel::Mesh> host_mesh;       // a mix: the host groups the NCCL ones are built from
  std::unique_ptr<comm::NcclCommunicator> nccl, tp_nccl, pp_nccl, cp_nccl, dp_nccl, tied;
  // Each group's communicator (used only where the group has several ranks): its own, or the world's; `waiter` the one
  // whose completion ends a step (null on one rank).
  comm::NcclCommunicator *tp = nullptr, *pp = nullptr, *dp = nullptr, *waiter = nullptr;

  TopologyCuda(const comm::World& world, const parallel::MeshShape& mesh, int gpu, cudaStream_t stream,
               bool tied_embeddings);
};

}  // namespace tb::train
