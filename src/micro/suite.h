// micro/suite.h: the system microbenchmarks as a table of suites, each {name, summary, min_gpus, run}
// (nvbandwidth's Testcase / nccl-tests' per-collective table). A suite turns a plain Spec into records;
// it never times itself (bench/loop.h) and never decides pass/fail (report/verdict.h).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <string_view>
#include <vector>

#include "core/record.h"

namespace tb::bench {
class Telemetry;
}
namespace tb::recipe {
struct SystemRef;
}

namespace tb::micro {

struct Spec {
  std::vector<int> devices;          // CUDA device indices; empty: all visible
  std::vector<std::string> dtypes;   // gemm: bf16 f16 tf32 e4m3 e4m3xe5m2; nccl: f32 bf16 ...; empty: suite default
  std::vector<std::string> sizes;    // gemm: "8192" or "MxNxK"; others: byte sizes "64M", ranges "1M:1G" (x2 steps)
  std::vector<std::string> shapes;   // gemm: named shape sets, e.g. "llama3.1-8b", "llama3.1-70b"
  std::vector<int> tp = {1};         // gemm shape sets: tensor-parallel sizes
  std::vector<std::string> ops;      // nccl: collectives; membw: copy read write triad; links: h2d d2h peer
  std::string reduce_op = "sum";     // nccl: sum prod max min avg
  int warmup = -1;                   // -1: the suite's default
  int iters = -1;
  bool quick = false;                // the reduced size set used by `trainbench check`
  bool verify = true;                // check results (GEMM against a reference, NCCL data)
  bool tune = true;                  // gemm: time the heuristic's candidate algorithms, keep the fastest
};

// Where a suite's records go: the JSONL sink (flushed per record), a live line on stdout, and memory
// (for `check`'s verdicts).
class Output {
 public:
  Output(JsonlSink* sink, bool print) : sink_(sink), print_(print) {}
  void add(Record r, std::string_view line = {});  // line: the human rendering of r ("" prints nothing)
  const std::vector<Record>& records() const { return records_; }
  bool any_error() const;

 private:
  JsonlSink* sink_;
  bool print_;
  std::vector<Record> records_;
};

struct Context {
  Spec spec;
  Output& out;
  const recipe::SystemRef* system = nullptr;  // datasheet peaks of this GPU model; null when unknown
  bench::Telemetry* telemetry = nullptr;      // may be unavailable (no NVML)
  std::optional<std::pair<std::uint64_t, std::uint64_t>> timed_window;  // set by note_timing (micro/case.h)
};

struct Suite {
  std::string_view name, summary;
  int min_gpus;
  void (*run)(Context& ctx);
};

std::span<const Suite> suites();
const Suite* find_suite(std::string_view name);

// Helpers shared by the suites.
std::vector<int> resolve_devices(const Spec& spec);  // spec.devices or all visible; validated
std::vector<long long> parse_sizes(std::span<const std::string> specs);  // "64M", "1G", "1M:1G" (x2) -> bytes
std::string format_bytes(long long bytes);                                  // 1073741824 -> "1GiB"

}  // namespace tb::micro
