// comm/mpi_comm.cpp: world() bootstrap and the MPI communicator (comm/mpi_comm.h). Reductions on f64, f32 and
// i32 (MPI has no bfloat16 sum); gathers, broadcasts and transfers move any dtype as bytes.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include "comm/mpi_comm.h"

#include <mpi.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include "comm/mpi.h"
#include "core/error.h"

namespace tb::comm {
namespace {

MPI_Datatype mpi_type(DType t, bool reducing) {
  switch (t) {
    case DType::f64: return MPI_DOUBLE;
    case DType::f32: return MPI_FLOAT;
    case DType::i32: return MPI_INT;
    default:
      TB_REQUIRE(!reducing, "MPI communicator: reductions support f64, f32 and i32 only, not " +
                                std::string(dtype_name(t)));
      return MPI_BYTE;
  }
}
int mpi_count(std::size_t count, DType t) {
  const std::size_t n = mpi_type(t, false) == MPI_BYTE ? count * dtype_size(t) : count;
  TB_REQUIRE(n <= std::size_t(std::numeric_limits<int>::max()), "MPI communicator: message over 2^31 elements");
  return int(n);
}

// The watchdog: one thread, started with the first MPI collective, polls what the main thread is waiting in.
std::atomic<double> g_timeout_s{600};
std::atomic<std::int64_t> g_waiting_since_ms{0};  // steady clock; 0: not in a collective
std::atomic<const char*> g_waiting_in{""};

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void watchdog() {
  while (true) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const std::int64_t since = g_waiting_since_ms.load();
    const double limit = g_timeout_s.load();
    if (since == 0 || double(now_ms() - since) < limit * 1e3) continue;
    std::fprintf(stderr, "trainbench: rank %d: MPI %s did not finish within %.0f s (a peer rank stopped, hangs or "
                 "died; --comm-timeout): ending the job\n",
                 world().rank, g_waiting_in.load(), limit);
    std::fflush(stderr);
    std::fflush(stdout);
    _exit(1);  // mpirun ends the other ranks when one exits without MPI_Finalize
  }
}

// Marks the calling collective as waited in while it lives.
class Watched {
 public:
  explicit Watched(const char* what) {
    static std::once_flag started;
    std::call_once(started, [] { std::thread(watchdog).detach(); });
    g_waiting_in.store(what);
    g_waiting_since_ms.store(now_ms());
  }
  ~Watched() { g_waiting_since_ms.store(0); }
  Watched(const Watched&) = delete;
  Watched& operator=(const Watched&) = delete;
};

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm c) : Communicator(rank_of(c), size_of(c)), comm_(c) {}
  ~MpiCommunicator() override {
    if (mpi_active()) MPI_Comm_free(&comm_);
  }
  std::string_view backend() const override { return "mpi"; }

  void all_reduce(const void* send, void* recv, std::size_t count, DType t, ReduceOp op) override {
    const Watched watched("all_reduce");
    TB_CHECK(MpiStatus{MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, mpi_count(count, t),
                                     mpi_type(t, true), op == ReduceOp::sum ? MPI_SUM : MPI_MAX, comm_)});
  }
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType t) override {
    const Watched watched("reduce_scatter");
    TB_CHECK(MpiStatus{MPI_Reduce_scatter_block(send, recv, mpi_count(recv_count, t), mpi_type(t, true), MPI_SUM,
                                                comm_)});
  }
  void all_gather(const void* send, void* recv, std::size_t send_count, DType t) override {
    const int n = mpi_count(send_count, t);
    const bool in_place = send == static_cast<const char*>(recv) + std::size_t(rank_) * send_count * dtype_size(t);
    const Watched watched("all_gather");
    TB_CHECK(MpiStatus{MPI_Allgather(in_place ? MPI_IN_PLACE : send, n, mpi_type(t, false), recv, n,
                                     mpi_type(t, false), comm_)});
  }
  void broadcast(void* buf, std::size_t count, DType t, int root) override {
    const Watched watched("broadcast");
    TB_CHECK(MpiStatus{MPI_Bcast(buf, mpi_count(count, t), mpi_type(t, false), root, comm_)});
  }
  // MPI_Alltoallv: counts and displacements in MPI elements (bytes for the types moved as bytes).
  void all_to_all_v(const void* send, std::span<const std::size_t> send_counts, void* recv,
                    std::span<const std::size_t> recv_counts, DType t) override {
    TB_REQUIRE(send_counts.size() == std::size_t(size_) && recv_counts.size() == std::size_t(size_),
               "all_to_all_v: one send and one receive count per rank");
    const auto n = std::size_t(size_);
    std::vector<int> sc(n), sd(n), rc(n), rd(n);
    std::size_t so = 0, ro = 0;
    for (std::size_t r = 0; r < n; ++r) {
      sc[r] = mpi_count(send_counts[r], t), sd[r] = mpi_count(so, t), so += send_counts[r];
      rc[r] = mpi_count(recv_counts[r], t), rd[r] = mpi_count(ro, t), ro += recv_counts[r];
    }
    const MPI_Datatype dt = mpi_type(t, false);
    const Watched watched("all_to_all_v");
    TB_CHECK(MpiStatus{MPI_Alltoallv(send, sc.data(), sd.data(), dt, recv, rc.data(), rd.data(), dt, comm_)});
  }
  void exchange(std::span<const P2P> ops, DType t) override {
    std::vector<MPI_Request> reqs(ops.size());
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const P2P& p = ops[i];
      TB_REQUIRE(p.peer >= 0 && p.peer < size_, "exchange: peer rank out of range");
      if (p.kind == P2P::Kind::send)
        TB_CHECK(MpiStatus{MPI_Isend(p.buf, mpi_count(p.count, t), mpi_type(t, false), p.peer, 0, comm_, &reqs[i])});
      else
        TB_CHECK(MpiStatus{MPI_Irecv(p.buf, mpi_count(p.count, t), mpi_type(t, false), p.peer, 0, comm_, &reqs[i])});
    }
    const Watched watched("exchange");
    TB_CHECK(MpiStatus{MPI_Waitall(int(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE)});
  }
  void barrier() override {
    const Watched watched("barrier");
    TB_CHECK(MpiStatus{MPI_Barrier(comm_)});
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm c = MPI_COMM_NULL;
    TB_CHECK(MpiStatus{MPI_Comm_split(comm_, color, key, &c)});
    return std::make_unique<MpiCommunicator>(c);
  }

 private:
  static int rank_of(MPI_Comm c) {
    int r = 0;
    MPI_Comm_rank(c, &r);
    return r;
  }
  static int size_of(MPI_Comm c) {
    int s = 0;
    MPI_Comm_size(c, &s);
    return s;
  }
  MPI_Comm comm_;
};

