// tests/launch/golden.h: golden text files for rendered scripts and manifests: expect_golden(file, text) compares
// text with tests/launch/golden/<file>; TB_UPDATE_GOLDEN=1 rewrites the file instead (then review the diff).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "../support/source_path.h"

namespace tb::launch::golden {

inline std::filesystem::path dir() { return testing_support::source_path(__FILE__).parent_path() / "golden"; }

inline void expect_golden(const std::string& file, const std::string& text) {
  const auto path = dir() / file;
  if (std::getenv("TB_UPDATE_GOLDEN")) {
    std::ofstream(path) << text;
    return;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in) << "no golden file " << path << ": run the test with TB_UPDATE_GOLDEN=1 to write it";
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(text, ss.str()) << "differs from " << path << " (TB_UPDATE_GOLDEN=1 rewrites it; review the diff)";
}

}  // namespace tb::launch::golden
