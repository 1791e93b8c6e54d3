// pipeline_schedule_test: the 1F1B and interleaved schedules (parallel/pipeline_schedule.h) for every shape up to
// pp 6, vp 4, m 3·pp+1. Per rank: each (micro-batch, chunk) forwarded and backwarded once, forward first, warmup as
// Megatron's. Across ranks: the j-th message a rank sends to a peer is the j-th that peer receives from it, and
// carries the same micro-batch between consecutive global stages; an event simulation (compute takes tf or tb,
// an exchange ends when every peer has reached the exchange holding the other side of its transfers: rendezvous,
// the strictest blocking send) finishes without deadlock, in m·vp·(tf + tb)·(1 + (pp − 1)/(vp·m)): the ideal bubble.
// Also: the executor on one rank against the sequential chain, and bad shapes rejected with clear messages.
#include "parallel/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "comm/communicator.h"
#include "core/error.h"
#include "parallel/pipeline.h"
#include "toy_chain.h"

namespace tb::parallel {
namespace {

using testing::uz;
using Kind = PipeAction::Kind;
using Dir = PipeTransfer::Dir;
using What = PipeTransfer::What;

std::vector<PipelineShape> all_shapes() {
  std::vector<PipelineShape> out;
  for (int pp = 1; pp <= 6; ++pp)
    for (int vp = 1; vp <= 4; ++vp)
      for (int m = 1; m <= 3 * pp + 1; ++m) {
        const PipelineShape s{pp, vp, m};
        if (pipeline_problems(s).empty()) out.push_back(s);
      }
  return out;
}

std::vector<std::vector<PipeAction>> schedules(const PipelineShape& s) {
  std::vector<std::vector<PipeAction>> out;
  for (int r = 0; r < s.pp; ++r) out.push_back(pipeline_schedule(s, r));
  return out;
}

// Megatron's warmup, written again here rather than taken from the library.
int megatron_warmup(const PipelineShape& s, int r) {
  if (s.vp == 1) return std::min(s.pp - r - 1, s.micro_batches);
  return std::min((s.pp - r - 1) * 2 + (s.vp - 1) * s.pp, s.micro_batches * s.vp);
}

// Matches messages, checks what they carry and the local data dependencies, then runs the event simulation.
// Returns "" and the makespan, or what went wrong.
struct Simulation {
  std::string error;
  double makespan = 0;
};

Simulation simulate(const PipelineShape& s, const std::vector<std::vector<PipeAction>>& sched, double tf,
                    double tb) {
  Simulation sim;
  const int pp = s.pp;
  auto fail = [&](std::string e) {
    sim.error = s.str() + ": " + e;
    return sim;
  };
  // where[a][b]: (action index, transfer index) of rank a's sends to b (or receives from b), in posting order.
  using Where = std::pair<std::size_t, std::size_t>;
  std::vector<std::vector<std::vector<Where>>> sends(uz(pp), std::vector<std::vector<Where>>(uz(pp)));
  auto recvs = sends;
  for (int a = 0; a < pp; ++a)
    for (std::size_t i = 0; i < sched[uz(a)].size(); ++i)
      for (std::size_t j = 0; j < sched[uz(a)][i].transfers.size(); ++j) {
        const PipeTransfer& t = sched[uz(a)][i].transfers[j];
        if (t.peer < 0 || t.peer >= pp) return fail("peer out of range");
        (t.dir == Dir::send ? sends : recvs)[uz(a)][uz(t.peer)].push_back({i, j});
      }
  // partners[a][i]: (rank, action index) of the other side of each transfer of rank a's action i.
  std::vector<std::vector<std::vector<std::pair<int, std::size_t>>>> partners(uz(pp));
  for (int a = 0; a < pp; ++a) partners[uz(a)].resize(sched[uz(a)].size());
  for (int a = 0; a < pp; ++a)
    for (int b = 0; b < pp; ++b) {
      const auto& out = sends[uz(a)][uz(b)];
      const auto& in = recvs[uz(b)][uz(a)];
      if (out.size() != in.size())
        return fail("rank " + std::to_string(a) + " sends " + std::to_string(out.size()) + " messages to rank " +
                    std::to_string(b) + ", which receives " + std::to_string(in.size()));
      for (std::size_t n = 0; n < out.size(); ++n) {
        const PipeTransfer& ts = sched[uz(a)][out[n].first].transfers[out[n].second];
        const PipeTransfer& tr = sched[uz(b)][in[n].first].transfers[in[n].second];
        const int from = s.stage_of(a, ts.chunk), to = s.stage_of(b, tr.chunk);
        const int step = ts.what == What::activation ? 1 : -1;
        if (ts.what != tr.what || ts.mb != tr.mb || to != from + step)
          return fail("message " + std::to_string(n) + " from rank " + std::to_string(a) + " to " +
                      std::to_string(b) + " is sent as " + to_string(sched[uz(a)][out[n].first]) +
                      " and received as " + to_string(sched[uz(b)][in[n].first]));
        partners[uz(a)][out[n].first].push_back({b, in[n].first});
        partners[uz(b)][in[n].first].push_back({a, out[n].first});
      }
    }
  // Local data dependencies: inputs received before use, outputs computed before they are sent.
  for (int r = 0; r < pp; ++r) {
    std::set<std::tuple<int, int, int>> have;  // (0 forwarded | 1 backwarded | 2 activation in | 3 gradient in, mb, chunk)
    for (const PipeAction& a : sched[uz(r)]) {
      const std::string where = "rank " + std::to_string(r) + " " + to_string(a);
      if (a.kind == Kind::forward) {
        if (!s.first_stage(r, a.chunk) && !have.count({2, a.mb, a.chunk})) return fail(where + " before its input");
        have.insert({0, a.mb, a.chunk});
      } else if (a.kind == Kind::backward) {
        if (!have.count({0, a.mb, a.chunk})) return fail(where + " before its forward");
        if (!s.last_stage(r, a.chunk) && !have.count({3, a.mb, a.chunk})) return fail(where + " before its gradient");
        have.insert({1, a.mb, a.chunk});
      } else {
        if (a.transfers.empty()) return fail(where + ": empty exchange");
        for (const PipeTransfer& t : a.transfers) {
          const bool act = t.what == What::activation;
          if (t.dir == Dir::send && !have.count({act ? 0 : 1, t.mb, t.chunk})) return fail(where + " sends too early");
          if (t.dir == Dir::recv && !have.insert({act ? 2 : 3, t.mb, t.chunk}).second)
            return fail(where + " receives twice");
        }
      }
    }
  }
  // Event simulation. reached[r][i]: when rank r arrived at its action i.
  std::vector<std::size_t> pc(uz(pp), 0);
  std::vector<double> now(uz(pp), 0);
  std::vector<std::vector<double>> reached(uz(pp));
  for (int r = 0; r < pp; ++r) reached[uz(r)].assign(sched[uz(r)].size() + 1, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t r = 0; r < uz(pp); ++r)
      while (pc[r] < sched[r].size()) {
        const PipeAction& a = sched[r][pc[r]];
        if (a.kind == Kind::exchange) {
          double done = now[r];
          bool ready = true;
          for (const auto& [b, i] : partners[r][pc[r]]) {
            if (pc[uz(b)] < i) ready = false;
            else done = std::max(done, reached[uz(b)][i]);
          }
          if (!ready) break;
          now[r] = done;
        } else {
          now[r] += a.kind == Kind::forward ? tf : tb;
        }
        reached[r][++pc[r]] = now[r];
        progress = true;
      }
  }
  for (int r = 0; r < pp; ++r)
    if (pc[uz(r)] < sched[uz(r)].size())
      return fail("deadlock: rank " + std::to_string(r) + " waits in " +
                  to_string(sched[uz(r)][pc[uz(r)]]));
  sim.makespan = *std::max_element(now.begin(), now.end());
  return sim;
}

TEST(PipelineSchedule, EveryPassIsForwardedThenBackwardedOnce) {
  for (const PipelineShape& s : all_shapes())
    for (int r = 0; r < s.pp; ++r) {
      std::map<std::pair<int, int>, std::vector<Kind>> seen;
      for (const PipeAction& a : pipeline_schedule(s, r))
        if (a.kind != Kind::exchange) seen[{a.mb, a.chunk}].push_back(a.kind);
      ASSERT_EQ(seen.size(), uz(s.micro_batches * s.vp)) << s.str() << " rank " << r;
      for (const auto& [pass, kinds] : seen) {
        EXPECT_GE(pass.first, 0);
        EXPECT_LT(pass.first, s.micro_batches);
        EXPECT_GE(pass.second, 0);
        EXPECT_LT(pass.second, s.vp);
        EXPECT_EQ(kinds, (std::vector<Kind>{Kind::forward, Kind::backward}))
            << s.str() << " rank " << r << " pass " << pass.first << "." << pass.second;
      }
    }
}

TEST(PipelineSchedule, WarmupIsMegatrons) {
  for (const PipelineShape& s : all_shapes())
    for (int r = 0; r < s.pp; ++r) {
      const int w = megatron_warmup(s, r), total = s.micro_batches * s.vp;
      EXPECT_EQ(warmup_forwards(s, r), w) << s.str() << " rank " << r;
      int before = 0;  // forwards before the first backward: the warmup, plus the first steady forward if any
      for (const PipeAction& a : pipeline_schedule(s, r)) {
        if (a.kind == Kind::backward) break;
        before += a.kind == Kind::forward;
      }
      EXPECT_EQ(before, std::min(w + 1, total)) << s.str() << " rank " << r;
    }
  EXPECT_EQ(warmup_forwards({4, 1, 8}, 0), 3);
  EXPECT_EQ(warmup_forwards({4, 1, 8}, 3), 0);
  EXPECT_EQ(warmup_forwards({4, 1, 2}, 0), 2);
  EXPECT_EQ(warmup_forwards({4, 2, 8}, 0), 10);
  EXPECT_EQ(warmup_forwards({4, 2, 8}, 3), 4);
  EXPECT_EQ(warmup_forwards({4, 2, 4}, 0), 8);  // capped at m·vp: everything is warmup
}

TEST(PipelineSchedule, MessagesMatchAndTheSimulationFinishes) {
  const double tf = 1, tb = 2;
  for (const PipelineShape& s : all_shapes()) {
    const Simulation sim = simulate(s, schedules(s), tf, tb);
    ASSERT_EQ(sim.error, "");
    // With no transfer time, each rank computes m·vp·(tf + tb) and idles for the ideal bubble, (pp − 1)/(vp·m)
    // of that: (pp − 1)·(tf + tb) for 1F1B, 1/vp of it interleaved.
    const double compute = s.micro_batches * s.vp * (tf + tb);
    EXPECT_DOUBLE_EQ(sim.makespan, compute * (1 + pipeline_stats(s).bubble_fraction)) << s.str();
    if (s.vp == 1) {
      EXPECT_DOUBLE_EQ(sim.makespan, (s.micro_batches + s.pp - 1) * (tf + tb)) << s.str();
    }
  }
}

// The simulation catches a schedule whose messages are out of order or would deadlock.
TEST(PipelineSchedule, TheSimulationCatchesBrokenSchedules) {
  const PipelineShape s{4, 1, 6};
  auto swapped = schedules(s);  // rank 2 takes its first two activations in the other order
  auto& r2 = swapped[2];
  std::vector<std::size_t> recvs;
  for (std::size_t i = 0; i < r2.size(); ++i)
    if (r2[i].kind == Kind::exchange && r2[i].transfers[0].dir == Dir::recv &&
        r2[i].transfers[0].what == What::activation)
      recvs.push_back(i);
  std::swap(r2[recvs[0]].transfers[0].mb, r2[recvs[1]].transfers[0].mb);
  EXPECT_NE(simulate(s, swapped, 1, 2).error, "");

  auto late = schedules(s);  // rank 1 receives its first gradient before running any forward: deadlock
  auto& r1 = late[1];
  const auto first_grad = std::find_if(r1.begin(), r1.end(), [](const PipeAction& a) {
    return a.kind == Kind::exchange && a.transfers.back().what == What::gradient;
  });
  PipeAction early{Kind::exchange, -1, -1, {first_grad->transfers.back()}};
  first_grad->transfers.pop_back();
  if (first_grad->transfers.empty()) r1.erase(first_grad);
  r1.insert(r1.begin(), early);
  const Simulation sim = simulate(s, late, 1, 2);
  EXPECT_NE(sim.error.find("deadlock"), std::string::npos) << sim.error;
}

TEST(PipelineSchedule, PeakInFlightAndBubble) {
  for (const PipelineShape& s : all_shapes()) {
    const PipelineStats st = pipeline_stats(s);
    EXPECT_DOUBLE_EQ(st.bubble_fraction, double(s.pp - 1) / (s.vp * s.micro_batches));
    ASSERT_EQ(st.peak_in_flight.size(), uz(s.pp));
    for (int r = 0; r < s.pp; ++r) {
      const int peak = st.peak_in_flight[uz(r)];
      if (s.vp == 1) {
        EXPECT_EQ(peak, std::min(s.pp - r, s.micro_batches)) << s.str() << " rank " << r;
        EXPECT_LE(peak, s.pp);
      } else {
        EXPECT_EQ(peak, std::min(megatron_warmup(s, r) + 1, s.micro_batches * s.vp)) << s.str() << " rank " << r;
      }
      EXPECT_DOUBLE_EQ(st.peak_in_flight_microbatches[uz(r)], double(peak) / s.vp);
    }
  }
}

// Megatron's orders, spelled out for two small shapes.
TEST(PipelineSchedule, MegatronOrders) {
  EXPECT_EQ(to_string(pipeline_schedule({2, 1, 3}, 0)),
            "F0.0 X[sa0.0>1] F1.0 X[sa1.0>1 rg0.0<1] B0.0 F2.0 X[sa2.0>1 rg1.0<1] B1.0 X[rg2.0<1] B2.0");
  EXPECT_EQ(to_string(pipeline_schedule({2, 1, 3}, 1)),
            "X[ra0.0<0] F0.0 B0.0 X[ra1.0<0 sg0.0>0] F1.0 B1.0 X[ra2.0<0 sg1.0>0] F2.0 B2.0 X[sg2.0>0]");
  std::string compute;  // interleaved pp 2, vp 2, m 4, rank 0: groups of pp micro-batches per chunk
  for (const PipeAction& a : pipeline_schedule({2, 2, 4}, 0))
    if (a.kind != Kind::exchange) {
      if (!compute.empty()) compute += ' ';
      compute += to_string(a);
    }
  EXPECT_EQ(compute, "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
}

TEST(PipelineSchedule, RejectsBadShapes) {
  auto message = [](const PipelineShape& s, int rank) -> std::string {
    try {
      pipeline_schedule(s, rank);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::config);
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message({4, 2, 6}, 0).find("micro-batch count (6) to be a multiple of pp (4)"), std::string::npos);
  EXPECT_NE(message({1, 2, 4}, 0).find("interleaving (vp > 1) needs pp > 1"), std::string::npos);
  EXPECT_NE(message({0, 1, 4}, 0).find("at least 1"), std::string::npos);
  EXPECT_NE(message({2, 1, 0}, 0).find("at least 1"), std::string::npos);
  EXPECT_NE(message({2, 1, 4}, 2).find("rank 2 is not in [0, 2)"), std::string::npos);
  EXPECT_EQ(pipeline_problems({4, 2, 8}), "");
}

// The executor on one rank (pp 1: no messages) gives the sequential chain's loss and gradients.
TEST(PipelineExecutor, OneRankMatchesTheSequentialChain) {
  auto self = comm::make_self_communicator();
  for (int m : {1, 3}) {
    const PipelineShape s{1, 1, m};
    const testing::ToyChain chain(1, 5, 7);
    testing::ToyStage stage(chain, s, 0);
    const PipelineRun run = run_pipeline<double>(s, *self, stage);
    const testing::ChainGrads ref = chain.reference(m);
    EXPECT_EQ(run.forwards, m);
    EXPECT_EQ(run.backwards, m);
    EXPECT_NEAR(run.loss, ref.loss, 1e-12);
    for (std::size_t i = 0; i < ref.dW[0].size(); ++i) EXPECT_NEAR(stage.grads.dW[0][i], ref.dW[0][i], 1e-12);
    for (std::size_t i = 0; i < ref.db[0].size(); ++i) EXPECT_NEAR(stage.grads.db[0][i], ref.db[0][i], 1e-12);
  }
}

}  // namespace
}  // namespace tb::parallel
