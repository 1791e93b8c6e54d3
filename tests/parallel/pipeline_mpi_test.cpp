// pipeline_mpi_test: the pipeline executor (parallel/pipeline.h) under mpirun (2 and 4 ranks, ctest), pp = world
// size, on the toy chain of tests/parallel/toy_chain.h (stage k: y = tanh(W_k x + b_k), loss 0.5·|y|² on the last).
// The loss and every stage's parameter gradients, summed over the micro-batches, must equal the same chain run
// sequentially on one rank (to 1e-12): 1F1B with m in {1, pp, 2·pp + 1}, interleaved (vp 2 and 3) with m in
// {pp, 2·pp}. Micro-batches differ in size and values, so a message delivered to the wrong pass fails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

#include "comm/mpi_comm.h"
#include "parallel/mesh.h"
#include "parallel/pipeline.h"
#include "toy_chain.h"

namespace tb::parallel {
namespace {

using testing::uz;

void check_against_sequential(comm::Communicator& world, const PipelineShape& s) {
  Mesh mesh(world, MeshShape{.pp = s.pp, .vp = s.vp});
  comm::Communicator& pp = mesh.pp();
  const int r = pp.rank();
  const testing::ToyChain chain(s.stages(), 6, 42);
  testing::ToyStage stage(chain, s, r);
  PipelineRun run;
  try {
    run = run_pipeline<double>(s, pp, stage);
  } catch (const std::exception& e) {  // the other ranks would wait for this one until the ctest timeout
    ADD_FAILURE() << s.str() << " rank " << r << ": " << e.what();
    std::fprintf(stderr, "%s rank %d: %s\n", s.str().c_str(), r, e.what());
    comm::abort_job(1);
  }
  const testing::ChainGrads ref = chain.reference(s.micro_batches);

  EXPECT_EQ(run.forwards, s.micro_batches * s.vp) << s.str();
  EXPECT_EQ(run.backwards, s.micro_batches * s.vp) << s.str();
  double loss = run.loss;  // only the rank holding the last stage has it
  pp.all_reduce(std::span<double>(&loss, 1));
  EXPECT_NEAR(loss, ref.loss, 1e-12 * std::max(1.0, std::abs(ref.loss))) << s.str();
  if (r != s.pp - 1) {
    EXPECT_EQ(run.loss, 0.0) << s.str();
  }

  for (int c = 0; c < s.vp; ++c) {
    const std::size_t k = uz(s.stage_of(r, c));
    double worst = 0;
    for (std::size_t i = 0; i < ref.dW[k].size(); ++i)
      worst = std::max(worst, std::abs(stage.grads.dW[k][i] - ref.dW[k][i]));
    for (std::size_t i = 0; i < ref.db[k].size(); ++i)
      worst = std::max(worst, std::abs(stage.grads.db[k][i] - ref.db[k][i]));
    EXPECT_LT(worst, 1e-12) << s.str() << " rank " << r << " stage " << k;
    double norm = 0;  // the reference gradient is not trivially zero
    for (double g : ref.dW[k]) norm += g * g;
    EXPECT_GT(norm, 1e-6) << s.str() << " stage " << k;
  }
  // Stages of other ranks are untouched here.
  for (int k = 0; k < s.stages(); ++k) {
    if (k % s.pp == r) continue;
    for (double g : stage.grads.dW[uz(k)]) ASSERT_EQ(g, 0.0) << s.str() << " rank " << r << " touched stage " << k;
  }
}

TEST(PipelineMpi, OneFOneBMatchesTheSequentialChain) {
  auto world = comm::world_communicator();
  ASSERT_TRUE(comm::world().mpi) << "run under mpirun";
  const int pp = world->size();
  for (int m : {1, pp, 2 * pp + 1}) check_against_sequential(*world, {pp, 1, m});
}

TEST(PipelineMpi, InterleavedMatchesTheSequentialChain) {
  auto world = comm::world_communicator();
  const int pp = world->size();
  for (int vp : {2, 3})
    for (int m : {pp, 2 * pp}) check_against_sequential(*world, {pp, vp, m});
}

TEST(PipelineMpi, FloatStagesRun) {  // the float instantiation moves float buffers: a 1F1B identity chain
  struct Identity : PipelineStage<float> {
    PipelineShape s;
    int r;
    std::size_t activation_size(int) const override { return 3; }
    double forward(int mb, int chunk, std::span<const float> in, std::span<float> out) override {
      if (!out.empty())
        for (std::size_t i = 0; i < out.size(); ++i) out[i] = in.empty() ? float(mb + i) : in[i];
      return s.last_stage(r, chunk) ? double(in[0]) : 0.0;
    }
    void backward(int, int, std::span<const float>, std::span<float> din) override {
      for (float& v : din) v = 1;
    }
  };
  auto world = comm::world_communicator();
  const int pp = world->size();
  if (pp < 2) GTEST_SKIP();
  Identity stage;
  stage.s = {pp, 1, pp};
  stage.r = world->rank();
  double loss = run_pipeline<float>(stage.s, *world, stage).loss;  // sum of micro-batch indices
  world->all_reduce(std::span<double>(&loss, 1));
  EXPECT_EQ(loss, pp * (pp - 1) / 2.0);
}

}  // namespace
}  // namespace tb::parallel
