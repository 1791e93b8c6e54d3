// nccl_multigpu_test: every collective through LocalComms + micro/nccl_data on all visible GPUs (2+):
// the device-side verification finds 0 wrong elements for f32 and bf16 at small sizes (odd counts too),
// every reduce op of all_reduce; and it is able to fail: one corrupted element counts exactly once, and a
// receive buffer NCCL never wrote counts every element.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/nccl.h"
#include "core/dtype.h"
#include "micro/collectives.h"
#include "micro/nccl_data.h"

namespace tb::micro {
namespace {

int gpu_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

// One send and one receive buffer per rank.
struct Buffers {
  const comm::LocalComms& comms;
  std::vector<void*> send, recv;
  Buffers(const comm::LocalComms& c, const CollCase& cc) : comms(c), send(c.size()), recv(c.size()) {
    const std::size_t elem = dtype_size(cc.dtype);
    for (int r = 0; r < c.size(); ++r) {
      TB_CHECK(cudaSetDevice(c.device(r)));
      TB_CHECK(cudaMalloc(&send[r], cc.counts().send_count * elem));
      TB_CHECK(cudaMalloc(&recv[r], cc.counts().recv_count * elem));
    }
  }
  ~Buffers() {
    for (int r = 0; r < comms.size(); ++r) {
      cudaSetDevice(comms.device(r));
      cudaFree(send[r]);
      cudaFree(recv[r]);
    }
  }
};

class NcclData : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const int n = gpu_count();
    if (n < 2) return;
    std::vector<int> devices(n);
    for (int i = 0; i < n; ++i) devices[i] = i;
    comms_ = std::make_unique<comm::LocalComms>(devices);
  }
  static void TearDownTestSuite() { comms_.reset(); }
  void SetUp() override {
    if (!comms_) GTEST_SKIP() << "needs 2 or more GPUs; " << gpu_count() << " visible";
  }

  CollCase make(Coll coll, DType t, std::size_t count, ReduceOp op = ReduceOp::sum) const {
    return CollCase{coll, t, op, comms_->size(), count, 0};
  }
  // Fills, optionally runs the collective, synchronizes; returns the buffers for verification.
  std::unique_ptr<Buffers> run(const CollCase& c, bool launch = true) const {
    auto buf = std::make_unique<Buffers>(*comms_, c);
    for (int r = 0; r < comms_->size(); ++r) {
      TB_CHECK(cudaSetDevice(comms_->device(r)));
      fill_send(c, r, buf->send[r], comms_->stream(r));
      fill_sentinel(c, buf->recv[r], comms_->stream(r));
    }
    if (launch) enqueue(*comms_, c, buf->send, buf->recv);
    comms_->synchronize(60);
    return buf;
  }
  Mismatches verify(const CollCase& c, const Buffers& buf, int rank) const {
    TB_CHECK(cudaSetDevice(comms_->device(rank)));
    return verify_recv(c, rank, buf.recv[rank], comms_->stream(rank));
  }

  static std::unique_ptr<comm::LocalComms> comms_;
};
std::unique_ptr<comm::LocalComms> NcclData::comms_;

TEST_F(NcclData, EveryCollectiveIsExact) {
  const std::size_t counts[] = {1, 7, 1001, 65536 + 3};
  for (const auto& info : collectives()) {
    std::vector<ReduceOp> ops = {ReduceOp::sum};
    if (info.coll == Coll::all_reduce) ops = {ReduceOp::sum, ReduceOp::prod, ReduceOp::max, ReduceOp::min, ReduceOp::avg};
    if (info.coll == Coll::reduce_scatter) ops = {ReduceOp::sum, ReduceOp::max, ReduceOp::avg};
    for (DType t : {DType::f32, DType::bf16})
      for (ReduceOp op : ops)
        for (std::size_t count : counts) {
          const CollCase c = make(info.coll, t, count, op);
          SCOPED_TRACE(std::string(info.name) + " " + std::string(dtype_name(t)) + " " +
                       std::string(reduce_op_name(op)) + " count " + std::to_string(count));
          const auto buf = run(c);
          for (int r = 0; r < comms_->size(); ++r) {
            const Mismatches m = verify(c, *buf, r);
            EXPECT_EQ(m.count, 0u) << "rank " << r << " first bad element " << m.first;
            EXPECT_EQ(m.first, -1);
          }
        }
  }
}

TEST_F(NcclData, OtherDtypesAreExact) {
  for (DType t : {DType::f16, DType::f64, DType::i32})
    for (Coll coll : {Coll::all_reduce, Coll::all_gather, Coll::alltoall}) {
      const CollCase c = make(coll, t, 4099);
      SCOPED_TRACE(std::string(coll_name(coll)) + " " + std::string(dtype_name(t)));
      const auto buf = run(c);
      for (int r = 0; r < comms_->size(); ++r) EXPECT_EQ(verify(c, *buf, r).count, 0u) << "rank " << r;
    }
}

// The check must be able to fail: one element overwritten after the collective counts exactly once.
TEST_F(NcclData, OneCorruptedElementCountsOnce) {
  for (DType t : {DType::f32, DType::bf16})
    for (Coll coll : {Coll::all_reduce, Coll::all_gather, Coll::sendrecv}) {
      const CollCase c = make(coll, t, 1001);
      SCOPED_TRACE(std::string(coll_name(coll)) + " " + std::string(dtype_name(t)));
      const auto buf = run(c);
      const int rank = 1;
      const std::size_t index = 123;
      unsigned char bytes[8] = {};
      store_from_double(t, bytes, 0, 1000.0);  // no collective produces 1000
      TB_CHECK(cudaSetDevice(comms_->device(rank)));
      TB_CHECK(cudaMemcpy(static_cast<char*>(buf->recv[rank]) + index * dtype_size(t), bytes, dtype_size(t),
                          cudaMemcpyHostToDevice));
      for (int r = 0; r < comms_->size(); ++r) {
        const Mismatches m = verify(c, *buf, r);
        EXPECT_EQ(m.count, r == rank ? 1u : 0u) << "rank " << r;
        EXPECT_EQ(m.first, r == rank ? std::int64_t(index) : -1) << "rank " << r;
      }
    }
}

// A receive buffer the collective never wrote holds the sentinel: every element is wrong.
TEST_F(NcclData, UnwrittenReceiveBufferIsAllWrong) {
  const CollCase c = make(Coll::reduce_scatter, DType::f32, 777);
  const auto buf = run(c, /*launch=*/false);
  for (int r = 0; r < comms_->size(); ++r) {
    const Mismatches m = verify(c, *buf, r);
    EXPECT_EQ(m.count, c.counts().recv_count) << "rank " << r;
    EXPECT_EQ(m.first, 0) << "rank " << r;
  }
}

TEST(NcclVersion, IsTheLoadedLibrary) {
  const std::string v = nccl_version();
  EXPECT_EQ(v.rfind("2.", 0), 0u) << v;
}

}  // namespace
}  // namespace tb::micro
