// core/output_path.cpp: see output_path.h.
#include "core/output_path.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace tb {
namespace fs = std::filesystem;
namespace {

bool is_root(const fs::path& p) {
  std::error_code ec;
  const fs::path c = fs::weakly_canonical(fs::absolute(p, ec), ec);
  return !ec && c == c.root_path();
}

void require_writable_dir(const fs::path& dir, const fs::path& given, std::string_view flag) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    raise_config(fmt::format("{} '{}': cannot create the folder {}: {}", flag, given.string(), dir.string(),
                             ec.message()));
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    raise_config(fmt::format("{} '{}': the folder {} is not writable ({})", flag, given.string(), dir.string(),
                             std::strerror(errno)));
}

}  // namespace

void require_output_dir(const fs::path& dir, std::string_view flag) {
  TB_REQUIRE(!dir.empty(), fmt::format("{} '': an empty path; give a results folder", flag));
  TB_REQUIRE(!is_root(dir), fmt::format("{} '{}': that is the root folder; give a results folder of its own, e.g. "
                                        "results/run1",
                                        flag, dir.string()));
  std::error_code ec;
  const auto st = fs::status(dir, ec);
  TB_REQUIRE(!fs::exists(st) || fs::is_directory(st),
             fmt::format("{} '{}': exists and is not a folder", flag, dir.string()));
  require_writable_dir(dir, dir, flag);
}

void require_output_file(const fs::path& file, std::string_view flag) {
  TB_REQUIRE(!file.empty(), fmt::format("{} '': an empty path; give a file name", flag));
  std::error_code ec;
  TB_REQUIRE(!is_root(file) && !fs::is_directory(file, ec),
             fmt::format("{} '{}': is a folder; give a file name, e.g. {}/report.html", flag, file.string(),
                         file.string() == "/" ? "" : file.string()));
  TB_REQUIRE(file.filename() != "." && file.filename() != ".." && !file.filename().empty(),
             fmt::format("{} '{}': not a file name", flag, file.string()));
  const fs::path parent = file.has_parent_path() ? file.parent_path() : fs::path(".");
  require_writable_dir(parent, file, flag);
  if (fs::exists(file, ec) && ::access(file.c_str(), W_OK) != 0)
    raise_config(fmt::format("{} '{}': the file is not writable ({})", flag, file.string(), std::strerror(errno)));
}

}  // namespace tb