World init_world() {
  World w;
  if (!launched_by_mpi()) return w;
  int initialized = 0, provided = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    TB_CHECK(MpiStatus{MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided)});
    std::atexit([] {
      if (mpi_active()) MPI_Finalize();
    });
  }
  // Errors come back as codes (TB_CHECK raises with the text) instead of aborting inside MPI.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  w.mpi = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.size);
  MPI_Comm node = MPI_COMM_NULL;
  TB_CHECK(MpiStatus{MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w.rank, MPI_INFO_NULL, &node)});
  MPI_Comm_rank(node, &w.local_rank);
  MPI_Comm_size(node, &w.local_size);
  MPI_Comm_free(&node);
  set_error_rank(w.rank);  // error messages say "[host h rank r ...]"
  return w;
}

}  // namespace

const World& world() {
  static const World w = init_world();
  return w;
}

std::unique_ptr<Communicator> world_communicator() {
  if (!world().mpi) return make_self_communicator();
  MPI_Comm c = MPI_COMM_NULL;
  TB_CHECK(MpiStatus{MPI_Comm_dup(MPI_COMM_WORLD, &c)});
  return std::make_unique<MpiCommunicator>(c);
}

void abort_job(int code) {
  if (mpi_active()) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

void set_collective_timeout(double timeout_s) { g_timeout_s.store(timeout_s); }

}  // namespace tb::comm
