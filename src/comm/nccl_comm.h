// comm/nccl_comm.h: the Communicator of comm/communicator.h over NCCL, one rank per process and GPU. Buffers are
// device memory on the communicator's GPU; every call is enqueued on stream() (capturable in a CUDA graph) and
// returns at once. Bootstrap: rank 0 of a host communicator (MPI) makes the ncclUniqueId and broadcasts it, every
// rank calls ncclCommInitRank. Failure handling: synchronize() polls the stream and ncclCommGetAsyncError and,
// on an asynchronous error or a timeout (a peer died or hangs), aborts the communicator and raises naming this
// rank and the peer set; the destructor aborts instead of destroying when an exception is unwinding.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>

#include "comm/communicator.h"

namespace tb::comm {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `host`: this rank's GPU `device` and the stream its operations go to.
  static std::unique_ptr<NcclCommunicator> create(Communicator& host, int device, cudaStream_t stream);
  ~NcclCommunicator() override;

  std::string_view backend() const override { return "nccl"; }
  void all_reduce(const void* send, void* recv, std::size_t count, DType t, ReduceOp op = ReduceOp::sum) override;
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType t) override;
  void all_gather(const void* send, void* recv, std::size_t send_count, DType t) override;
  void broadcast(void* buf, std::size_t count, DType t, int root) override;
  // One ncclSend and one ncclRecv per peer with a non-zero count, grouped (what NCCL's all-to-all is).
  void all_to_all_v(const void* send, std::span<const std::size_t> send_counts, void* recv,
                    std::span<const std::size_t> recv_counts, DType t) override;
  void exchange(std::span<const P2P> ops, DType t) override;
  void barrier() override;  // an all-reduce of one int, then synchronize()
  void synchronize(double timeout_s = 600) override { wait(stream_, timeout_s); }
  // Waits for `stream` (e.g. a compute stream that joined this communicator's work) the way synchronize() does.
  void wait(cudaStream_t stream, double timeout_s = 600);
  std::unique_ptr<Communicator> split(int color, int key) override;  // ncclCommSplit; same GPU and stream
  // split() with its NCCL type; a negative color joins no group (NCCL_SPLIT_NOCOLOR) and returns nullptr.
  std::unique_ptr<NcclCommunicator> split_nccl(int color, int key);

  cudaStream_t stream() const { return stream_; }
  void set_stream(cudaStream_t s) { stream_ = s; }
  ncclComm_t get() const { return comm_; }
  int device() const { return device_; }

 private:
  NcclCommunicator(ncclComm_t c, int device, cudaStream_t stream);
  [[noreturn]] void fail(const std::string& what);
  ncclComm_t comm_;
  int device_;
  cudaStream_t stream_;
  int uncaught_at_start_;
  bool failed_ = false;
  void* scratch_ = nullptr;  // one int for barrier()
};

}  // namespace tb::comm
