// recipe/system.h: references/systems/<gpu>.toml, what a GPU model promises: datasheet peaks (dense
// TFLOP/s per precision, HBM TB/s) and measured expectations, each a floor on one metric of one case:
//   [[expect]] bench = "micro.gemm"  case = "bf16/8192x8192x8192"  metric = "tflops"  min = 800
//   (gpus = 2 restricts it to runs over that many GPUs; source says where the number comes from).
// Optional, for `trainbench project` (docs/PROJECTION.md):
//   [network]     the cluster around the GPU: GPUs per NVLink domain, achievable NVLink bus bandwidth per
//                 collective (nccl-tests busbw, GB/s) and latency per ring step, scale-out bandwidth per GPU
//                 (GB/s per direction, line rate) with its achievable fraction and latency per ring step
//   [compute]     achievable rates of the GPU: large bf16 GEMM (TFLOP/s), device memory (TB/s)
//   [projection]  the calibration of the projection against the software the references ran (few, global)
// Unknown keys are errors with file:line and the nearest valid key.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tb::recipe {

struct Expectation {
  std::string bench, name, metric;  // name: the record's "case"
  double min = 0;                   // pass when the measured value >= min
  int gpus = 0;                     // 0: any GPU count; else only runs over exactly this many GPUs
  std::string source;
};

// [network]: what projects communication onto this system (all bandwidths GB/s = 1e9 bytes/s).
struct NetworkRef {
  bool present = false;
  std::string description;
  int nvlink_domain_gpus = 0;          // GPUs joined by NVLink (NVSwitch): the node of a DGX
  double nvlink_all_reduce_gbps = 0, nvlink_all_gather_gbps = 0, nvlink_reduce_scatter_gbps = 0,
         nvlink_sendrecv_gbps = 0;     // achievable bus bandwidth (nccl-tests busbw) inside the domain
  double nvlink_all_to_all_gbps = 0;   // optional in the file (`all_to_all`); absent: the all-gather's
  double nvlink_latency_us = 0;        // per ring step
  double scaleout_gbps = 0;            // per GPU per direction, line rate (8 x 400 Gb/s per 8-GPU node: 50)
  double scaleout_efficiency = 1.0;    // achievable fraction of the line rate (bus bandwidth / line rate)
  double scaleout_latency_us = 0;      // per ring step
  std::string source;
};

// [compute]: achievable rates, the terms of the compute-rate correction between two GPU models.
struct ComputeRef {
  bool present = false;
  double gemm_bf16_tflops = 0;         // large bf16 GEMM
  double membw_tbps = 0;               // device memory, bytes read + written
  std::string source;
};

// [projection]: calibration constants of `trainbench project` (docs/PROJECTION.md says how they were fit).
struct ProjectionRef {
  bool present = false;
  double reference_efficiency = 1.0;   // per-GPU compute rate of the reference software / trainbench's, same GPU
  double overlap_cost = 0.0;           // fraction of an overlapped collective's time that still slows the step
  double straggler_sigma_ms = 0.0;     // per-GPU step-time noise (standard deviation); optional, 0: no straggler term
  std::string source;
};

struct SystemRef {
  std::string file;                  // where it was loaded from
  std::string name;                  // "H200 SXM"
  std::vector<std::string> match;    // substrings of the CUDA device name that select this file
  int sms = 0;
  double memory_gib = 0;
  double hbm_tbps = 0;               // datasheet HBM bandwidth, TB/s
  double nvlink_gbps = 0;            // datasheet NVLink bandwidth per GPU per direction, GB/s
  double peak_bf16 = 0, peak_f16 = 0, peak_tf32 = 0, peak_fp8 = 0, peak_f32 = 0;  // dense TFLOP/s
  double outlier_fraction = 0.10;    // a GPU this far below its siblings' median is flagged
  std::vector<Expectation> expect;
  NetworkRef network;
  ComputeRef compute;
  ProjectionRef projection;

  // Dense peak for a GEMM input type name ("bf16", "f16", "tf32", "f32", "e4m3", "e5m2", "fp8"); 0 if unknown.
  double peak_tflops(std::string_view dtype) const;
};

SystemRef load_system(const std::filesystem::path& file);                 // throws Error{config} with file:line
std::vector<SystemRef> load_systems(const std::filesystem::path& dir);    // every *.toml in dir, sorted
const SystemRef* match_system(const std::vector<SystemRef>& systems, std::string_view device_name);

// The references folder: `explicit_dir` if given, else $TRAINBENCH_REFERENCES, else the first of
// data_dir_candidates("references") that holds a systems/ folder.
std::filesystem::path find_references_dir(const std::optional<std::filesystem::path>& explicit_dir);
// The data folder `name` (references, recipes): explicit_dir, else $env_var, else the first of
// data_dir_candidates(name) that holds `marker` (a subfolder, or "." for any). Error{config} naming the flag, the
// variable and the folders looked in when none exists.
std::filesystem::path find_data_dir(std::string_view name, std::string_view env_var, std::string_view flag,
                                    const std::optional<std::filesystem::path>& explicit_dir, std::string_view marker);
// Where a data folder is looked for, in order: next to the binary (<exe dir>/name), the installed tree
// (<exe dir>/../share/trainbench/name), the source tree around a build folder (<exe dir>/../name,
// <exe dir>/../../name), and the source tree the binary was built from.
std::vector<std::filesystem::path> data_dir_candidates(std::string_view name);

}  // namespace tb::recipe
