// comm/nccl_comm.cpp: NcclCommunicator (comm/nccl_comm.h).
#include "comm/nccl_comm.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <thread>
#include <vector>

#include "comm/mpi.h"
#include "comm/mpi_comm.h"
#include "comm/nccl.h"
#include "core/error.h"

namespace tb::comm {
namespace {

ncclDataType_t nccl_type(DType t, bool reducing) {
  switch (t) {
    case DType::f64: return ncclFloat64;
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
    default:
      TB_REQUIRE(!reducing, fmt::format("NCCL communicator: no reduction on {}", dtype_name(t)));
      return ncclUint8;  // FP8 moved as bytes
  }
}
std::size_t nccl_count(std::size_t count, DType t) {
  return nccl_type(t, false) == ncclUint8 && dtype_size(t) != 1 ? count * dtype_size(t) : count;
}

}  // namespace

NcclCommunicator::NcclCommunicator(ncclComm_t c, int device, cudaStream_t stream)
    : Communicator(0, 1), comm_(c), device_(device), stream_(stream), uncaught_at_start_(std::uncaught_exceptions()) {
  TB_CHECK(ncclCommUserRank(c, &rank_));
  TB_CHECK(ncclCommCount(c, &size_));
  TB_CHECK(cudaMalloc(&scratch_, sizeof(int)));
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::create(Communicator& host, int device, cudaStream_t stream) {
  TB_CHECK(cudaSetDevice(device));
  ncclUniqueId id{};
  if (host.rank() == 0) TB_CHECK(ncclGetUniqueId(&id));
  static_assert(sizeof(id) % sizeof(int) == 0);
  host.broadcast(&id, sizeof(id) / sizeof(int), DType::i32, 0);
  ncclComm_t c = nullptr;
  const ncclResult_t r = ncclCommInitRank(&c, host.size(), id, host.rank());
  if (r != ncclSuccess)
    throw Error(Error::Kind::nccl, true,
                fmt::format("rank {} of {}: NCCL could not create the communicator on GPU {} ({}: {}). Rerun with "
                            "NCCL_DEBUG=WARN; check that every rank sees its own GPU (CUDA_VISIBLE_DEVICES, "
                            "`trainbench info`) {}",
                            host.rank(), host.size(), device, nccl_result_name(r), ncclGetErrorString(r),
                            error_context()),
                ncclGetErrorString(r));
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(c, device, stream));
}

NcclCommunicator::~NcclCommunicator() {
  cudaSetDevice(device_);
  ncclResult_t async = ncclSuccess;
  const bool broken = failed_ || std::uncaught_exceptions() > uncaught_at_start_ ||
                      ncclCommGetAsyncError(comm_, &async) != ncclSuccess ||
                      (async != ncclSuccess && async != ncclInProgress);
  if (comm_) broken ? ncclCommAbort(comm_) : ncclCommDestroy(comm_);
  cudaFree(scratch_);
}

void NcclCommunicator::all_reduce(const void* send, void* recv, std::size_t count, DType t, ReduceOp op) {
  TB_CHECK(ncclAllReduce(send, recv, nccl_count(count, t), nccl_type(t, true), op == ReduceOp::sum ? ncclSum : ncclMax,
                         comm_, stream_));
}
void NcclCommunicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType t) {
  TB_CHECK(ncclReduceScatter(send, recv, recv_count, nccl_type(t, true), ncclSum, comm_, stream_));
}
void NcclCommunicator::all_gather(const void* send, void* recv, std::size_t send_count, DType t) {
  TB_CHECK(ncclAllGather(send, recv, nccl_count(send_count, t), nccl_type(t, false), comm_, stream_));
}
void NcclCommunicator::broadcast(void* buf, std::size_t count, DType t, int root) {
  TB_CHECK(ncclBroadcast(buf, buf, nccl_count(count, t), nccl_type(t, false), root, comm_, stream_));
}
void NcclCommunicator::all_to_all_v(const void* send, std::span<const std::size_t> send_counts, void* recv,
                                    std::span<const std::size_t> recv_counts, DType t) {
  TB_REQUIRE(send_counts.size() == std::size_t(size_) && recv_counts.size() == std::size_t(size_),
             "all_to_all_v: one send and one receive count per rank");
  const std::size_t bytes = dtype_size(t);
  std::vector<P2P> ops;
  std::size_t so = 0, ro = 0;
  for (int r = 0; r < size_; ++r) {
    const std::size_t s = send_counts[std::size_t(r)], n = recv_counts[std::size_t(r)];
    if (s > 0) ops.push_back({P2P::Kind::send, const_cast<char*>(static_cast<const char*>(send)) + so * bytes, s, r});
    if (n > 0) ops.push_back({P2P::Kind::recv, static_cast<char*>(recv) + ro * bytes, n, r});
    so += s, ro += n;
  }
  exchange(ops, t);
}

