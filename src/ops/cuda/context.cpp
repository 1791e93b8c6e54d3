// ops/cuda/context.cpp: see context.h.
#include "ops/cuda/context.h"

#include <fmt/format.h>

#include <atomic>
#include <utility>

namespace tb::ops {
namespace {

// Validates the index and makes the device current; the first member initialiser, so that the stream,
// the cuBLASLt handle and the workspace that follow are created on this device.
int select_device(int device) {
  int count = 0;
  TB_CHECK(cudaGetDeviceCount(&count));
  TB_REQUIRE(device >= 0 && device < count,
             fmt::format("GPU {} does not exist: {} GPU(s) visible (indices 0..{})", device, count, count - 1));
  TB_CHECK(cudaSetDevice(device));
  return device;
}

cudaStream_t make_stream() {
  cudaStream_t s = nullptr;
  TB_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

std::atomic<std::size_t> g_live{0}, g_peak{0};

}  // namespace

DeviceMemoryStats device_memory_stats() { return {g_live.load(), g_peak.load()}; }
void reset_device_memory_peak() { g_peak.store(g_live.load()); }

DeviceBuffer::DeviceBuffer(int device, std::size_t bytes) : device_(device), bytes_(bytes) {
  TB_CHECK(cudaSetDevice(device));
  if (bytes) {
    const cudaError_t e = cudaMalloc(&p_, bytes);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      std::size_t free = 0, total = 0;
      cudaMemGetInfo(&free, &total);
      raise_error(Error::Kind::cuda, fmt::format("out of memory on GPU {}: could not allocate {:.2f} GiB ({:.2f} GiB free of {:.2f}); "
                               "use a smaller model, batch or sequence, or more activation recomputation",
                               device, double(bytes) / (1 << 30), double(free) / (1 << 30),
                               double(total) / (1 << 30)));
    }
    TB_CHECK(e);
    const std::size_t live = g_live += bytes;
    std::size_t peak = g_peak.load();
    while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
    }
  }
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : device_(o.device_), p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    release();
    device_ = o.device_;
    p_ = std::exchange(o.p_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::release() {
  if (!p_) return;
  int current = -1;
  const bool restore = cudaGetDevice(&current) == cudaSuccess && current != device_;
  cudaSetDevice(device_);
  cudaFree(p_);  // errors ignored: nothing useful can be done in a destructor
  g_live -= bytes_;
  if (restore) cudaSetDevice(current);
  p_ = nullptr;
  bytes_ = 0;
}

DeviceContext::DeviceContext(int device, std::size_t workspace_bytes)
    : device_(select_device(device)), stream_(make_stream()), workspace_(device, workspace_bytes) {
  int major = 0, minor = 0, l2 = 0;
  TB_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_));
  TB_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device_));
  TB_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device_));
  cc_ = major * 10 + minor;
  l2_bytes_ = std::size_t(l2);
}

DeviceContext::~DeviceContext() {
  if (cudaSetDevice(device_) == cudaSuccess) cudaStreamSynchronize(stream_.get());  // errors ignored here
}

void DeviceContext::activate() const { TB_CHECK(cudaSetDevice(device_)); }

void DeviceContext::synchronize() const {
  activate();
  TB_CHECK(cudaStreamSynchronize(stream_.get()));
}

DeviceScales::DeviceScales(int device, float a, float b, cudaStream_t stream)
    : buf_(device, 2 * kSlot * sizeof(float)) {
  TB_CHECK(cudaMemcpyAsync(buf_.as<float>(), &a, sizeof(float), cudaMemcpyHostToDevice, stream));
  TB_CHECK(cudaMemcpyAsync(buf_.as<float>() + kSlot, &b, sizeof(float), cudaMemcpyHostToDevice, stream));
  TB_CHECK(cudaStreamSynchronize(stream));  // the host floats are on this stack frame
}

GemmPlan& DeviceContext::gemm_plan(const GemmShape& s) {
  if (auto it = plans_.find(s); it != plans_.end()) return it->second;
  activate();
  return plans_.try_emplace(s, lt_.get(), s, workspace_.bytes()).first->second;
}

void DeviceContext::gemm(const GemmShape& s, void* d, const void* a, const void* b, GemmScales scales, float alpha) {
  const GemmPlan& plan = gemm_plan(s);
  activate();
  plan.run(d, a, b, workspace(), stream(), scales, alpha);
}

}  // namespace tb::ops
