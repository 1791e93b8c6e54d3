// comm/communicator.h: the collectives and point-to-point transfers the parallel layouts need, behind one
// interface with three implementations: MPI on host buffers (the CPU backend and its tests, comm/mpi_comm.h),
// NCCL on device buffers enqueued on a CUDA stream (comm/nccl_comm.h), and the one-rank communicator below.
// Semantics (n = size(), counts in elements of dtype t, sums in t's precision):
//   all_reduce      recv[i]                  = op_r send_r[i]                         (send == recv: in place)
//   reduce_scatter  recv[i]  (recv_count)    = sum_r send_r[rank * recv_count + i]
//   all_gather      recv[r * send_count + i] = send_r[i]
//   broadcast       buf                      = buf_root
//   all_to_all_v    block r of recv (recv_counts[r] elements) = block `rank` of send_r (send_r's send_counts[rank]);
//                   blocks packed back to back in rank order (displacement = sum of the earlier counts); counts may be
//                   0, and recv_counts[r] must equal rank r's send_counts[rank] (what an exchange of counts gives)
//   exchange        every send and receive of the list issued together (no order-induced deadlock)
// MPI calls complete before returning; NCCL calls are enqueued on the communicator's stream (synchronize()).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "core/dtype.h"

namespace tb::comm {

enum class ReduceOp { sum, max };

struct P2P {
  enum class Kind { send, recv } kind;
  void* buf;
  std::size_t count;
  int peer;  // rank in this communicator
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string_view backend() const = 0;  // "mpi" | "nccl" | "self"

  virtual void all_reduce(const void* send, void* recv, std::size_t count, DType t, ReduceOp op = ReduceOp::sum) = 0;
  virtual void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType t) = 0;
  virtual void all_gather(const void* send, void* recv, std::size_t send_count, DType t) = 0;
  virtual void broadcast(void* buf, std::size_t count, DType t, int root) = 0;
  virtual void all_to_all_v(const void* send, std::span<const std::size_t> send_counts, void* recv,
                            std::span<const std::size_t> recv_counts, DType t) = 0;
  virtual void exchange(std::span<const P2P> ops, DType t) = 0;
  virtual void barrier() = 0;
  // Waits for what was enqueued (NCCL: the stream; raises naming the rank on an asynchronous error or after
  // timeout_s, aborting the communicator). MPI and self: nothing to wait for.
  virtual void synchronize(double timeout_s = 600) { (void)timeout_s; }
  // The ranks passing the same color, ordered by key; collective over this communicator. (NCCL's split_nccl also
  // takes a negative color: that rank joins no group and gets nullptr.)
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  // Typed conveniences (host or device spans, as the backend wants).
  template <class T>
  void all_reduce(std::span<T> buf, ReduceOp op = ReduceOp::sum) {
    all_reduce(buf.data(), buf.data(), buf.size(), dtype_of<T>(), op);
  }
  template <class T>
  void all_to_all_v(std::span<const T> send, std::span<const std::size_t> send_counts, std::span<T> recv,
                    std::span<const std::size_t> recv_counts) {
    check_all_to_all(send.size(), send_counts, recv.size(), recv_counts);
    all_to_all_v(send.data(), send_counts, recv.data(), recv_counts, dtype_of<T>());
  }
  template <class T>
  void send(std::span<const T> buf, int peer) {
    const P2P p{P2P::Kind::send, const_cast<T*>(buf.data()), buf.size(), peer};
    exchange({&p, 1}, dtype_of<T>());
  }
  template <class T>
  void recv(std::span<T> buf, int peer) {
    const P2P p{P2P::Kind::recv, buf.data(), buf.size(), peer};
    exchange({&p, 1}, dtype_of<T>());
  }

  // TB_REQUIRE: one count per rank on both sides, and the buffers hold the sums of their counts.
  void check_all_to_all(std::size_t send_size, std::span<const std::size_t> send_counts, std::size_t recv_size,
                        std::span<const std::size_t> recv_counts) const;

  // Host only: the root's text on every rank (its length, then its bytes packed in int32 words); collective.
  std::string broadcast_text(const std::string& text, int root);

 protected:
  Communicator(int rank, int size) : rank_(rank), size_(size) {}
  int rank_, size_;
};

// A communicator of one rank over host memory: every collective is a copy (or nothing in place); exchange with
// itself copies each send into the matching receive. What single-process runs use.
std::unique_ptr<Communicator> make_self_communicator();

}  // namespace tb::comm
