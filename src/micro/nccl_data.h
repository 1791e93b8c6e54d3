// micro/nccl_data.h: the data of the nccl suite's checked run. Device kernels fill each rank's send
// buffer with a deterministic pattern and verify each rank's receive buffer against the result the
// collective must produce, computed on the fly from the pattern (no host copy, no expected buffer).
//
// Pattern (small integers, exact in f32 bf16 f16 f64 i32):
//   value(r, j) = h(r, j) mod 9 - 4, in [-4, 4]   (h: a 64-bit mix of rank r and element index j)
//   prod runs:  value(r, j) = 2 if (j + r) mod 16 == 0 else 1   (at most ceil(n/16) twos per element)
// so every partial sum over up to 64 ranks stays within [-256, 256] (exact in bf16's 8-bit significand)
// and every product is at most 2^4. Receive buffers start as -1000 (reached by no result), so an
// element NCCL never wrote is counted.
// Expected element j of rank r's receive buffer (c = count, n = ranks, R = the reduce op over k < n):
//   all_reduce     R_k value(k, j)                 reduce_scatter  R_k value(k, r c + j)
//   all_gather     value(j / c, j mod c)           alltoall        value(j / c, r c + j mod c)
//   broadcast      value(root, j)                  sendrecv        value((r - 1) mod n, j)
//   avg = (sum over k) / n. Tolerance: exact for every integer-valued result; for avg
//   |got - expected| <= 2 * eps(dtype) * n * 4, i.e. eps * n * |x| with |x| the largest |value| (4), since
//   expected may be 0; the 2 covers NCCL rounding its 1/n pre-scale factor to the dtype.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "micro/collectives.h"

namespace tb::comm {
class LocalComms;
}

namespace tb::micro {

struct CollCase {
  Coll coll = Coll::all_reduce;
  DType dtype = DType::f32;
  ReduceOp op = ReduceOp::sum;  // used by all_reduce and reduce_scatter only
  int nranks = 2;
  std::size_t count = 0;        // NCCL's count argument (micro/collectives.h)
  int root = 0;                 // broadcast
  CollCounts counts() const { return coll_counts(coll, count, nranks); }
};

// Asynchronous on `stream`; the stream's device must be current.
void fill_send(const CollCase& c, int rank, void* send, cudaStream_t stream);  // counts().send_count elements
void fill_sentinel(const CollCase& c, void* recv, cudaStream_t stream);        // counts().recv_count elements

struct Mismatches {
  std::uint64_t count = 0;
  std::int64_t first = -1;  // index of the first bad element in the receive buffer; -1 when none
};
// Checks rank's receive buffer; waits for `stream` (the stream's device must be current).
Mismatches verify_recv(const CollCase& c, int rank, const void* recv, cudaStream_t stream);

// Enqueues the collective on every rank of `comms` in one NCCL group (out-of-place: send[r] -> recv[r]).
// alltoall and sendrecv are ncclSend/ncclRecv pairs, as in nccl-tests.
void enqueue(comm::LocalComms& comms, const CollCase& c, std::span<void* const> send, std::span<void* const> recv);

}  // namespace tb::micro
