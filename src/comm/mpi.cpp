// comm/mpi.cpp: MPI error text and launcher detection.
// MPI_Error_string may only be called between MPI_Init and MPI_Finalize (Open MPI 4.1 aborts the process
// otherwise), so outside that window the text comes from a table of the MPI standard's error classes.
#define OMPI_SKIP_MPICXX 1  // C API only: no deprecated C++ bindings (and no libmpi_cxx symbols)
#define MPICH_SKIP_MPICXX 1
#include "comm/mpi.h"

#include <mpi.h>

#include <cstdlib>
#include <string>
#include <string_view>

namespace tb {

static_assert(MPI_SUCCESS == 0, "tb::ok(MpiStatus) assumes MPI_SUCCESS == 0");

namespace {

struct ErrorClass {
  int code;
  const char* name;
  const char* text;  // Open MPI's wording
};
const ErrorClass kClasses[] = {
    {MPI_ERR_BUFFER, "MPI_ERR_BUFFER", "invalid buffer pointer"},
    {MPI_ERR_COUNT, "MPI_ERR_COUNT", "invalid count argument"},
    {MPI_ERR_TYPE, "MPI_ERR_TYPE", "invalid datatype"},
    {MPI_ERR_TAG, "MPI_ERR_TAG", "invalid tag"},
    {MPI_ERR_COMM, "MPI_ERR_COMM", "invalid communicator"},
    {MPI_ERR_RANK, "MPI_ERR_RANK", "invalid rank"},
    {MPI_ERR_REQUEST, "MPI_ERR_REQUEST", "invalid request"},
    {MPI_ERR_ROOT, "MPI_ERR_ROOT", "invalid root"},
    {MPI_ERR_GROUP, "MPI_ERR_GROUP", "invalid group"},
    {MPI_ERR_OP, "MPI_ERR_OP", "invalid reduce operation"},
    {MPI_ERR_TOPOLOGY, "MPI_ERR_TOPOLOGY", "invalid communicator topology"},
    {MPI_ERR_DIMS, "MPI_ERR_DIMS", "invalid topology dimension"},
    {MPI_ERR_ARG, "MPI_ERR_ARG", "invalid argument of some other kind"},
    {MPI_ERR_UNKNOWN, "MPI_ERR_UNKNOWN", "unknown error"},
    {MPI_ERR_TRUNCATE, "MPI_ERR_TRUNCATE", "message truncated"},
    {MPI_ERR_OTHER, "MPI_ERR_OTHER", "known error not in list"},
    {MPI_ERR_INTERN, "MPI_ERR_INTERN", "internal error"},
    {MPI_ERR_IN_STATUS, "MPI_ERR_IN_STATUS", "error code in status"},
    {MPI_ERR_PENDING, "MPI_ERR_PENDING", "pending request"},
    {MPI_ERR_NO_MEM, "MPI_ERR_NO_MEM", "out of memory"},
};

}  // namespace

bool mpi_active() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);  // both may be called at any time
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

void raise(MpiStatus s, const char* expr, std::source_location where) {
  std::string status = "code " + std::to_string(s.code);
  std::string text = "unknown MPI error (MPI is not initialized, so MPI_Error_string cannot name it)";
  char buf[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (mpi_active() && MPI_Error_string(s.code, buf, &len) == MPI_SUCCESS && len > 0) {
    text.assign(buf, std::size_t(len));  // usually "MPI_ERR_NAME: description"
    const auto colon = text.find(": ");
    if (colon != std::string::npos && text.starts_with("MPI_ERR_")) {
      status = text.substr(0, colon);
      text = text.substr(colon + 2);
    }
  } else {
    for (const auto& c : kClasses)
      if (c.code == s.code) {
        status = c.name;
        text = c.text;
      }
  }
  raise_status(Error::Kind::mpi, false, status, text, expr, where);
}

bool launched_by_mpi() {
  auto set = [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0';
  };
  if (set("OMPI_COMM_WORLD_SIZE") || set("PMI_SIZE") || set("PMIX_RANK")) return true;
  if (set("SLURM_STEP_ID")) {
    const char* ntasks = std::getenv("SLURM_NTASKS");
    return ntasks != nullptr && std::atoi(ntasks) > 1;
  }
  return false;
}

}  // namespace tb
