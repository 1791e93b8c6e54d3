// mesh_test: mesh coordinates round-trip with tp innermost, and every layout problem is reported at once in one
// message before any rank starts work.
#include "parallel/mesh.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "comm/communicator.h"
#include "core/error.h"

namespace tb::parallel {
namespace {

TEST(Mesh, CoordinatesRoundTripWithTpInnermost) {
  const MeshShape s{.dp = 2, .cp = 2, .pp = 3, .tp = 2};
  for (int r = 0; r < s.world(); ++r) EXPECT_EQ(rank_of(s, coord_of(s, r)), r);
  EXPECT_EQ(coord_of(s, 1).tp, 1);
  EXPECT_EQ(coord_of(s, 2).pp, 1);
  EXPECT_EQ(coord_of(s, 6).cp, 1);
  EXPECT_EQ(coord_of(s, 12).dp, 1);
}

TEST(Mesh, ValidLayoutsPass) {
  model::ModelConfig m = model::preset("llama3.1-8b");
  EXPECT_EQ(layout_problems({.dp = 2, .cp = 2, .pp = 2, .tp = 2, .sequence_parallel = true}, m, 16, 1, 8), "");
  EXPECT_NO_THROW(validate_layout({.dp = 8}, m, 8, 1, 8));
}

TEST(Mesh, EveryProblemIsNamed) {
  model::ModelConfig m = model::preset("tiny");
  m.heads = 6, m.kv_heads = 3, m.layers = 3, m.seq = 30;
  const MeshShape s{.dp = 1, .cp = 4, .pp = 2, .tp = 4, .vp = 1, .sequence_parallel = true};
  const std::string p = layout_problems(s, m, 8, 1, 0);
  EXPECT_NE(p.find("32 ranks, but the job has 8"), std::string::npos) << p;
  EXPECT_NE(p.find("heads (6) is not divisible by tp (4)"), std::string::npos) << p;
  EXPECT_NE(p.find("kv_heads (3)"), std::string::npos) << p;
  EXPECT_NE(p.find("layers (3) is not divisible by pp·vp (2)"), std::string::npos) << p;
  EXPECT_NE(p.find("seq (30) is not divisible by 2·cp"), std::string::npos) << p;
  try {
    validate_layout(s, m, 8, 1, 0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::config);
    EXPECT_NE(std::string(e.what()).find("parallel layout dp1 cp4 pp2 tp4 vp1 sp does not fit tiny on 8 ranks"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NE(layout_problems({.dp = 2}, model::preset("tiny"), 2, 1, 3).find("global batch (3)"), std::string::npos);
  EXPECT_NE(layout_problems({.pp = 1, .vp = 2}, model::preset("tiny"), 1, 1, 1).find("needs pp > 1"),
            std::string::npos);
}

// Expert parallel: the expert grid of a stage is its tp·cp·dp ranks as ep x edp (ep inner), and each problem of an
// ep layout has a line of its own.
TEST(Mesh, ExpertGridAndItsProblems) {
  const MeshShape s{.dp = 2, .cp = 2, .pp = 2, .tp = 2, .sequence_parallel = true, .ep = 4};
  EXPECT_EQ(s.edp(), 2);
  EXPECT_EQ(s.str(), "dp2 cp2 pp2 tp2 vp1 sp ep4");
  for (int r = 0; r < s.world(); ++r) {
    const Coord c = coord_of(s, r);
    const int l = (c.dp * s.cp + c.cp) * s.tp + c.tp;  // the stage index: the same for both pp ranks
    EXPECT_EQ(expert_coord_of(s, c).ep, l % 4);
    EXPECT_EQ(expert_coord_of(s, c).edp, l / 4);
  }
  EXPECT_EQ(expert_coord_of(s, {0, 0, 1, 1}).ep, 1);  // tp neighbours are ep neighbours
  EXPECT_EQ(expert_coord_of(s, {1, 0, 0, 0}).edp, 1);

  model::ModelConfig moe = model::preset("tiny");
  moe.moe.experts = 6, moe.moe.top_k = 2;
  EXPECT_EQ(layout_problems({.dp = 2, .ep = 2}, moe, 2, 1, 2), "");
  EXPECT_EQ(layout_problems({.dp = 3, .ep = 3}, moe, 3, 1, 3), "");
  const std::string p = layout_problems({.dp = 2, .tp = 2, .ep = 4}, moe, 4, 1, 2);
  EXPECT_NE(p.find("experts (6) is not divisible by ep (4)"), std::string::npos) << p;
  EXPECT_NE(p.find("expert parallel with tp > 1 needs sequence parallel"), std::string::npos) << p;
  EXPECT_NE(layout_problems({.dp = 3, .ep = 2}, moe, 3, 1, 3).find("ep (2) does not divide the tp·cp·dp = 1·1·3 = 3"),
            std::string::npos);
  EXPECT_NE(layout_problems({.dp = 2, .ep = 2}, model::preset("tiny"), 2, 1, 2)
                .find("expert parallel (ep 2) needs a Mixture-of-Experts model; tiny is dense"),
            std::string::npos);
  EXPECT_NE(layout_problems({.ep = 0}, moe, 1, 1, 1).find("at least 1"), std::string::npos);
  EXPECT_EQ(std::count(p.begin(), p.end(), '\n'), 1) << p;  // two problems, one line each
}

// --share-gpus: on every shape whose groups fit, each one-coordinate group's ranks are on distinct GPUs; shapes that
// do not fit are named.
TEST(Mesh, SharedGpusPutEachGroupOnDistinctGpus) {
  for (int gpus = 1; gpus <= 4; ++gpus)
    for (int dp = 1; dp <= 4; ++dp)
      for (int pp = 1; pp <= 4; ++pp)
        for (int tp = 1; tp <= 4; ++tp)
          for (int cp = 1; cp <= 2; ++cp) {
            const MeshShape s{.dp = dp, .cp = cp, .pp = pp, .tp = tp};
            const bool fits = dp <= gpus && pp <= gpus && tp <= gpus && cp <= gpus && !(dp > 1 && cp > 1);
            EXPECT_EQ(shared_gpu_problems(s, gpus).empty(), fits) << s.str() << " on " << gpus;
            if (!fits) continue;
            // group id (the coordinates held fixed) -> the GPUs of its ranks
            std::map<std::pair<int, int>, std::set<int>> groups;
            std::map<std::pair<int, int>, int> members;
            for (int r = 0; r < s.world(); ++r) {
              const Coord c = coord_of(s, r);
              const int g = shared_gpu(c, gpus);
              ASSERT_GE(g, 0);
              ASSERT_LT(g, gpus);
              const int keys[] = {rank_of(s, {c.dp, c.cp, c.pp, 0}), rank_of(s, {c.dp, c.cp, 0, c.tp}),
                                  rank_of(s, {c.dp, 0, c.pp, c.tp}), rank_of(s, {0, c.cp, c.pp, c.tp})};
              for (int dim = 0; dim < 4; ++dim) {
                groups[{dim, keys[dim]}].insert(g);
                ++members[{dim, keys[dim]}];
              }
            }
            for (const auto& [key, gs] : groups)
              EXPECT_EQ(int(gs.size()), members[key]) << s.str() << " on " << gpus << ": group " << key.first;
          }
  const std::string p = shared_gpu_problems({.dp = 2, .cp = 2, .tp = 4}, 2);
  EXPECT_NE(p.find("tp (4) is above the GPU count (2)"), std::string::npos) << p;
  EXPECT_NE(p.find("dp x cp shares one optimizer group of 4 ranks"), std::string::npos) << p;
}

TEST(SelfCommunicator, CopiesAndExchangesWithItself) {
  auto c = comm::make_self_communicator();
  EXPECT_EQ(c->size(), 1);
  std::vector<float> a = {1, 2}, b(2);
  c->all_gather(a.data(), b.data(), 2, DType::f32);
  EXPECT_EQ(b, a);
  std::vector<float> r(2);
  const comm::P2P ops[] = {{comm::P2P::Kind::send, a.data(), 2, 0}, {comm::P2P::Kind::recv, r.data(), 2, 0}};
  c->exchange(ops, DType::f32);
  EXPECT_EQ(r, a);
  EXPECT_THROW(c->broadcast(a.data(), 2, DType::f32, 1), Error);
  std::vector<float> t(2);
  const std::size_t two[] = {2}, one[] = {1};
  c->all_to_all_v(std::span<const float>(a), two, std::span<float>(t), two);
  EXPECT_EQ(t, a);
  EXPECT_THROW(c->all_to_all_v(std::span<const float>(a), two, std::span<float>(t), one), Error);
}

}  // namespace
}  // namespace tb::parallel