void NcclCommunicator::exchange(std::span<const P2P> ops, DType t) {
  TB_CHECK(ncclGroupStart());
  ncclResult_t first = ncclSuccess;
  for (const P2P& p : ops) {
    const ncclResult_t r = p.kind == P2P::Kind::send
                               ? ncclSend(p.buf, nccl_count(p.count, t), nccl_type(t, false), p.peer, comm_, stream_)
                               : ncclRecv(p.buf, nccl_count(p.count, t), nccl_type(t, false), p.peer, comm_, stream_);
    if (first == ncclSuccess) first = r;
  }
  const ncclResult_t end = ncclGroupEnd();
  TB_CHECK(first);
  TB_CHECK(end);
}
void NcclCommunicator::barrier() {
  TB_CHECK(ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, stream_));
  synchronize();
}

void NcclCommunicator::fail(const std::string& what) {
  const World& w = world();
  const std::string msg = fmt::format(
      "rank {} of {} (NCCL rank {} of {}, GPU {}): {}; {}. A peer rank may have died or hang: its own message names "
      "it. Rerun with NCCL_DEBUG=WARN {}",
      w.rank, w.size, rank_, size_, device_, what,
      mpi_active() && w.size > 1 ? "the job is aborted" : "the communicator was aborted", error_context());
  if (mpi_active() && w.size > 1) {
    // Kernels on the lost peer may never finish: aborting the communicator or unwinding (destructors that synchronize
    // or destroy communicators) can wait forever, so the whole job ends here (what torch's NCCL watchdog does).
    std::fprintf(stderr, "trainbench: %s\n", msg.c_str());
    std::fflush(stdout);
    std::fflush(stderr);
    abort_job(3);
  }
  ncclCommAbort(comm_);
  comm_ = nullptr;
  failed_ = true;
  throw Error(Error::Kind::nccl, true, msg, what);
}

void NcclCommunicator::wait(cudaStream_t stream, double timeout_s) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  TB_CHECK(cudaSetDevice(device_));
  for (;;) {
    const cudaError_t q = cudaStreamQuery(stream);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) TB_CHECK(q);
    ncclResult_t async = ncclSuccess;
    TB_CHECK(ncclCommGetAsyncError(comm_, &async));
    if (async != ncclSuccess && async != ncclInProgress)
      fail(fmt::format("asynchronous NCCL error {} ({})", nccl_result_name(async), ncclGetErrorString(async)));
    if (std::chrono::duration<double>(clock::now() - start).count() > timeout_s)
      fail(fmt::format("NCCL operations did not finish within {:.0f} s (a hang)", timeout_s));
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key) { return split_nccl(color, key); }

std::unique_ptr<NcclCommunicator> NcclCommunicator::split_nccl(int color, int key) {
  ncclComm_t c = nullptr;
  TB_CHECK(ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &c, nullptr));
  if (color < 0) return nullptr;
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(c, device_, stream_));
}

}  // namespace tb::comm
