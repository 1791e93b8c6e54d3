// ops/cuda/cudnn.h: cuDNN status checks for TB_CHECK, cudnn-frontend errors as tb::Error, an owned handle.
//   TB_CHECK(cudnnSetStream(...)) throws tb::Error{cudnn} with the status name and cuDNN's last error text:
//   "cudnn error CUDNN_STATUS_BAD_PARAM (...) in ops/cuda/attention.cpp:88 ...".
// cudnn-frontend (the graph API) returns cudnn_frontend::error_t {code, err_msg} instead of a status. Its
// headers are heavy and stay in the translation units that build graphs (ops/cuda/attention.cpp,
// attention_fp8.cpp) through ops/cuda/cudnn_graph.h, which defines tb::ok / tb::raise overloads for error_t
// that call raise_frontend() below, so TB_CHECK works on frontend calls there too. GRAPH_NOT_SUPPORTED
// becomes Error{unsupported} (the case is skipped with the frontend's reason); every other frontend code
// becomes Error{cudnn}.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <map>
#include <source_location>
#include <string>
#include <string_view>
#include <utility>

#include "core/error.h"
#include "ops/cuda/context.h"  // DeviceBuffer, Workspace

namespace tb {

inline bool ok(cudnnStatus_t status) { return status == CUDNN_STATUS_SUCCESS; }
// fatal only when an execution failure left a sticky CUDA error behind (the context is gone).
[[noreturn]] void raise(cudnnStatus_t status, const char* expr, std::source_location where);

// code: the frontend's error code name ("GRAPH_NOT_SUPPORTED"); message: its err_msg.
[[noreturn]] void raise_frontend(std::string_view code, std::string_view message, bool unsupported, const char* expr,
                                 std::source_location where);

}  // namespace tb

namespace tb::ops {

// "9.19.0": the cuDNN loaded at run time (cudnnGetVersion = major*10000 + minor*100 + patch in cuDNN 9).
std::string cudnn_version();

// The cuDNN handle of one device: created with that device made current, destroyed with it.
// Not thread-safe (cuDNN handles are not): one per device and thread.
class CudnnHandle {
 public:
  explicit CudnnHandle(int device);
  ~CudnnHandle();
  CudnnHandle(CudnnHandle&& o) noexcept : device_(o.device_), h_(std::exchange(o.h_, nullptr)) {}
  CudnnHandle& operator=(CudnnHandle&& o) noexcept;
  CudnnHandle(const CudnnHandle&) = delete;
  CudnnHandle& operator=(const CudnnHandle&) = delete;

  cudnnHandle_t get() const { return h_; }
  int device() const { return device_; }

 private:
  void release();
  int device_ = -1;
  cudnnHandle_t h_ = nullptr;
};

// One device's cuDNN handle, a workspace grown to the largest plan, and one Plan per Shape: built on first use
// (Plan(cudnnHandle_t, const Shape&)) and cached; a failed build is not cached. A Plan has workspace_bytes(),
// forward(handle, const FwdArgs&, Workspace, stream) and backward(handle, const BwdArgs&, Workspace, stream). Plan every shape before CUDA-graph capture: growing the
// workspace (cudaFree/cudaMalloc) synchronizes the device. (The attention ops: ops/cuda/attention.h, attention_fp8.h.)
template <class Shape, class Plan, class FwdArgs, class BwdArgs>
class CudnnPlanCache {
 public:
  explicit CudnnPlanCache(int device) : handle_(device) {}
  int device() const { return handle_.device(); }
  cudnnHandle_t handle() const { return handle_.get(); }
  std::size_t workspace_bytes() const { return workspace_.bytes(); }

  const Plan& plan(const Shape& s) {
    if (auto it = plans_.find(s); it != plans_.end()) return it->second;
    TB_CHECK(cudaSetDevice(device()));
    const auto it = plans_.try_emplace(s, handle_.get(), s).first;
    if (it->second.workspace_bytes() > workspace_.bytes()) {
      constexpr std::size_t kRound = std::size_t(1) << 20;  // whole MiB: fewer regrowths across shapes
      const std::size_t bytes = (it->second.workspace_bytes() + kRound - 1) / kRound * kRound;
      try {
        workspace_ = DeviceBuffer(device(), bytes);  // the old one stays until the new one exists
      } catch (...) {
        plans_.erase(it);  // a plan without its workspace must not be cached
        throw;
      }
    }
    return it->second;
  }
  void forward(const Shape& s, const FwdArgs& a, cudaStream_t stream) {
    const Plan& p = plan(s);
    TB_CHECK(cudaSetDevice(device()));
    p.forward(handle_.get(), a, {workspace_.get(), workspace_.bytes()}, stream);
  }
  void backward(const Shape& s, const BwdArgs& a, cudaStream_t stream) {
    const Plan& p = plan(s);
    TB_CHECK(cudaSetDevice(device()));
    p.backward(handle_.get(), a, {workspace_.get(), workspace_.bytes()}, stream);
  }

 private:
  CudnnHandle handle_;
  DeviceBuffer workspace_;
  std::map<Shape, Plan> plans_;  // declared last: destroyed before the handle
};

}  // namespace tb::ops
