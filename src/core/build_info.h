// core/build_info.h: what this binary was built from (generated at build time by cmake/build_info.cmake).
#pragma once
namespace tb {
struct BuildInfo {
  const char* version;       // project version
  const char* git_describe;  // `git describe --always --dirty --tags` of the source tree
  const char* build_type;    // Release, Debug, ...
  const char* cuda_archs;    // CMAKE_CUDA_ARCHITECTURES, e.g. "90a"
  const char* built_at;      // compiler __DATE__ __TIME__
};
const BuildInfo& build_info();
}  // namespace tb
