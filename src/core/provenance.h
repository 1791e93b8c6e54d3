// core/provenance.h: what a run was, written once per run to <out>/run.json and joined to every record
// by the run id: host, CPU, memory, time, argv, build (git describe, type, archs), the environment
// that changes results (NCCL_*, CUDA_*, UCX_*, OMPI_*/SLURM_* ids, TRAINBENCH_*). Layers that know
// GPUs and libraries add "gpus", "driver" and "versions" (bench/sysinfo.h).
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace tb {

// "20261130T0102Z-<host>-<4 hex>": sortable, unique per run; $TRAINBENCH_RUN_ID instead when set (the ranks of one
// job share it, so their records join).
std::string make_run_id();
// This process's rank and world size as the launcher set them (OpenMPI, PMI, Slurm); 0 and 1 without a launcher.
struct LaunchRank {
  int rank = 0, world = 1;
};
LaunchRank launch_rank();
std::string hostname();
nlohmann::json host_provenance(int argc, char** argv, const std::string& run_id);
nlohmann::json relevant_env();  // {"NCCL_NVLS_ENABLE": "0", ...}
void write_json_file(const std::filesystem::path& path, const nlohmann::json& j);  // atomically (tmp + rename)
// Writes a run's provenance into its results folder and returns the file's name: run.json, unless the folder holds
// another run's run.json already (a second run into one --out): then run-<run id>.json, so no run's provenance is
// overwritten (records join their run file by the run id). The ranks of one job share the run id and the file.
std::string write_run_file(const std::filesystem::path& dir, const std::string& run_id, const nlohmann::json& j);

}  // namespace tb
