// tests/recipe/golden.h: golden error cases. tests/recipe/golden/<file>.txt holds cases
//   === <name>
//   <TOML text: written to <tmp>/<name>/<name>.toml>
//   --- error
//   <the exact message of the Error{config} that loading it throws, with "<tmp>/<name>/" removed>
// run_cases(file, load) loads each case and compares; TB_UPDATE_GOLDEN=1 rewrites the expected messages.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "../support/source_path.h"
#include <vector>

#include "core/error.h"

namespace tb::recipe::golden {

struct Case {
  std::string name, toml, error;
};

inline std::filesystem::path dir() { return testing_support::source_path(__FILE__).parent_path() / "golden"; }

inline std::vector<Case> read_cases(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::vector<Case> cases;
  std::string line;
  bool in_error = false;
  while (std::getline(in, line)) {
    if (line.starts_with("=== ")) {
      cases.push_back({line.substr(4), "", ""});
      in_error = false;
    } else if (cases.empty()) {
      continue;  // the file's header comment
    } else if (line == "--- error") {
      in_error = true;
    } else if (in_error) {
      if (!line.empty()) cases.back().error += (cases.back().error.empty() ? "" : "\n") + line;
    } else {
      cases.back().toml += line + "\n";
    }
  }
  return cases;
}

// `load` gets the case's file (alone in its folder) and must throw Error{config}.
inline void run_cases(const std::string& golden_file, const std::function<void(const std::filesystem::path&)>& load) {
  const auto path = dir() / golden_file;
  auto cases = read_cases(path);
  ASSERT_FALSE(cases.empty()) << "no cases in " << path;
  const auto tmp = std::filesystem::temp_directory_path() / ("tb_golden_" + std::to_string(::getpid()));
  const bool update = std::getenv("TB_UPDATE_GOLDEN") != nullptr;
  for (auto& c : cases) {
    const auto folder = tmp / c.name;
    std::filesystem::create_directories(folder);
    const auto file = folder / (c.name + ".toml");
    std::ofstream(file) << c.toml;
    std::string got = "(no error)";
    try {
      load(file);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::config) << c.name;
      got = e.what();
      const std::string prefix = folder.string() + "/";
      for (size_t at; (at = got.find(prefix)) != std::string::npos;) got.erase(at, prefix.size());
    }
    if (update) c.error = got;
    EXPECT_EQ(got, c.error) << "golden case '" << c.name << "' in " << path;
  }
  std::filesystem::remove_all(tmp);
  if (!update) return;
  std::ifstream in(path);
  std::string header, line;
  while (std::getline(in, line) && !line.starts_with("=== ")) header += line + "\n";
  std::ofstream out(path);
  out << header;
  for (const auto& c : cases) out << "=== " << c.name << "\n" << c.toml << "--- error\n" << c.error << "\n\n";
}

}  // namespace tb::recipe::golden
