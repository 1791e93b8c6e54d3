// core/loaded_libraries.h: the shared libraries this process has loaded, by file name (dl_iterate_phdr), so
// `trainbench --version` and provenance can say which libcudnn or libnccl actually ran, not only its version.
#pragma once

#include <string>
#include <string_view>

namespace tb {
// The full path of the first loaded object whose file name starts with `prefix` ("libcudnn.so", "libnccl.so"),
// "" when none is loaded.
std::string loaded_library(std::string_view prefix);
}  // namespace tb
