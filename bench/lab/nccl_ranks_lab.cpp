// nccl_ranks_lab: NCCL bandwidth between ranks of an MPI job through comm/nccl_comm.h (one process per GPU, as
// `train --gpus N` runs), for the data-parallel step's shapes: in-place bf16 all-gather and fp32 reduce-scatter of
// 0.25-2 GiB, alone and on a high-priority stream. nccl-tests' formulas: algbw = bytes / t (bytes: the full
// buffer), busbw = algbw (n - 1) / n. Usage: mpirun -np 2 nccl_ranks_lab
#include <cuda_runtime_api.h>

#include <cstdio>
#include <vector>

#include "comm/mpi_comm.h"
#include "comm/nccl_comm.h"
#include "core/error.h"

int main() {
  using namespace tb;
  const comm::World& w = comm::world();
  auto host = comm::world_communicator();
  TB_CHECK(cudaSetDevice(w.local_rank));
  int lo = 0, hi = 0;
  TB_CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  for (int priority : {lo, hi}) {
    cudaStream_t s = nullptr;
    TB_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority));
    auto nccl = comm::NcclCommunicator::create(*host, w.local_rank, s);
    const int n = nccl->size();
    for (std::size_t mib : {256, 1024, 2048}) {
      const std::size_t bytes = mib << 20;
      void* buf = nullptr;
      TB_CHECK(cudaMalloc(&buf, bytes));
      TB_CHECK(cudaMemset(buf, 0, bytes));
      void* out = nullptr;
      TB_CHECK(cudaMalloc(&out, bytes / std::size_t(n)));
      cudaEvent_t e0, e1;
      TB_CHECK(cudaEventCreate(&e0));
      TB_CHECK(cudaEventCreate(&e1));
      for (int op = 0; op < 2; ++op) {
        auto run = [&] {
          if (op == 0) {
            const std::size_t count = bytes / 2 / std::size_t(n);
            auto* b = static_cast<std::uint16_t*>(buf);
            nccl->all_gather(b + std::size_t(nccl->rank()) * count, b, count, DType::bf16);
          } else {
            nccl->reduce_scatter(buf, out, bytes / 4 / std::size_t(n), DType::f32);
          }
        };
        for (int i = 0; i < 3; ++i) run();
        TB_CHECK(cudaEventRecord(e0, s));
        const int reps = 10;
        for (int i = 0; i < reps; ++i) run();
        TB_CHECK(cudaEventRecord(e1, s));
        nccl->synchronize();
        float ms = 0;
        TB_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        const double t = ms / 1e3 / reps, alg = double(bytes) / t / 1e9;
        if (w.rank == 0)
          std::printf("%-14s %5zu MiB  priority %2d  %8.3f ms  algbw %6.1f GB/s  busbw %6.1f GB/s\n",
                      op == 0 ? "all_gather" : "reduce_scatter", mib, priority, t * 1e3, alg, alg * (n - 1) / n);
      }
      cudaFree(buf);
      cudaFree(out);
    }
    nccl.reset();
    cudaStreamDestroy(s);
  }
  return 0;
}
