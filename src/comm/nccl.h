// comm/nccl.h: NCCL for trainbench. TB_CHECK overloads for ncclResult_t, the run-time NCCL version, and
// LocalComms: one process driving several local GPUs (nccl-tests' `-g N` mode): ncclCommInitAll over a
// device list, one non-blocking CUDA stream per device, communicators destroyed by RAII (aborted instead
// when something failed: an exception is unwinding through the owner, an NCCL call raised, or a
// communicator reports an asynchronous error). Rank r of the clique is devices()[r].
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <functional>
#include <source_location>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"

namespace tb {

inline bool ok(ncclResult_t status) { return status == ncclSuccess; }
// Error::Kind::nccl; text = ncclGetErrorString (+ "; " + ncclGetLastError when it says anything).
// ncclUnhandledCudaError, ncclSystemError, ncclInternalError and ncclRemoteError are fatal.
[[noreturn]] void raise(ncclResult_t status, const char* expr, std::source_location where);
bool is_fatal(ncclResult_t status);
std::string_view nccl_result_name(ncclResult_t status);  // "ncclInvalidArgument", ...

std::string nccl_version();  // of the library loaded at run time (ncclGetVersion), e.g. "2.28.9"

namespace comm {

class LocalComms {
 public:
  // Raises tb::Error{nccl} (with what to check) when NCCL cannot build the clique; config for a bad list.
  explicit LocalComms(std::vector<int> devices);
  ~LocalComms();
  LocalComms(const LocalComms&) = delete;
  LocalComms& operator=(const LocalComms&) = delete;

  int size() const { return int(devices_.size()); }
  std::span<const int> devices() const { return devices_; }
  std::span<const cudaStream_t> streams() const { return streams_; }
  std::span<const ncclComm_t> comms() const { return comms_; }
  int device(int rank) const { return devices_[rank]; }
  cudaStream_t stream(int rank) const { return streams_[rank]; }
  ncclComm_t comm(int rank) const { return comms_[rank]; }

  // Runs enqueue(rank) for every rank inside one ncclGroupStart/ncclGroupEnd, with rank's device current.
  void group(const std::function<void(int rank)>& enqueue);
  // Waits for every stream; raises on a CUDA error or an asynchronous NCCL error (then aborts the
  // communicators) or after timeout_s (a hang: aborts too).
  void synchronize(double timeout_s = 300);
  // Marks the clique as broken: the destructor aborts instead of destroying.
  void mark_failed() { failed_ = true; }

 private:
  std::vector<int> devices_;
  std::vector<ncclComm_t> comms_;
  std::vector<cudaStream_t> streams_;
  bool failed_ = false;
  int uncaught_at_start_ = 0;
  void abort_all() noexcept;
};

}  // namespace comm
}  // namespace tb
