// ops/cuda/library_versions.cpp: cuBLASLt (ops/cuda/blas.h) and cudnnGetVersion decoded as major.minor.patch.
#include "ops/cuda/library_versions.h"

#include <cudnn.h>
#include <fmt/format.h>

#include "ops/cuda/blas.h"

namespace tb::ops {

nlohmann::json library_versions() {
  const size_t dnn = cudnnGetVersion();    // major*10000 + minor*100 + patch (cuDNN 9)
  return {{"cublasLt", cublaslt_version()},
          {"cudnn", fmt::format("{}.{}.{}", dnn / 10000, dnn / 100 % 100, dnn % 100)},
          {"cudnn_headers", fmt::format("{}.{}.{}", CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL)}};
}

}  // namespace tb::ops
