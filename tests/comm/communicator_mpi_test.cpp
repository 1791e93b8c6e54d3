// communicator_mpi_test: the MPI communicator (comm/mpi_comm.h) and the mesh groups (parallel/mesh.h) under
// mpirun (2 and 4 ranks, ctest). Each rank contributes values that depend on its rank, so a collective that
// drops, duplicates or misorders a rank's part gives a wrong sum or order.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "comm/mpi_comm.h"
#include "core/error.h"
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

// The elements rank `from` sends rank `to` in round `round`: a random count in [0, 4), 0 for a third of the pairs.
std::size_t a2a_count(int from, int to, int round) {
  std::mt19937 g(std::uint32_t(round * 7919 + from * 131 + to));
  return (from + 2 * to + round) % 3 == 0 ? 0 : std::size_t(g() % 4);
}

// all_to_all_v with random counts (zeros included), on the world and on its halves: every received block holds
// the values its sender addressed to this rank, in order (value = sender·1000 + receiver·100 + index).
TEST(MpiCommunicator, AllToAllVMovesEachBlockToItsRank) {
  auto world = world_communicator();
  for (int half = 0; half < 2; ++half) {
    auto c = half == 0 ? world_communicator() : world->split(world->rank() % 2, world->rank());
    const int n = c->size(), r = c->rank();
    for (int round = 0; round < 5; ++round) {
      std::vector<std::size_t> sc(static_cast<std::size_t>(n)), rc(static_cast<std::size_t>(n));
      std::vector<double> send;
      for (int to = 0; to < n; ++to) {
        sc[std::size_t(to)] = a2a_count(r, to, round);
        for (std::size_t j = 0; j < sc[std::size_t(to)]; ++j) send.push_back(r * 1000.0 + to * 100.0 + double(j));
      }
      for (int from = 0; from < n; ++from) rc[std::size_t(from)] = a2a_count(from, r, round);
      std::vector<double> recv(std::accumulate(rc.begin(), rc.end(), std::size_t(0)), -1.0);
      c->all_to_all_v(std::span<const double>(send), sc, std::span<double>(recv), rc);
      std::vector<int> as_int(recv.size(), -1);  // the same through the byte path (i32 moves as MPI_INT; bf16 bytes)
      std::vector<int> send_int(send.begin(), send.end());
      c->all_to_all_v(std::span<const int>(send_int), sc, std::span<int>(as_int), rc);
      std::vector<std::uint16_t> send16(send.size()), recv16(recv.size(), 0xffff);
      for (std::size_t i = 0; i < send.size(); ++i) send16[i] = std::uint16_t(send_int[i]);
      c->all_to_all_v(send16.data(), sc, recv16.data(), rc, DType::bf16);
      std::size_t at = 0;
      for (int from = 0; from < n; ++from)
        for (std::size_t j = 0; j < rc[std::size_t(from)]; ++j, ++at) {
          const double want = from * 1000.0 + r * 100.0 + double(j);
          EXPECT_EQ(recv[at], want) << "from " << from << " round " << round << " half " << half;
          EXPECT_EQ(as_int[at], int(want));
          EXPECT_EQ(recv16[at], std::uint16_t(int(want)));
        }
    }
    // counts that do not fit the buffers, or one count short: raised before any transfer (on every rank alike)
    std::vector<double> one(1);
    std::vector<std::size_t> two(static_cast<std::size_t>(n), 2), short_counts(static_cast<std::size_t>(n) - 1, 0);
    EXPECT_THROW(c->all_to_all_v(std::span<const double>(one), two, std::span<double>(one), two), Error);
    EXPECT_THROW(c->all_to_all_v(std::span<const double>(one), short_counts, std::span<double>(one), two), Error);
  }
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

// The expert grid (parallel/mesh.h): stage index l = (dp·cp + cp_i)·tp + tp_i; ep group = l / ep equal (ep
// consecutive stage indices), edp group = l mod ep equal; both inside one pipeline stage.
TEST(Mesh, ExpertGroupsSplitEachStageAsEpTimesEdp) {
  auto w = world_communicator();
  const int n = w->size();
  using parallel::MeshShape;
  for (const MeshShape& s : {MeshShape{.dp = n, .ep = n}, MeshShape{.dp = n, .ep = 2},
                             MeshShape{.tp = n, .sequence_parallel = true, .ep = n},
                             MeshShape{.dp = n / 2, .tp = 2, .sequence_parallel = true, .ep = 2},
                             MeshShape{.dp = n / 2, .tp = 2, .sequence_parallel = true, .ep = n},
                             MeshShape{.cp = n / 2, .pp = 2, .ep = n / 2}, MeshShape{.dp = n / 2, .pp = 2, .ep = 1}}) {
    if (s.world() != n || s.stage_ranks() % s.ep != 0) continue;
    parallel::Mesh mesh(*w, s);
    const parallel::Coord c = mesh.coord();
    const int l = (c.dp * s.cp + c.cp) * s.tp + c.tp;
    EXPECT_EQ(mesh.expert_coord().ep, l % s.ep) << s.str();
    EXPECT_EQ(mesh.expert_coord().edp, l / s.ep) << s.str();
    auto rank_at = [&](int stage_index) {  // the world rank of stage index `stage_index` in this rank's stage
      const int tp = stage_index % s.tp, cp = stage_index / s.tp % s.cp, dp = stage_index / (s.tp * s.cp);
      return parallel::rank_of(s, {dp, cp, c.pp, tp});
    };
    auto check = [&](Communicator& g, int size, int my_index, auto stage_index_of) {
      ASSERT_EQ(g.size(), size) << s.str();
      EXPECT_EQ(g.rank(), my_index) << s.str();
      std::vector<int> ranks(static_cast<std::size_t>(size));
      const int me = w->rank();
      g.all_gather(&me, ranks.data(), 1, DType::i32);
      for (int k = 0; k < size; ++k) EXPECT_EQ(ranks[std::size_t(k)], rank_at(stage_index_of(k))) << s.str();
    };
    check(mesh.ep(), s.ep, l % s.ep, [&](int k) { return l / s.ep * s.ep + k; });
    check(mesh.edp(), s.edp(), l / s.ep, [&](int k) { return k * s.ep + l % s.ep; });
  }
}

}  // namespace
}  // namespace tb::comm
