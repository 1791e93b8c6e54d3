// core/error.h: tb::Error, the one exception every layer throws, and TB_CHECK / TB_REQUIRE.
//
// TB_CHECK(expr) works for any library status type with tb::ok(status) and tb::raise(status, ...)
// overloads. core defines them for cudaError_t; each layer adds its own library's next to its wrapper
// (ops/cuda/blas.h: cublasStatus_t, comm/nccl.h: ncclResult_t, comm/mpi.h: tb::MpiStatus,
// bench/nvml.h: nvmlReturn_t), so core includes no library header but the CUDA runtime.
// A status type with no overload does not compile.
//
// Message shape: "<kind> error <status> (<text>) in <file>:<line> <function>: <expr> [host h rank r dev d]"
#pragma once

#include <cuda_runtime_api.h>

#include <source_location>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tb {

class Error : public std::runtime_error {
 public:
  enum class Kind { cuda, cublas, cudnn, nccl, mpi, nvml, config, io, unsupported, internal };
  // fatal: the device context is poisoned (illegal address, launch failure, ...): report, then stop the
  // process; anything else is recoverable (the case is recorded as an error, the sweep goes on).
  Error(Kind kind, bool fatal, std::string message, std::string detail = {})
      : std::runtime_error(std::move(message)), kind_(kind), fatal_(fatal), detail_(std::move(detail)) {}
  Kind kind() const { return kind_; }
  bool fatal() const { return fatal_; }
  const std::string& detail() const { return detail_; }  // the short reason, without location

 private:
  Kind kind_;
  bool fatal_;
  std::string detail_;
};

std::string_view kind_name(Error::Kind kind);

// Where errors happen: the rank is set once by the bootstrap, the host and device are read when raising.
void set_error_rank(int rank);
std::string error_context();  // "[host h rank r dev d]"

// Builds the full message and throws. Used by every ok/raise overload.
[[noreturn]] void raise_status(Error::Kind kind, bool fatal, std::string_view status,
                               std::string_view text, std::string_view expr, std::source_location where);
// Errors that speak to the user (bad input, unsupported request): the message says what and what to do.
[[noreturn]] void raise_config(std::string_view message);
[[noreturn]] void raise_error(Error::Kind kind, std::string_view message);

inline bool ok(cudaError_t status) { return status == cudaSuccess; }
[[noreturn]] void raise(cudaError_t status, const char* expr, std::source_location where);
bool is_sticky(cudaError_t status);  // errors after which the CUDA context cannot be used

}  // namespace tb

#define TB_CHECK(expr)                                                        \
  do {                                                                        \
    auto tb_status_ = (expr);                                                 \
    if (!::tb::ok(tb_status_)) [[unlikely]]                                   \
      ::tb::raise(tb_status_, #expr, std::source_location::current());        \
  } while (0)

#define TB_CHECK_LAUNCH() TB_CHECK(cudaGetLastError())

// Configuration / input errors: TB_REQUIRE(cond, message) throws Error{config} with the message.
#define TB_REQUIRE(cond, msg)                                                 \
  do {                                                                        \
    if (!(cond)) [[unlikely]]                                                 \
      ::tb::raise_config(msg);                                              \
  } while (0)
