// core/record.h: result records, one JSON object per measured case, appended to results.jsonl and
// flushed as soon as known (a crash loses nothing already measured). Each record is one write() of one whole line
// to a file opened for appending, so the ranks of a job can share a file; a line cut by a crash is cut off (with a
// warning) before the next record is appended. Schema "trainbench.result.v1":
//   required: schema, run, bench, case, world, status ("ok" | "error" | "skipped" | "interrupted": stopped by
//             Ctrl-C or SIGTERM, the data covers what finished)
//   status error:   error {kind, fatal, msg}        status skipped: reason
//   optional:       device (GPU index; `train` records: the backend, "cuda" or "cpu"), metrics with units in key
//                   names (time_us, busbw_gbps, ...), telemetry {power_w_mean, energy_j, sm_clock_mhz_{min,mean}, temp_c_max, throttle}
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
// "" when j follows trainbench.result.v1; otherwise the first problem, e.g. "missing key 'bench'". Also checks the
// types of the measured values: a key with a unit in its name (step_s, time_us, busbw_gbps, peak_alloc_gib, mfu,
// tflops, tokens_per_s_per_gpu, ...) holds a number or null, or an object or array of them (step_ms {median, ...}).
std::string check_record(const nlohmann::json& j);
// The record as one line of JSON; text that is not UTF-8 is replaced (U+FFFD) rather than thrown on.
std::string dump_line(const nlohmann::json& j);

// The result files in a folder and every folder below it, sorted by path: *.jsonl, and the run files (run.json,
// run-<run id>.json: provenance/run_file) with `run_json`. A folder that cannot be read (a symlink loop, no
// permission) raises Error{config} naming it.
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
  // False when the file was deleted or replaced since it was opened (its records are then not where they were
  // written).
  bool still_there() const;
  int cut_bytes() const { return cut_bytes_; }  // the incomplete last line cut off when opening (0: none)

 private:
  std::filesystem::path path_;
  std::string run_id_;
  int fd_ = -1;
  unsigned long dev_ = 0, ino_ = 0;
  int count_ = 0, cut_bytes_ = 0;
};

}  // namespace tb
