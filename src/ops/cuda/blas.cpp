// ops/cuda/blas.cpp: see blas.h.
#include "ops/cuda/blas.h"

#include <fmt/format.h>

namespace tb {

void raise(cublasStatus_t status, const char* expr, std::source_location where) {
  const bool fatal = status == CUBLAS_STATUS_EXECUTION_FAILED && is_sticky(cudaPeekAtLastError());
  raise_status(Error::Kind::cublas, fatal, cublasLtGetStatusName(status), cublasLtGetStatusString(status), expr,
               where);
}

}  // namespace tb

namespace tb::ops {

std::string cublaslt_version() {
  const size_t v = cublasLtGetVersion();
  return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
}

LtHandle::LtHandle() { TB_CHECK(cublasLtCreate(h_.out())); }

}  // namespace tb::ops
