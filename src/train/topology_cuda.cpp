// train/topology_cuda.cpp: the rank's mesh place and NCCL communicators (train/topology_cuda.h).
#include "train/topology_cuda.h"

#include "train/trainer.h"

namespace tb::train {

TopologyCuda::TopologyCuda(const comm::World& w, const parallel::MeshShape& m, int gpu, cudaStream_t st,
                           bool tied_embeddings)
    : world(w), mesh(m), place(parallel::coord_of(m, w.rank)), mix(is_group_mix(m)) {
  zero_ranks = mesh.dp * mesh.cp, zero_rank = place.dp * mesh.cp + place.cp;
  if (world.size > 1) {
    host_world = comm::world_communicator();
    if (mix) {
      host_mesh = std::make_unique<parallel::Mesh>(*host_world, mesh);
      if (mesh.tp > 1) tp_nccl = comm::NcclCommunicator::create(host_mesh->tp(), gpu, st);
      if (mesh.pp > 1) pp_nccl = comm::NcclCommunicator::create(host_mesh->pp(), gpu, st);
      if (mesh.cp > 1) cp_nccl = comm::NcclCommunicator::create(host_mesh->cp(), gpu, st);
      if (zero_ranks > 1) dp_nccl = comm::NcclCommunicator::create(host_mesh->dp_cp(), gpu, st);
    } else {
      nccl = comm::NcclCommunicator::create(*host_world, gpu, st);
    }
  }
  tp = tp_nccl ? tp_nccl.get() : nccl.get();
  pp = pp_nccl ? pp_nccl.get() : nccl.get();
  dp = dp_nccl ? dp_nccl.get() : nccl.get();
  waiter = nccl ? nccl.get() : tp_nccl ? tp_nccl.get() : pp_nccl.get();
  // Tied embeddings over pipeline stages: ncclCommSplit over the pipeline group, every pp rank taking part.
  if (mesh.pp > 1 && tied_embeddings) {
    const int r = place.pp;
    tied = pp->split_nccl(r == 0 || r == mesh.pp - 1 ? 0 : -1, r);
    if (tied) tied->set_stream(st);
  }
}

}  // namespace tb::train
