// cli/common.h: what every command shares: exit codes, argv parsing with "did you mean", GPU
// requirements, and the run's output folder (run.json + results.jsonl).
#pragma once

#include <CLI/CLI.hpp>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/record.h"
#include "model/lora.h"
#include "recipe/system.h"

namespace tb::cli {

// 0 ok, 1 a case failed (or a check did not pass), 2 usage/configuration error or missing GPUs,
// 3 fatal device error (the CUDA context was lost).
enum Exit : int { kOk = 0, kFailed = 1, kUsage = 2, kFatal = 3 };

// Parses argv; on --help prints help and returns 0; on an error prints one line (with the nearest
// valid flag) and returns 2; returns nullopt when the command should go on.
std::optional<int> parse(CLI::App& app, int argc, char** argv);

// A CLI11 check for a whole number from lo to hi, failing in the user's terms ("--seq: 0 is less than 1"), never
// CLI11's "Value 0 not in range 0.000000 to 1797...(309 digits)".
CLI::Validator whole_number(long long lo, long long hi = 2147483647);

// Options every measuring command has.
struct CommonOptions {
  int gpus = 0;                       // first N visible GPUs; 0: all
  std::vector<int> devices;           // explicit CUDA indices (overrides gpus)
  std::optional<std::filesystem::path> out;         // results folder; default results/<run id>
  std::optional<std::filesystem::path> references;  // references folder
  void add_to(CLI::App& app, bool with_out = true);
};

// The devices to use, or an exit code after a one-line message: no GPU, or fewer than asked/needed.
struct Devices {
  std::vector<int> list;
  std::optional<int> exit;
};
Devices select_devices(std::string_view command, const CommonOptions& opt, int min_gpus = 1);

// The run's folder: run.json written at once (provenance), results.jsonl appended per record.
struct RunOutput {
  std::string run_id;
  std::filesystem::path dir;
  std::string run_file = "run.json";  // run-<run id>.json when the folder held another run's run.json
  std::unique_ptr<JsonlSink> sink;
};
// Refuses a results folder that cannot be right (core/output_path.h) before anything is written.
RunOutput open_run(const CommonOptions& opt, int argc, char** argv);
// Raises Error{io} when results.jsonl was deleted or replaced during the run (its records are not there).
void print_results_location(const RunOutput& run);

nlohmann::json library_versions();  // CUDA runtime/driver, cuBLASLt, cuDNN, NCCL as loaded

// A record's "lora": rank, alpha (the scale times the rank), dropout, targets (model::lora_targets_name; a header
// line: model::lora_text).
nlohmann::json lora_json(const model::LoraConfig& l);

// The GPU model's reference (datasheet peaks, expectations) for device `dev`, or null with a warning.
struct Systems {
  std::vector<recipe::SystemRef> all;
  const recipe::SystemRef* match = nullptr;
};
Systems load_systems_for(const CommonOptions& opt, int dev);
// The dense peak TFLOP/s of GPU dev for a precision ("bf16", "fp8", ...), for MFU after a run has measured: 0 with
// a warning when no systems file matches or one fails to load (the run's results are kept either way).
double peak_tflops_or_warn(const CommonOptions& opt, int dev, std::string_view precision);

}  // namespace tb::cli
