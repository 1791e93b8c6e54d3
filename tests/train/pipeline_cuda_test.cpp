// Tests train/pipeline_cuda's host-side plan (no GPU), for 1F1B and interleaved shapes:
//   - each chunk keeps as many activation sets as the schedule has passes of it in flight at once (1F1B: min(pp - r, m));
//   - the plan is the schedule's actions in order, and replayed with the state of every activation set and boundary
//     buffer it uses, each is free before it is reused (a forward's output never aliases its input, nor a backward's
//     input gradient its output gradient; an exchange receives into free buffers, not into the ones it sends), each
//     buffer sent holds what the transfer names and each buffer read holds the pass's input;
//   - across ranks, what rank r sends to a peer is what that peer receives from r, in the same order (the same
//     micro-batch across the same stage boundary);
//   - each chunk has exactly one backward flagged as its last of the step, after all its micro-batches;
//   - a shape the interleaved schedule cannot run (m not a multiple of pp) is refused with a clear message.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "parallel/pipeline_schedule.h"
#include "train/pipeline_cuda.h"

namespace {

using tb::parallel::PipeAction;
using tb::parallel::PipelineShape;
using tb::parallel::PipeTransfer;
using tb::train::PipelinePlan;
using Kind = PipeAction::Kind;

std::vector<PipelineShape> shapes() {  // 1F1B and interleaved, every m small enough to enumerate
  std::vector<PipelineShape> out;
  for (int pp : {2, 3, 4})
    for (int vp : {1, 2, 3})
      for (int m = 1; m <= 3 * pp; ++m)
        if (vp == 1 || m % pp == 0) out.push_back({pp, vp, m});
  return out;
}

std::string where(const PipelineShape& s, int r) { return s.str() + " rank " + std::to_string(r); }

// Per chunk: the most passes of it forwarded and not yet backwarded, from the schedule.
std::vector<int> peak_in_flight_per_chunk(const PipelineShape& s, int r) {
  std::vector<int> now(std::size_t(s.vp), 0), peak(std::size_t(s.vp), 0);
  for (const PipeAction& a : tb::parallel::pipeline_schedule(s, r)) {
    if (a.kind == Kind::exchange) continue;
    int& n = now[std::size_t(a.chunk)];
    n += a.kind == Kind::forward ? 1 : -1;
    peak[std::size_t(a.chunk)] = std::max(peak[std::size_t(a.chunk)], n);
  }
  return peak;
}

TEST(PipelinePlan, ActivationSetsArePeakInFlight) {
  for (int pp : {2, 3, 4})
    for (int m : {1, 2, 4, 8}) {
      const PipelineShape shape{pp, 1, m};
      for (int r = 0; r < pp; ++r) {
        const PipelinePlan plan = tb::train::plan_pipeline(shape, r);
        EXPECT_EQ(plan.activation_sets, std::vector<int>{std::min(pp - r, m)}) << where(shape, r);
        EXPECT_LE(plan.buffers, 2 * std::min(pp - r, m) + 2) << where(shape, r);
      }
    }
}

TEST(PipelinePlan, InterleavedActivationSetsArePeakInFlightPerChunk) {
  for (const PipelineShape& s : shapes()) {
    const tb::parallel::PipelineStats stats = tb::parallel::pipeline_stats(s);
    for (int r = 0; r < s.pp; ++r) {
      const PipelinePlan plan = tb::train::plan_pipeline(s, r);
      EXPECT_EQ(plan.activation_sets, peak_in_flight_per_chunk(s, r)) << where(s, r);
      int sets = 0;
      for (int k : plan.activation_sets) sets += k;
      EXPECT_GE(sets, stats.peak_in_flight[std::size_t(r)]) << where(s, r);  // the chunks peak at different times
    }
  }
  // pp 2 vp 2 m 4, rank 0: F0.0 F1.0 F0.1 F1.1 | F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 | B2.1 B3.1 B2.0 B3.0:
  // chunk 0 has all 4 micro-batches in flight before its first backward, chunk 1 at most 2.
  EXPECT_EQ(tb::train::plan_pipeline({2, 2, 4}, 0).activation_sets, (std::vector<int>{4, 2}));
}

// What a boundary buffer holds: (role, micro-batch, chunk), roles as in pipeline_cuda.cpp.
enum class Role { input, output, output_grad, input_grad };
using Tag = std::tuple<Role, int, int>;

Role role_of(const PipeTransfer& t) {
  const bool act = t.what == PipeTransfer::What::activation;
  if (t.dir == PipeTransfer::Dir::send) return act ? Role::output : Role::input_grad;
  return act ? Role::input : Role::output_grad;
}

TEST(PipelinePlan, StorageIsFreeBeforeReuseAndHoldsWhatIsRead) {
  for (const PipelineShape& s : shapes())
    for (int r = 0; r < s.pp; ++r) {
      const std::string at = where(s, r);
      const std::vector<PipeAction> schedule = tb::parallel::pipeline_schedule(s, r);
      const PipelinePlan plan = tb::train::plan_pipeline(s, r);
      ASSERT_EQ(plan.ops.size(), schedule.size()) << at;
      ASSERT_EQ(plan.activation_sets.size(), std::size_t(s.vp)) << at;
      std::map<int, Tag> held;                      // buffer -> what it holds (absent: free)
      std::vector<std::map<int, int>> sets(std::size_t(s.vp));  // per chunk: set -> micro-batch using it
      auto take = [&](int b, const Tag& want, const std::string& what) {  // read a buffer, which is then free
        ASSERT_GE(b, 0) << at << ": " << what;
        const auto it = held.find(b);
        ASSERT_TRUE(it != held.end() && it->second == want) << at << ": " << what << " reads buffer " << b
                                                            << ", which does not hold its data";
        held.erase(it);
      };
      auto make = [&](int b, const Tag& tag, const std::string& what) {  // write a free buffer
        ASSERT_TRUE(b >= 0 && b < plan.buffers) << at << ": " << what << " writes buffer " << b;
        ASSERT_TRUE(held.emplace(b, tag).second) << at << ": " << what << " overwrites buffer " << b << " in use";
      };
      for (std::size_t i = 0; i < schedule.size(); ++i) {
        const PipeAction& a = schedule[i];
        const PipelinePlan::Op& op = plan.ops[i];
        const std::string what = tb::parallel::to_string(a);
        ASSERT_TRUE(op.kind == a.kind && op.mb == a.mb && op.chunk == a.chunk) << at << ": op " << i << " is not "
                                                                               << what;
        if (a.kind == Kind::exchange) {
          ASSERT_EQ(op.transfers.size(), a.transfers.size()) << at << ": " << what;
          std::vector<int> sent;
          for (std::size_t j = 0; j < a.transfers.size(); ++j) {
            const PipeTransfer& t = a.transfers[j];
            const PipelinePlan::Transfer& p = op.transfers[j];
            ASSERT_TRUE(p.send == (t.dir == PipeTransfer::Dir::send) && p.peer == t.peer) << at << ": " << what;
            if (p.send) {
              ASSERT_TRUE(held.count(p.buffer) && held.at(p.buffer) == Tag(role_of(t), t.mb, t.chunk))
                  << at << ": " << what << " sends buffer " << p.buffer << ", which does not hold its data";
              sent.push_back(p.buffer);
            } else {
              make(p.buffer, {role_of(t), t.mb, t.chunk}, what);
            }
          }
          for (int b : sent) held.erase(b);  // free once the whole exchange is done
          continue;
        }
        const bool first = s.first_stage(r, a.chunk), last = s.last_stage(r, a.chunk);
        std::map<int, int>& in_use = sets[std::size_t(a.chunk)];
        ASSERT_TRUE(op.set >= 0 && op.set < plan.activation_sets[std::size_t(a.chunk)]) << at << ": " << what;
        if (a.kind == Kind::forward) {
          ASSERT_TRUE(in_use.emplace(op.set, a.mb).second) << at << ": " << what << " takes set " << op.set
                                                           << " in use";
          EXPECT_EQ(op.in >= 0, !first) << at << ": " << what;
          EXPECT_EQ(op.out >= 0, !last) << at << ": " << what;
          if (op.out >= 0) make(op.out, {Role::output, a.mb, a.chunk}, what);  // while `in` is still held
          if (op.in >= 0) take(op.in, {Role::input, a.mb, a.chunk}, what);
        } else {
          ASSERT_TRUE(in_use.count(op.set) && in_use.at(op.set) == a.mb) << at << ": " << what << " reads set "
                                                                         << op.set << " of another pass";
          in_use.erase(op.set);
          EXPECT_EQ(op.in >= 0, !last) << at << ": " << what;
          EXPECT_EQ(op.out >= 0, !first) << at << ": " << what;
          if (op.out >= 0) make(op.out, {Role::input_grad, a.mb, a.chunk}, what);
          if (op.in >= 0) take(op.in, {Role::output_grad, a.mb, a.chunk}, what);
        }
      }
      EXPECT_TRUE(held.empty()) << at << ": buffers left holding data";
      for (const auto& in_use : sets) EXPECT_TRUE(in_use.empty()) << at << ": activation sets left in use";
    }
}

// A message between two stages: (activation or gradient, micro-batch, the boundary it crosses: between global
// stages b and b + 1).
using Message = std::tuple<PipeTransfer::What, int, int>;

TEST(PipelinePlan, TransfersPairUpAcrossRanks) {
  for (const PipelineShape& s : shapes()) {
    // sent[a][b], received[b][a]: the messages from rank a to rank b, in posting order.
    std::vector<std::vector<std::vector<Message>>> sent(
        std::size_t(s.pp), std::vector<std::vector<Message>>(std::size_t(s.pp)));
    auto received = sent;
    for (int r = 0; r < s.pp; ++r) {
      const std::vector<PipeAction> schedule = tb::parallel::pipeline_schedule(s, r);
      const PipelinePlan plan = tb::train::plan_pipeline(s, r);
      for (std::size_t i = 0; i < schedule.size(); ++i)
        for (std::size_t j = 0; j < plan.ops[i].transfers.size(); ++j) {
          const PipelinePlan::Transfer& p = plan.ops[i].transfers[j];
          const PipeTransfer& t = schedule[i].transfers[j];
          const bool act = t.what == PipeTransfer::What::activation;
          const int stage = s.stage_of(r, t.chunk);
          // Activations go forward (sent by stage b, received by b + 1), gradients backward (sent by b + 1).
          const int boundary = act == p.send ? stage : stage - 1;
          EXPECT_EQ(p.peer, act == p.send ? (r + 1) % s.pp : (r - 1 + s.pp) % s.pp) << where(s, r);
          (p.send ? sent[std::size_t(r)][std::size_t(p.peer)] : received[std::size_t(r)][std::size_t(p.peer)])
              .push_back({t.what, t.mb, boundary});
        }
    }
    int messages = 0;
    for (int a = 0; a < s.pp; ++a)
      for (int b = 0; b < s.pp; ++b) {
        EXPECT_EQ(sent[std::size_t(a)][std::size_t(b)], received[std::size_t(b)][std::size_t(a)])
            << s.str() << ": rank " << a << " to rank " << b;
        messages += int(sent[std::size_t(a)][std::size_t(b)].size());
      }
    EXPECT_EQ(messages, 2 * s.micro_batches * (s.stages() - 1)) << s.str();  // every boundary, both directions
  }
}

// Exactly one backward per chunk is its last of the step (so its gradient reductions may start there): the one
// after which the schedule runs no other backward of that chunk, with every micro-batch of the chunk done by then.
TEST(PipelinePlan, EachChunkHasOneLastBackward) {
  for (const PipelineShape& s : shapes())
    for (int r = 0; r < s.pp; ++r) {
      const PipelinePlan plan = tb::train::plan_pipeline(s, r);
      std::vector<int> marked(std::size_t(s.vp), 0), after(std::size_t(s.vp), 0), done(std::size_t(s.vp), 0);
      for (const PipelinePlan::Op& op : plan.ops) {
        if (op.kind != Kind::backward) {
          EXPECT_FALSE(op.last_of_chunk) << where(s, r);
          continue;
        }
        const std::size_t c = std::size_t(op.chunk);
        ++done[c];
        if (marked[c] > 0) ++after[c];
        if (op.last_of_chunk) {
          ++marked[c];
          EXPECT_EQ(done[c], s.micro_batches)
              << where(s, r) << " chunk " << c << ": marked before its last micro-batch";
        }
      }
      for (int c = 0; c < s.vp; ++c) {
        EXPECT_EQ(marked[std::size_t(c)], 1) << where(s, r) << " chunk " << c;
        EXPECT_EQ(after[std::size_t(c)], 0) << where(s, r) << " chunk " << c << ": a backward after the last";
      }
    }
}

TEST(PipelinePlan, InterleavedNeedsMicroBatchesAMultipleOfPp) {
  try {
    tb::train::plan_pipeline(PipelineShape{2, 2, 3}, 0);
    FAIL() << "vp 2 with 3 micro-batches on pp 2 should be refused";
  } catch (const tb::Error& e) {
    EXPECT_EQ(e.kind(), tb::Error::Kind::config);
    EXPECT_NE(std::string(e.what()).find("multiple of pp"), std::string::npos) << e.what();
  }
}

}  // namespace
