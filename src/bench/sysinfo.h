// bench/sysinfo.h: what `trainbench info` prints and run.json records about the GPUs: per GPU (CUDA
// runtime + NVML) model, UUID, PCI bus id, SMs, memory, compute capability, L2, clocks (current, max,
// application), power limit (enforced, default), NVLink (active links, remote peers), PCIe (current and
// max gen x width), plus the driver / CUDA versions and the peer-access matrix. Without NVML, the CUDA
// runtime fields are still filled and "nvml" says why the rest is missing.
#pragma once

#include <nlohmann/json.hpp>

namespace tb::bench {

int visible_gpu_count();           // 0 when there is no GPU or no driver (never throws)
std::string no_gpu_reason();       // "no CUDA driver found (libcuda.so.1)" / "no GPU visible (CUDA_VISIBLE_DEVICES=...)" / ...
nlohmann::json gpu_info();         // {"driver": ..., "cuda_driver": "13.0", "cuda_runtime": "13.0", "gpus": [...], "peer_access": [[...]], "nvml": "ok" | reason}

}  // namespace tb::bench
