// mpi_check_test: TB_CHECK(tb::MpiStatus{...}) raises tb::Error{mpi} whose message carries the MPI error
// text, before MPI_Init (Open MPI aborts on MPI_Error_string then, so the text comes from comm/mpi.cpp's
// table) and after it (MPI_Error_string's own text); launched_by_mpi() reads the launcher's environment.
// ctest runs each test in its own process; run directly, MpiInitialized must stay the last MPI test.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include "comm/mpi.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <string>

namespace tb {
namespace {

// Throws TB_CHECK(MpiStatus{code}) and returns the error (fails the test when nothing is thrown).
Error check_error(int code) {
  try {
    TB_CHECK(MpiStatus{code});
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "TB_CHECK(MpiStatus{" << code << "}) did not throw";
  return Error(Error::Kind::internal, false, "");
}

TEST(MpiCheck, SuccessDoesNotThrow) { EXPECT_NO_THROW(TB_CHECK(MpiStatus{MPI_SUCCESS})); }

TEST(MpiCheck, BeforeInitTheTextComesFromTheTable) {
  int initialized = 1;
  MPI_Initialized(&initialized);
  ASSERT_FALSE(initialized);
  const Error e = check_error(MPI_ERR_COMM);
  EXPECT_EQ(e.kind(), Error::Kind::mpi);
  EXPECT_FALSE(e.fatal());
  const std::string msg = e.what();
  EXPECT_NE(msg.find("mpi error MPI_ERR_COMM (invalid communicator)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mpi_check_test.cpp"), std::string::npos) << msg;
  EXPECT_NE(std::string(check_error(12345).what()).find("code 12345"), std::string::npos);
}

TEST(MpiCheck, LaunchedByMpiFollowsTheEnvironment) {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_STEP_ID", "SLURM_NTASKS"}) unsetenv(v);
  EXPECT_FALSE(launched_by_mpi());
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  EXPECT_TRUE(launched_by_mpi());
  unsetenv("OMPI_COMM_WORLD_SIZE");
  setenv("PMI_SIZE", "2", 1);
  EXPECT_TRUE(launched_by_mpi());
  unsetenv("PMI_SIZE");
  setenv("PMIX_RANK", "0", 1);
  EXPECT_TRUE(launched_by_mpi());
  unsetenv("PMIX_RANK");
  setenv("SLURM_STEP_ID", "0", 1);
  setenv("SLURM_NTASKS", "1", 1);
  EXPECT_FALSE(launched_by_mpi());  // a one-task step is not a multi-process launch
  setenv("SLURM_NTASKS", "4", 1);
  EXPECT_TRUE(launched_by_mpi());
  unsetenv("SLURM_STEP_ID");
  unsetenv("SLURM_NTASKS");
}

// After MPI_Init (a singleton: no mpirun needed) the message carries MPI_Error_string's own text.
TEST(MpiCheck, MpiInitialized) {
  ASSERT_EQ(MPI_Init(nullptr, nullptr), MPI_SUCCESS);
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  ASSERT_EQ(MPI_Error_string(MPI_ERR_RANK, text, &len), MPI_SUCCESS);
  std::string expected(text, std::size_t(len));  // "MPI_ERR_RANK: invalid rank"
  if (const auto colon = expected.find(": "); colon != std::string::npos) expected = expected.substr(colon + 2);
  const Error e = check_error(MPI_ERR_RANK);
  EXPECT_EQ(e.kind(), Error::Kind::mpi);
  EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what() << " vs " << expected;
  MPI_Finalize();
}

}  // namespace
}  // namespace tb
