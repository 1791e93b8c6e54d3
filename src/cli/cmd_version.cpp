// cli/cmd_version.cpp: `trainbench --version`: this build (version, git describe, build type, CUDA archs) and the
// CUDA libraries as loaded by this process, each with its version and the file it came from; a library that is
// absent (the CUDA driver and NVML on a machine without a GPU driver) is named with the reason. Never needs a GPU.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>

#include "bench/nvml.h"
#include "bench/sysinfo.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "core/build_info.h"
#include "core/loaded_libraries.h"

namespace tb::cli {
namespace {

// "(/usr/local/cuda/lib/libcudnn.so.9.19.0)" for a loaded library, else `otherwise`.
std::string from(std::string_view prefix, std::string_view otherwise) {
  const std::string path = loaded_library(prefix);
  if (path.empty()) return std::string(otherwise);
  std::error_code ec;
  const auto real = std::filesystem::weakly_canonical(path, ec);
  return fmt::format("({})", ec ? path : real.string());
}

void line(const char* what, const std::string& text) { std::printf("  %-13s %s\n", what, text.c_str()); }

}  // namespace

int cmd_version(int, char**) {
  const BuildInfo& b = build_info();
  std::printf("trainbench %s (%s, %s, CUDA archs %s, built %s)\n", b.version, b.git_describe, b.build_type,
              b.cuda_archs, b.built_at);
  const nlohmann::json v = library_versions();  // cuBLASLt, cuDNN, NCCL, CUDA runtime and driver; never throws here
  const auto get = [&](const char* k) { return v.contains(k) ? v[k].get<std::string>() : std::string(); };
  std::printf("libraries loaded:\n");
  line("CUDA runtime", fmt::format("{} {}", get("cuda_runtime"),
                                   from("libcudart.so", "(linked statically into trainbench)")));
  const std::string driver = get("cuda_driver");
  line("CUDA driver", driver.empty() ? fmt::format("none: {}", bench::no_gpu_reason())
                                     : fmt::format("{} {}", driver, from("libcuda.so", "")));
  line("cuBLASLt", fmt::format("{} {}", get("cublasLt"), from("libcublasLt.so", "")));
  line("cuDNN", fmt::format("{} {}, built against {}", get("cudnn"), from("libcudnn.so", ""), get("cudnn_headers")));
  line("NCCL", fmt::format("{} {}", get("nccl"), from("libnccl.so", "")));
  const auto& nvml = bench::Nvml::get();
  line("NVML", nvml.available() ? from("libnvidia-ml.so", "loaded") : fmt::format("none: {}", nvml.reason()));
  return kOk;
}

}  // namespace tb::cli
