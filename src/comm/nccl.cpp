// comm/nccl.cpp: ncclResult_t errors, the NCCL version, and LocalComms (one process, several GPUs).
#include "comm/nccl.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <thread>

namespace tb {

std::string_view nccl_result_name(ncclResult_t status) {
  switch (status) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "ncclUnknownResult";
  }
}

bool is_fatal(ncclResult_t status) {
  return status == ncclUnhandledCudaError || status == ncclSystemError || status == ncclInternalError ||
         status == ncclRemoteError;
}

namespace {
// "<ncclGetErrorString>; <ncclGetLastError>" (the last error only when NCCL has one to tell).
std::string nccl_error_text(ncclResult_t status) {
  std::string text = ncclGetErrorString(status);
  const char* last = ncclGetLastError(nullptr);
  std::string_view extra = last ? last : "";
  while (!extra.empty() && (extra.back() == '\n' || extra.back() == ' ')) extra.remove_suffix(1);
  if (!extra.empty()) text += fmt::format("; {}", extra);
  return text;
}
}  // namespace

void raise(ncclResult_t status, const char* expr, std::source_location where) {
  raise_status(Error::Kind::nccl, is_fatal(status), nccl_result_name(status), nccl_error_text(status), expr,
               where);
}

std::string nccl_version() {
  int v = 0;
  TB_CHECK(ncclGetVersion(&v));
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch; older releases major*1000 + minor*100 + patch.
  if (v >= 10000) return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
  return fmt::format("{}.{}.{}", v / 1000, v / 100 % 10, v % 100);
}

namespace comm {

LocalComms::LocalComms(std::vector<int> devices)
    : devices_(std::move(devices)), uncaught_at_start_(std::uncaught_exceptions()) {
  TB_REQUIRE(!devices_.empty(), "NCCL: no GPU given to build communicators over");
  auto sorted = devices_;
  std::sort(sorted.begin(), sorted.end());
  TB_REQUIRE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(),
             fmt::format("NCCL: GPU list {} names a GPU twice (one rank per GPU)", devices_));

  comms_.assign(devices_.size(), nullptr);
  const ncclResult_t r = ncclCommInitAll(comms_.data(), size(), devices_.data());
  if (r != ncclSuccess) {
    comms_.clear();  // NCCL cleans up after a failed init; nothing of ours to destroy
    const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
    const std::string detail = fmt::format("nccl error {} ({})", nccl_result_name(r), nccl_error_text(r));
    throw Error(Error::Kind::nccl, false,
                fmt::format("NCCL could not create communicators over GPUs {}: {}. Rerun with NCCL_DEBUG=WARN "
                            "to see NCCL's reason; check that CUDA_VISIBLE_DEVICES ({}) shows the GPUs you "
                            "expect and that they can reach each other (peer access: `nvidia-smi topo -m`, "
                            "`trainbench info`) {}",
                            devices_, detail, cvd ? cvd : "unset", error_context()),
                detail);
  }
  try {
    streams_.assign(devices_.size(), nullptr);
    for (int rank = 0; rank < size(); ++rank) {
      TB_CHECK(cudaSetDevice(devices_[rank]));
      TB_CHECK(cudaStreamCreateWithFlags(&streams_[rank], cudaStreamNonBlocking));
    }
  } catch (...) {
    abort_all();
    for (size_t i = 0; i < streams_.size(); ++i)
      if (streams_[i] && cudaSetDevice(devices_[i]) == cudaSuccess) cudaStreamDestroy(streams_[i]);
    throw;
  }
}

LocalComms::~LocalComms() {
  bool abort = failed_ || std::uncaught_exceptions() > uncaught_at_start_;
  for (ncclComm_t c : comms_) {
    ncclResult_t async = ncclSuccess;
    if (c && (ncclCommGetAsyncError(c, &async) != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)))
      abort = true;
  }
  if (abort) {
    abort_all();
  } else {
    for (size_t i = 0; i < comms_.size(); ++i) {
      if (!comms_[i]) continue;
      cudaSetDevice(devices_[i]);
      ncclCommDestroy(comms_[i]);  // waits for the communicator's pending work
    }
  }
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (!streams_[i]) continue;
    cudaSetDevice(devices_[i]);
    cudaStreamDestroy(streams_[i]);
  }
}

void LocalComms::abort_all() noexcept {
  for (size_t i = 0; i < comms_.size(); ++i) {
    if (!comms_[i]) continue;
    cudaSetDevice(devices_[i]);
    ncclCommAbort(comms_[i]);
    comms_[i] = nullptr;
  }
}

void LocalComms::group(const std::function<void(int rank)>& enqueue) {
  TB_CHECK(ncclGroupStart());
  try {
    for (int rank = 0; rank < size(); ++rank) {
      TB_CHECK(cudaSetDevice(devices_[rank]));
      enqueue(rank);
    }
  } catch (const Error& e) {
    ncclGroupEnd();  // close the group; NCCL drops its operations and the first error is the one reported
    failed_ = failed_ || e.fatal();
    throw;
  } catch (...) {
    ncclGroupEnd();
    throw;
  }
  const ncclResult_t end = ncclGroupEnd();
  if (end != ncclSuccess) {
    failed_ = failed_ || is_fatal(end);
    TB_CHECK(end);
  }
}

void LocalComms::synchronize(double timeout_s) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  std::vector<bool> done(devices_.size(), false);
  int remaining = size();
  while (remaining > 0) {
    bool progressed = false;
    for (int rank = 0; rank < size(); ++rank) {
      if (done[rank]) continue;
      TB_CHECK(cudaSetDevice(devices_[rank]));
      const cudaError_t q = cudaStreamQuery(streams_[rank]);
      if (q == cudaSuccess) {
        done[rank] = true;
        --remaining;
        progressed = true;
        continue;
      }
      if (q != cudaErrorNotReady) {
        failed_ = true;
        TB_CHECK(q);
      }
      ncclResult_t async = ncclSuccess;
      TB_CHECK(ncclCommGetAsyncError(comms_[rank], &async));
      if (async != ncclSuccess && async != ncclInProgress) {
        const std::string text = nccl_error_text(async);  // read before the abort
        abort_all();
        failed_ = true;
        raise_status(Error::Kind::nccl, true, nccl_result_name(async), text,
                     fmt::format("asynchronous error on GPU {} (communicators aborted)", devices_[rank]),
                     std::source_location::current());
      }
    }
    if (remaining > 0 && std::chrono::duration<double>(clock::now() - start).count() > timeout_s) {
      abort_all();
      failed_ = true;
      const std::string msg = fmt::format(
          "NCCL operations on GPUs {} did not finish within {:.0f} s (a hang: a GPU stopped or a link is down); "
          "communicators aborted. Rerun with NCCL_DEBUG=WARN and check `nvidia-smi topo -m` {}",
          devices_, timeout_s, error_context());
      throw Error(Error::Kind::nccl, true, msg, msg);
    }
    if (!progressed) std::this_thread::yield();
  }
}

}  // namespace comm
}  // namespace tb
