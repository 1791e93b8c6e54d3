// core/error.cpp: message formatting for tb::Error and the cudaError_t overloads.
#include "core/error.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace tb {
namespace {
std::atomic<int> g_rank{-1};

std::string_view short_file(std::string_view path) {
  auto pos = path.rfind("/src/");
  if (pos == std::string_view::npos) pos = path.rfind("/tests/");
  return pos == std::string_view::npos ? path : path.substr(pos + 1);
}
}  // namespace

std::string_view kind_name(Error::Kind kind) {
  switch (kind) {
    case Error::Kind::cuda: return "cuda";
    case Error::Kind::cublas: return "cublas";
    case Error::Kind::cudnn: return "cudnn";
    case Error::Kind::nccl: return "nccl";
    case Error::Kind::mpi: return "mpi";
    case Error::Kind::nvml: return "nvml";
    case Error::Kind::config: return "config";
    case Error::Kind::io: return "io";
    case Error::Kind::unsupported: return "unsupported";
    case Error::Kind::internal: return "internal";
  }
  return "unknown";
}

void set_error_rank(int rank) { g_rank = rank; }

std::string error_context() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    dev = -1;
    cudaGetLastError();  // clear: asking must not leave an error behind
  }
  std::string ctx = fmt::format("[host {}", host);
  if (g_rank >= 0) ctx += fmt::format(" rank {}", g_rank.load());
  if (dev >= 0) ctx += fmt::format(" dev {}", dev);
  return ctx + "]";
}

void raise_status(Error::Kind kind, bool fatal, std::string_view status, std::string_view text,
                  std::string_view expr, std::source_location where) {
  std::string detail = fmt::format("{} error {} ({})", kind_name(kind), status, text);
  throw Error(kind, fatal,
              fmt::format("{} in {}:{} {}: {} {}", detail, short_file(where.file_name()), where.line(),
                          where.function_name(), expr, error_context()),
              detail);
}

void raise_config(std::string_view message) { raise_error(Error::Kind::config, message); }

void raise_error(Error::Kind kind, std::string_view message) {
  throw Error(kind, false, std::string(message), std::string(message));
}

bool is_sticky(cudaError_t status) {
  switch (status) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorLaunchTimeout:
    case cudaErrorUnknown:
      return true;
    default:
      return false;
  }
}

void raise(cudaError_t status, const char* expr, std::source_location where) {
  raise_status(Error::Kind::cuda, is_sticky(status), cudaGetErrorName(status), cudaGetErrorString(status),
               expr, where);
}

}  // namespace tb
