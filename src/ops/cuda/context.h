// ops/cuda/context.h: what running work on one GPU needs, owned by whoever runs it (no globals):
// the device index, a non-blocking compute stream, the cuBLASLt handle, a cuBLASLt workspace (64 MiB) and
// the GEMM plans, planned on first use of a shape and kept (std::map<GemmShape, GemmPlan>; the GEMM
// microbenchmark and the model go through the same cache). Methods make the device current as needed.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <memory>

#include "ops/cuda/blas.h"
#include "ops/cuda/gemm.h"

namespace tb::ops {

// Bytes held by live DeviceBuffers of this process (all devices) and their high-water mark: what trainbench
// itself allocated, without the CUDA context or the libraries' own allocations.
struct DeviceMemoryStats {
  std::size_t live = 0, peak = 0;
};
DeviceMemoryStats device_memory_stats();
void reset_device_memory_peak();  // peak = live

// cudaMalloc'ed bytes on one device (256-byte aligned), freed when destroyed. Out of memory raises
// Error{cuda} saying how much was asked and how much is free.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(int device, std::size_t bytes);  // makes `device` current
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return p_; }
  template <class T> T* as() const { return static_cast<T*>(p_); }
  std::size_t bytes() const { return bytes_; }

 private:
  void release();
  int device_ = -1;
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
};

// Per-tensor fp8 scales a and b on the device, each in its own 256-byte slot: cuBLASLt rejects a scale
// pointer that is only 4-byte aligned (CUBLAS_STATUS_NOT_SUPPORTED at cublasLtMatmul, seen on H200).
class DeviceScales {
 public:
  DeviceScales(int device, float a, float b, cudaStream_t stream);
  GemmScales scales() const { return {buf_.as<float>(), buf_.as<float>() + kSlot}; }
  static constexpr std::size_t kSlot = 64;  // floats: 256 bytes

 private:
  DeviceBuffer buf_;
};

class DeviceContext {
 public:
  static constexpr std::size_t kWorkspaceBytes = std::size_t(64) << 20;

  explicit DeviceContext(int device, std::size_t workspace_bytes = kWorkspaceBytes);  // makes `device` current
  ~DeviceContext();  // waits for the stream, then frees everything
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int device() const { return device_; }
  int compute_capability() const { return cc_; }  // 90 for sm_90 (H100/H200), 89 for Ada
  std::size_t l2_bytes() const { return l2_bytes_; }
  cudaStream_t stream() const { return stream_.get(); }
  cublasLtHandle_t lt() const { return lt_.get(); }
  Workspace workspace() const { return {workspace_.get(), workspace_.bytes()}; }

  void activate() const;     // cudaSetDevice(device())
  void synchronize() const;  // waits for the stream

  // The plan for s: planned (device made current) on first use, then cached. Throws as GemmPlan does.
  GemmPlan& gemm_plan(const GemmShape& s);
  template <class F>
  void for_each_plan(F&& f) {  // every cached plan (autotuning)
    for (auto& [shape, plan] : plans_) f(plan);
  }
  // Enqueues D = A·B^T on stream() with the cached plan and this context's workspace.
  void gemm(const GemmShape& s, void* d, const void* a, const void* b, GemmScales scales = {}, float alpha = 1.0f);

 private:
  struct StreamDeleter {
    void operator()(cudaStream_t s) const { cudaStreamDestroy(s); }
  };
  int device_;
  int cc_ = 0;
  std::size_t l2_bytes_ = 0;
  std::unique_ptr<CUstream_st, StreamDeleter> stream_;
  LtHandle lt_;
  DeviceBuffer workspace_;
  std::map<GemmShape, GemmPlan> plans_;  // destroyed first: plans use lt_
};

}  // namespace tb::ops
