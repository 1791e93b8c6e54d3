// communicator_mpi_test: the MPI communicator (comm/mpi_comm.h) and the mesh groups (parallel/mesh.h) under
// mpirun (2 and 4 ranks, ctest). Each rank contributes values that depend on its rank, so a collective that
// drops, duplicates or misorders a rank's part gives a wrong sum or order.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "comm/mpi_comm.h"
#include "model/config.h"
#include "parallel/mesh.h"

namespace tb::comm {
namespace {

TEST(MpiCommunicator, WorldMatchesTheLauncher) {
  const World& w = world();
  ASSERT_TRUE(w.mpi) << "run under mpirun";
  auto c = world_communicator();
  EXPECT_EQ(c->rank(), w.rank);
  EXPECT_EQ(c->size(), w.size);
  EXPECT_EQ(c->backend(), "mpi");
  EXPECT_GE(w.local_rank, 0);
  EXPECT_LT(w.local_rank, w.local_size);
}

TEST(MpiCommunicator, Collectives) {
  auto c = world_communicator();
  const int n = c->size(), r = c->rank();
  std::vector<double> v = {1.0 + r, 10.0 * (r + 1), -0.5 * r};
  c->all_reduce(std::span<double>(v));
  EXPECT_DOUBLE_EQ(v[0], n + n * (n - 1) / 2.0);
  EXPECT_DOUBLE_EQ(v[1], 10.0 * n * (n + 1) / 2.0);
  std::vector<float> mx = {float(r), float(-r)};
  c->all_reduce(std::span<float>(mx), ReduceOp::max);
  EXPECT_EQ(mx[0], float(n - 1));
  EXPECT_EQ(mx[1], 0.0f);

  // reduce_scatter: element i of rank r's input = r * 100 + i; rank k receives sum_r (r*100 + k*2 + j), j < 2.
  std::vector<double> in(std::size_t(2 * n)), out(2);
  for (int i = 0; i < 2 * n; ++i) in[std::size_t(i)] = r * 100.0 + i;
  c->reduce_scatter(in.data(), out.data(), 2, DType::f64);
  for (int j = 0; j < 2; ++j) EXPECT_DOUBLE_EQ(out[std::size_t(j)], 100.0 * n * (n - 1) / 2 + n * (2.0 * r + j));

  // all_gather, out of place and in place.
  std::vector<int> mine = {r, r * r}, all(std::size_t(2 * n), -1);
  c->all_gather(mine.data(), all.data(), 2, DType::i32);
  for (int k = 0; k < n; ++k) EXPECT_EQ(all[std::size_t(2 * k + 1)], k * k);
  std::vector<float> inplace(std::size_t(n), -1.0f);
  inplace[std::size_t(r)] = 3.0f * r;
  c->all_gather(inplace.data() + r, inplace.data(), 1, DType::f32);
  for (int k = 0; k < n; ++k) EXPECT_EQ(inplace[std::size_t(k)], 3.0f * k);

  std::vector<std::uint16_t> b(5, std::uint16_t(r == n - 1 ? 7 : 0));
  c->broadcast(b.data(), b.size(), DType::bf16, n - 1);
  EXPECT_EQ(b[4], 7);
}

TEST(MpiCommunicator, RingExchange) {
  auto c = world_communicator();
  const int n = c->size(), r = c->rank();
  std::vector<double> send(1000, double(r)), recv(1000, -1.0);  // large enough that a blocking send could stall
  const P2P ops[] = {{P2P::Kind::send, send.data(), send.size(), (r + 1) % n},
                     {P2P::Kind::recv, recv.data(), recv.size(), (r + n - 1) % n}};
  c->exchange(ops, DType::f64);
  EXPECT_EQ(recv[999], double((r + n - 1) % n));
}

TEST(Mesh, GroupsHoldTheRanksThatDifferInOneCoordinate) {
  auto w = world_communicator();
  const int n = w->size();
  for (const parallel::MeshShape& s :
       {parallel::MeshShape{.dp = n}, parallel::MeshShape{.tp = n}, parallel::MeshShape{.pp = n},
        parallel::MeshShape{.dp = n / 2, .tp = 2}, parallel::MeshShape{.dp = n / 2, .cp = 1, .pp = 2},
        parallel::MeshShape{.cp = n / 2, .tp = 2}}) {
    if (s.world() != n) continue;
    parallel::Mesh mesh(*w, s);
    const parallel::Coord c = mesh.coord();
    EXPECT_EQ(parallel::rank_of(s, c), w->rank());
    auto check = [&](Communicator& g, int size, int my_index, auto vary) {
      EXPECT_EQ(g.size(), size) << s.str();
      EXPECT_EQ(g.rank(), my_index) << s.str();
      std::vector<int> ranks(static_cast<std::size_t>(size));
      const int me = w->rank();
      g.all_gather(&me, ranks.data(), 1, DType::i32);
      for (int k = 0; k < size; ++k) EXPECT_EQ(ranks[std::size_t(k)], parallel::rank_of(s, vary(k))) << s.str();
    };
    check(mesh.tp(), s.tp, c.tp, [&](int k) { return parallel::Coord{c.dp, c.cp, c.pp, k}; });
    check(mesh.pp(), s.pp, c.pp, [&](int k) { return parallel::Coord{c.dp, c.cp, k, c.tp}; });
    check(mesh.cp(), s.cp, c.cp, [&](int k) { return parallel::Coord{c.dp, k, c.pp, c.tp}; });
    check(mesh.dp(), s.dp, c.dp, [&](int k) { return parallel::Coord{k, c.cp, c.pp, c.tp}; });
    check(mesh.dp_cp(), s.dp * s.cp, c.dp * s.cp + c.cp,
          [&](int k) { return parallel::Coord{k / s.cp, k % s.cp, c.pp, c.tp}; });
  }
}

}  // namespace
}  // namespace tb::comm
