// core/loaded_libraries.cpp: dl_iterate_phdr over the loaded objects; the first whose base name matches wins.
#include "core/loaded_libraries.h"

#include <link.h>

#include <filesystem>

namespace tb {

std::string loaded_library(std::string_view prefix) {
  struct Search {
    std::string_view prefix;
    std::string found;
  } s{prefix, {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) -> int {
        auto* q = static_cast<Search*>(data);
        if (!info->dlpi_name || !*info->dlpi_name) return 0;
        const std::string name = std::filesystem::path(info->dlpi_name).filename().string();
        if (!name.starts_with(q->prefix)) return 0;
        q->found = info->dlpi_name;
        return 1;
      },
      &s);
  return s.found;
}

}  // namespace tb
