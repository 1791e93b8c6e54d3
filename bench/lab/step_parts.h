// bench/lab/step_parts.h: the parts of an 8B-L8-like training step that the optimizer labs (overlap_lab, phase_lab)
// put side by side: forward-like GEMMs [8192 x 4096] x [4096 x 14336]^T (0.96 TFLOP each, random operands: a
// power-limited rate needs real data), AdamW over P parameters (fp32 master weights, moments and gradients, bf16
// weights: 30 bytes per parameter moved), and a stream confined to S SMs by a green context (CUDA driver API).
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/error.h"
#include "ops/cuda/adamw.h"
#include "ops/cuda/context.h"
#include "ops/cuda/fill.h"

namespace tb::lab {

struct GemmLoad {  // y = x w^T, bf16, on uniform [-1, 1] operands
  static constexpr std::int64_t m = 8192, n = 14336, k = 4096;
  ops::DeviceBuffer x{0, std::size_t(m * k * 2)}, w{0, std::size_t(n * k * 2)}, y{0, std::size_t(m * n * 2)};
  ops::GemmShape shape;
  explicit GemmLoad(cudaStream_t st) {
    ops::fill_uniform(x.get(), DType::bf16, std::size_t(m * k), 1, -1, 1, st);
    ops::fill_uniform(w.get(), DType::bf16, std::size_t(n * k), 2, -1, 1, st);
    shape.m = m, shape.n = n, shape.k = k, shape.a = shape.b = shape.d = DType::bf16;
    shape.layout = ops::GemmLayout::abt;
  }
  static double tflop(int count) { return 2e-12 * double(m) * double(n) * double(k) * count; }
  void run(ops::DeviceContext& dc, int count, int sm_target = 0) {  // count GEMMs on dc's stream
    ops::GemmShape s = shape;
    s.sm_target = sm_target;
    for (int i = 0; i < count; ++i) dc.gemm(s, y.get(), x.get(), w.get());
  }
};

struct AdamWLoad {  // the state of P parameters; a step at learning rate 1e-4 keeps the weights finite
  static constexpr double kBytesPerParam = 30;
  std::size_t P;
  ops::DeviceBuffer master, grad, mom, model, scalars;
  AdamWLoad(std::size_t params, cudaStream_t st)
      : P(params), master(0, P * 4), grad(0, P * 4), mom(0, P * 8), model(0, P * 2),
        scalars(0, sizeof(ops::AdamWStepScalars)) {
    ops::fill_uniform(master.get(), DType::f32, P, 3, -1, 1, st);
    ops::fill_uniform(grad.get(), DType::f32, P, 4, -1e-3f, 1e-3f, st);
    TB_CHECK(cudaMemsetAsync(mom.get(), 0, mom.bytes(), st));
    const ops::AdamWStepScalars host{1e-4f, 0, 1};
    TB_CHECK(cudaMemcpy(scalars.get(), &host, sizeof host, cudaMemcpyHostToDevice));
  }
  // Parameters [at, at + count) as one tensor.
  ops::AdamWTensor tensor(std::size_t at, std::size_t count) {
    ops::AdamWTensor t;
    t.master = master.as<float>() + at, t.grad = grad.as<float>() + at, t.exp_avg = mom.as<float>() + at;
    t.exp_avg_sq = mom.as<float>() + P + at, t.model = model.as<__nv_bfloat16>() + at;
    t.numel = std::int64_t(count);
    return t;
  }
  // count groups splitting the parameters evenly (the last takes the remainder).
  std::vector<std::unique_ptr<ops::AdamWGroup>> groups(int count) {
    std::vector<std::unique_ptr<ops::AdamWGroup>> out;
    const std::size_t per = P / std::size_t(count);
    for (int i = 0; i < count; ++i) {
      const std::size_t at = std::size_t(i) * per;
      const ops::AdamWTensor t = tensor(at, i + 1 == count ? P - at : per);
      out.push_back(std::make_unique<ops::AdamWGroup>(0, std::span<const ops::AdamWTensor>(&t, 1)));
    }
    return out;
  }
  void step(const ops::AdamWGroup& g, cudaStream_t st) {
    ops::adamw_step(g, {}, scalars.as<ops::AdamWStepScalars>(), nullptr, st);
  }
  double tbps(double ms) const { return kBytesPerParam * 1e-9 * double(P) / ms; }
};

// A stream of a green context holding S SMs of device 0 (rounded up as the driver groups them: multiples of 8 on an
// H200); ok false where the driver cannot make one.
class GreenStream {
 public:
  GreenStream(int S, int priority) {
    CUdevice dev;
    CUdevResource all, part, rest;
    unsigned n_groups = 1;
    CUdevResourceDesc desc;
    ok_ = cuDeviceGet(&dev, 0) == CUDA_SUCCESS &&
          cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM) == CUDA_SUCCESS &&
          cuDevSmResourceSplitByCount(&part, &n_groups, &all, &rest, 0, unsigned(S)) == CUDA_SUCCESS &&
          cuDevResourceGenerateDesc(&desc, &part, 1) == CUDA_SUCCESS &&
          cuGreenCtxCreate(&green_, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM) == CUDA_SUCCESS &&
          cuGreenCtxStreamCreate(&stream_, green_, CU_STREAM_NON_BLOCKING, priority) == CUDA_SUCCESS;
    sms_ = ok_ ? part.sm.smCount : 0;
  }
  ~GreenStream() {
    if (stream_) cuStreamDestroy(stream_);
    if (green_) cuGreenCtxDestroy(green_);
  }
  GreenStream(const GreenStream&) = delete;
  GreenStream& operator=(const GreenStream&) = delete;
  bool ok() const { return ok_; }
  unsigned sms() const { return sms_; }
  cudaStream_t stream() const { return reinterpret_cast<cudaStream_t>(stream_); }

 private:
  bool ok_ = false;
  unsigned sms_ = 0;
  CUgreenCtx green_ = nullptr;
  CUstream stream_ = nullptr;
};

}  // namespace tb::lab
