// tests/support/source_path.h: a test source file's path that opens from the test's working folder. __FILE__ is
// relative to the build folder where the compiler ran from there (ccache's base_dir rewrites absolute paths), while
// ctest runs the tests in the source folder; a relative __FILE__ that does not open from here is taken relative to
// the build folder (the test binary's folder's parent: build/tests/<test>).
#pragma once

#include <filesystem>

namespace tb::testing_support {

inline std::filesystem::path source_path(const char* file) {
  std::filesystem::path f = file;
  std::error_code ec;
  if (f.is_absolute() || std::filesystem::exists(f, ec)) return f;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? f : (exe.parent_path().parent_path() / f).lexically_normal();
}

}  // namespace tb::testing_support
