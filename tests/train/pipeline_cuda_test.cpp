// Tests train/pipeline_cuda's host-side plan (no GPU): for 1F1B shapes, every rank's plan keeps min(pp - r, m)
// activation sets (parallel/pipeline_schedule.h's peak in flight), a forward's output never aliases its input nor a
// backward's input gradient its output gradient, the buffers of one exchange are distinct, every received buffer is
// consumed by the matching forward / backward, and interleaved shapes are refused with a clear message.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "core/error.h"
#include "parallel/pipeline_schedule.h"
#include "train/pipeline_cuda.h"

namespace {

using tb::parallel::PipeAction;
using tb::parallel::PipelineShape;
using tb::train::PipelinePlan;

TEST(PipelinePlan, ActivationSetsArePeakInFlight) {
  for (int pp : {2, 3, 4})
    for (int m : {1, 2, 4, 8}) {
      const PipelineShape shape{pp, 1, m};
      for (int r = 0; r < pp; ++r) {
        const PipelinePlan plan = tb::train::plan_pipeline(shape, r);
        EXPECT_EQ(plan.activation_sets, std::min(pp - r, m)) << shape.str() << " rank " << r;
        EXPECT_LE(plan.buffers, 2 * std::min(pp - r, m) + 2) << shape.str() << " rank " << r;
      }
    }
}

TEST(PipelinePlan, BuffersFlowFromReceiveToUse) {
  for (int pp : {2, 4})
    for (int m : {2, 4, 8}) {
      const PipelineShape shape{pp, 1, m};
      for (int r = 0; r < pp; ++r) {
        const PipelinePlan plan = tb::train::plan_pipeline(shape, r);
        const std::string what = shape.str() + " rank " + std::to_string(r);
        std::map<int, int> received;  // buffer -> micro-batch it holds, between its receive and its use
        std::set<int> sets_in_use;
        int forwards = 0, backwards = 0;
        for (const PipelinePlan::Op& op : plan.ops) {
          if (op.kind == PipeAction::Kind::exchange) {
            std::set<int> distinct;
            for (const PipelinePlan::Transfer& t : op.transfers) {
              EXPECT_TRUE(distinct.insert(t.buffer).second) << what << ": one buffer twice in an exchange";
              if (!t.send) received[t.buffer] = 0;
            }
            continue;
          }
          EXPECT_NE(op.in, op.out) << what;
          if (op.in >= 0) {
            EXPECT_EQ(received.erase(op.in), 1u) << what << ": input not received";
          }
          if (op.kind == PipeAction::Kind::forward) {
            ++forwards;
            EXPECT_TRUE(sets_in_use.insert(op.set).second) << what << ": activation set " << op.set << " in use";
            EXPECT_EQ(op.in >= 0, r > 0) << what;
            EXPECT_EQ(op.out >= 0, r < pp - 1) << what;
          } else {
            ++backwards;
            EXPECT_EQ(sets_in_use.erase(op.set), 1u) << what << ": backward of a set with no forward";
            EXPECT_EQ(op.in >= 0, r < pp - 1) << what;
            EXPECT_EQ(op.out >= 0, r > 0) << what;
          }
          EXPECT_LT(op.set, plan.activation_sets);
        }
        EXPECT_TRUE(received.empty()) << what << ": received and never used";
        EXPECT_TRUE(sets_in_use.empty()) << what;
        EXPECT_EQ(forwards, m);
        EXPECT_EQ(backwards, m);
      }
    }
}

TEST(PipelinePlan, InterleavedIsRefused) {
  try {
    tb::train::plan_pipeline(PipelineShape{2, 2, 4}, 0);
    FAIL() << "vp 2 should be refused";
  } catch (const tb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("interleaved"), std::string::npos) << e.what();
  }
}

}  // namespace
