// rank_agreement_mpi_test: train/rank_agreement.h under mpirun (2 and 4 ranks). Equal configurations pass on every
// rank; when ranks 1.. differ from rank 0 (layers, precision + FP8 recipe, seed), those ranks raise a config error
// naming each differing field with both values and rank 0 does not; a field left out of spec_fields would go unseen,
// so every field is checked to be listed once; a caller's extra fields (`run`'s recipe file hash) are compared too.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "comm/mpi_comm.h"
#include "core/error.h"
#include "train/rank_agreement.h"

namespace tb::train {
namespace {

TEST(RankAgreement, EqualConfigurationsPass) {
  ASSERT_TRUE(comm::world().mpi) << "run under mpirun";
  auto world = comm::world_communicator();
  TrainSpec spec;
  spec.model.preset = "small", spec.parallel.tp = 2;
  EXPECT_NO_THROW(check_ranks_agree(spec, *world));
}

TEST(RankAgreement, DifferingRanksNameTheFields) {
  auto world = comm::world_communicator();
  TrainSpec spec;
  spec.model.preset = "small";
  if (world->rank() > 0)
    spec.model.layers = 4, spec.precision.linear = tb::train::Precision::fp8,
    spec.precision.fp8.recipe = tb::train::Fp8Recipe::delayed, spec.run.seed = 7;
  if (world->rank() == 0) {
    EXPECT_NO_THROW(check_ranks_agree(spec, *world));
    return;
  }
  try {
    check_ranks_agree(spec, *world);
    ADD_FAILURE() << "rank " << world->rank() << " differs from rank 0 but was not told";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.kind(), Error::Kind::config);
    EXPECT_NE(m.find("differs from rank 0's"), std::string::npos) << m;
    EXPECT_NE(m.find("layers 4 (rank 0: 0)"), std::string::npos) << m;
    EXPECT_NE(m.find("precision fp8 (rank 0: bf16)"), std::string::npos) << m;
    EXPECT_NE(m.find("fp8_recipe delayed (rank 0: current)"), std::string::npos) << m;
    EXPECT_NE(m.find("seed 7 (rank 0: 1234)"), std::string::npos) << m;
    EXPECT_EQ(m.find("model"), std::string::npos) << m;  // equal fields are not listed
  }
}

TEST(RankAgreement, ExtraFieldsAreCompared) {
  auto world = comm::world_communicator();
  const Fields extra = {{"recipe", "tiny"}, {"recipe_hash", world->rank() > 0 ? "bbbb" : "aaaa"}};
  if (world->rank() == 0) {
    EXPECT_NO_THROW(check_ranks_agree(TrainSpec{}, *world, extra));
    return;
  }
  try {
    check_ranks_agree(TrainSpec{}, *world, extra);
    ADD_FAILURE() << "rank " << world->rank() << " read another recipe file but was not told";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("recipe_hash bbbb (rank 0: aaaa)"), std::string::npos) << e.what();
  }
}

TEST(RankAgreement, EveryFieldListedOnce) {
  std::set<std::string> names;
  for (const auto& [name, value] : spec_fields(TrainSpec{})) EXPECT_TRUE(names.insert(name).second) << name;
  // TrainSpec's fields but gpu (the node-local index) and job_ranks (how the process was started), plus the binary
  // and the data file's size.
  EXPECT_EQ(names.size(), 62u);
  EXPECT_TRUE(names.count("binary") && names.count("data_bytes"));
}

}  // namespace
}  // namespace tb::train
