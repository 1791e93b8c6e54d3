// ops/cuda/library_versions.h: versions of the CUDA libraries this layer uses, as loaded at run time
// (and as compiled against): {"cublasLt": "13.0.2", "cudnn": "9.19.0", "cudnn_headers": "9.19.0"}.
#pragma once

#include <nlohmann/json.hpp>

namespace tb::ops {
nlohmann::json library_versions();
}
