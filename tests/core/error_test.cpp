// Tests core/error: TB_CHECK on CUDA status, TB_REQUIRE, message shape, fatal classification.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/suggest.h"

TEST(Error, CudaStatusRaisesWithLocationAndContext) {
  try {
    TB_CHECK(cudaErrorMemoryAllocation);
    FAIL();
  } catch (const tb::Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.kind(), tb::Error::Kind::cuda);
    EXPECT_FALSE(e.fatal());
    EXPECT_NE(m.find("cudaErrorMemoryAllocation"), std::string::npos) << m;
    EXPECT_NE(m.find("error_test.cpp:"), std::string::npos) << m;
    EXPECT_NE(m.find("[host "), std::string::npos) << m;
  }
}

TEST(Error, StickyErrorsAreFatal) {
  try {
    TB_CHECK(cudaErrorIllegalAddress);
    FAIL();
  } catch (const tb::Error& e) {
    EXPECT_TRUE(e.fatal());
  }
  EXPECT_FALSE(tb::is_sticky(cudaErrorInvalidValue));
}

TEST(Error, RequireThrowsConfigWithTheMessage) {
  try {
    TB_REQUIRE(1 + 1 == 3, "tp=3 does not divide heads=32: choose a divisor");
    FAIL();
  } catch (const tb::Error& e) {
    EXPECT_EQ(e.kind(), tb::Error::Kind::config);
    EXPECT_STREQ(e.what(), "tp=3 does not divide heads=32: choose a divisor");
  }
  EXPECT_NO_THROW(TB_REQUIRE(true, "never"));
}

TEST(Error, RankAppearsOnceSet) {
  tb::set_error_rank(3);
  EXPECT_NE(tb::error_context().find("rank 3"), std::string::npos);
  tb::set_error_rank(-1);
  EXPECT_EQ(tb::error_context().find("rank"), std::string::npos);
}

TEST(Suggest, NearestCandidate) {
  const std::vector<std::string> c = {"check", "info", "micro", "list"};
  EXPECT_EQ(tb::nearest("chek", c), "check");
  EXPECT_EQ(tb::nearest("mirco", c), "micro");
  EXPECT_EQ(tb::nearest("zzzzzzzz", c), "");
  EXPECT_EQ(tb::edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(tb::did_you_mean("lst", c), " (did you mean 'list'?)");
}
