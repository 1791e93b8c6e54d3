// report/run_args.cpp: point -> `trainbench run` arguments (sweep_args.h).
#include "report/run_args.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "core/suggest.h"

namespace tb::report {

void check_sweep_key(const std::string& key) {
  const auto& k = sweep_keys();
  TB_REQUIRE(std::find(k.begin(), k.end(), key) != k.end(),
             fmt::format("unknown sweep key '{}'{}; keys: layers, seq, micro_batch, global_batch, tp, pp, cp, vp, "
                         "precision, recompute, ref_gpus, steps",
                         key, did_you_mean(key, k)));
}

void check_sweep_value(const std::string& key, const std::string& value) {
  check_sweep_key(key);
  const auto one_of = [&](std::initializer_list<const char*> names, const char* list) {
    for (const char* n : names)
      if (value == n) return;
    raise_config(fmt::format("{}={}: {} takes {}", key, value, key, list));
  };
  if (key == "precision") return one_of({"bf16", "fp8", "fp32"}, "bf16, fp8 or fp32");
  if (key == "recompute") return one_of({"none", "selective", "full"}, "none, selective or full");
  const bool whole = !value.empty() && value.size() <= 9 &&
                     std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; });
  TB_REQUIRE(whole && std::stol(value) >= 1, fmt::format("{}={}: {} takes a positive integer", key, value, key));
}

std::vector<std::string> run_args(const Point& p) {
  std::vector<std::string> a;
  for (const auto& [k, v] : p) {
    check_sweep_key(k);
    if (k == "precision" || k == "recompute" || k == "steps") {
      a.push_back("--" + k);
      a.push_back(v);
    } else if (k == "ref_gpus") {
      a.push_back("--ref-gpus");
      a.push_back(v);
    } else {
      a.push_back("--set");
      a.push_back(k + "=" + v);
    }
  }
  return a;
}

std::string last_line(const std::string& log_tail) {
  std::string best;
  std::size_t pos = 0;
  while (pos < log_tail.size()) {
    std::size_t end = log_tail.find('\n', pos);
    if (end == std::string::npos) end = log_tail.size();
    std::string line = log_tail.substr(pos, end - pos);
    if (line.find_first_not_of(" \t\r") != std::string::npos) best = line;
    pos = end + 1;
  }
  return best;
}

PointRun run_point(const std::vector<std::string>& args, const std::filesystem::path& dir) {
  std::vector<std::string> argv{self_exe(), "run"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--out");
  argv.push_back(dir.string());
  std::filesystem::create_directories(dir);
  const ExecResult r = exec(argv, dir / "log.txt");
  return {r.rc, last_line(r.output)};
}

}  // namespace tb::report
