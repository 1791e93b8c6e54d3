// ops/cuda/cudnn.cpp: see cudnn.h.
#include "ops/cuda/cudnn.h"

#include <fmt/format.h>

namespace tb {

void raise(cudnnStatus_t status, const char* expr, std::source_location where) {
  const bool fatal =
      CUDNN_STATUS_CATEGORY(status) == CUDNN_STATUS_EXECUTION_FAILED && is_sticky(cudaPeekAtLastError());
  char last[512] = {};
  cudnnGetLastErrorString(last, sizeof(last));  // the detail behind the status, often empty
  const std::string_view name = cudnnGetErrorString(status);
  raise_status(Error::Kind::cudnn, fatal, name, last[0] ? std::string_view(last) : name, expr, where);
}

void raise_frontend(std::string_view code, std::string_view message, bool unsupported, const char* expr,
                    std::source_location where) {
  const bool fatal = is_sticky(cudaPeekAtLastError());
  raise_status(unsupported ? Error::Kind::unsupported : Error::Kind::cudnn, fatal, code,
               message.empty() ? std::string_view("cudnn-frontend gave no message") : message, expr, where);
}

}  // namespace tb

namespace tb::ops {

std::string cudnn_version() {
  const size_t v = cudnnGetVersion();
  return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
}

CudnnHandle::CudnnHandle(int device) : device_(device) {
  TB_CHECK(cudaSetDevice(device));
  TB_CHECK(cudnnCreate(&h_));
}

CudnnHandle::~CudnnHandle() { release(); }

CudnnHandle& CudnnHandle::operator=(CudnnHandle&& o) noexcept {
  if (this != &o) {
    release();
    device_ = o.device_;
    h_ = std::exchange(o.h_, nullptr);
  }
  return *this;
}

void CudnnHandle::release() {
  if (!h_) return;
  int current = -1;
  const bool restore = cudaGetDevice(&current) == cudaSuccess && current != device_;
  cudaSetDevice(device_);
  cudnnDestroy(h_);  // status ignored: nothing useful can be done in a destructor
  if (restore) cudaSetDevice(current);
  h_ = nullptr;
}

}  // namespace tb::ops
