// core/record.h: result records, one JSON object per measured case, appended to results.jsonl and
// flushed as soon as known (a crash loses nothing already measured). Schema "trainbench.result.v1":
//   required: schema, run, bench, case, world, status ("ok" | "error" | "skipped" | "interrupted": stopped by
//             Ctrl-C or SIGTERM, the data covers what finished)
//   status error:   error {kind, fatal, msg}        status skipped: reason
//   optional:       device (GPU index), metrics with units in key names (time_us, busbw_gbps, ...),
//                   telemetry {power_w_mean, energy_j, sm_clock_mhz_{min,mean}, temp_c_max, throttle}
// Human output (tables, log lines) is a rendering of these records, never a second source.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tb {

class Error;
inline constexpr std::string_view kResultSchema = "trainbench.result.v1";

enum class Status { ok, error, skipped, interrupted };
std::string_view status_name(Status s);

struct Record {
  std::string bench;                                // "micro.gemm", "micro.nccl.all_reduce", "check", ...
  std::string name;                                 // the case, e.g. "bf16/8192x8192x8192"
  int world = 1;                                    // GPUs (ranks) taking part
  std::optional<int> device;                        // GPU index, for per-GPU cases
  Status status = Status::ok;
  nlohmann::json data = nlohmann::json::object();   // metrics and parameters, merged into the record
  std::string reason;                               // skipped: why
  std::string error_kind, error_msg;                // error: what
  bool error_fatal = false;

  static Record failed(std::string bench, std::string name, const Error& e);
  static Record failed(std::string bench, std::string name, std::string_view kind, std::string_view msg);
  static Record skipped(std::string bench, std::string name, std::string reason);
};

nlohmann::json to_json(const Record& r, std::string_view run_id);
// "" when j follows trainbench.result.v1; otherwise the first problem, e.g. "missing key 'bench'".
std::string check_record(const nlohmann::json& j);

// The result files in a folder and every folder below it, sorted by path: *.jsonl, and run.json with `run_json`.
std::vector<std::filesystem::path> result_files_below(const std::filesystem::path& dir, bool run_json = false);

// Appends records to a JSONL file (created with its folders), one line each, flushed per record.
class JsonlSink {
 public:
  JsonlSink(const std::filesystem::path& path, std::string run_id);
  ~JsonlSink();
  JsonlSink(const JsonlSink&) = delete;
  JsonlSink& operator=(const JsonlSink&) = delete;
  void write(const Record& r);
  const std::filesystem::path& path() const { return path_; }
  int count() const { return count_; }

 private:
  std::filesystem::path path_;
  std::string run_id_;
  std::FILE* file_ = nullptr;
  int count_ = 0;
};

}  // namespace tb
