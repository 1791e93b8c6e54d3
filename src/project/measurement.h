// project/measurement.h: the measured inputs of a projection, read from trainbench results (`--from`): files
// (JSONL, one record a line) or folders (their results.jsonl, else every *.jsonl in them).
//   bench "run" (trainbench run <recipe>): the per-GPU proxy of one reference layout (recipe/plan.h) with its fits
//     fb(L) = F0 + F1·L (forward + backward of one micro-batch) and opt(L) = O0 + O1·L (optimizer per step), in
//     ms in the record (extrapolated.fit.f0_ms ...; older records: f0_s ... in seconds), the shard it measured (the
//     layout's tp, cp, ep, etp, micro-batch, sequence; ep 1 and etp = tp in records without them) and its GPU;
//   bench "micro.nccl.<op>" over 2+ GPUs (trainbench micro nccl, check): the NVLink bus bandwidth of all_reduce,
//     all_gather, reduce_scatter, sendrecv, alltoall at the largest size measured (overrides the system file's);
//   bench "train" over 2+ GPUs (trainbench train --gpus N): a real multi-GPU step of a model preset in a layout
//     ("layout": {dp, cp, pp, tp, vp, sequence_parallel}, or the older string "dp1 cp1 pp1 tp2 vp1 sp"; data parallel
//     when absent), its median step and, when profiled ("ops"),
//     the time per step of each op, the communication among them (train_check.h compares them with the model).
// Records with another bench, or not "ok", are skipped.
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "recipe/recipe.h"

namespace tb::project {

struct Measurement {
  std::string where;  // file:line
  std::string recipe, precision, release, gpu;
  recipe::Layout layout;  // the reference layout it stood for (gpus, tp, pp, cp, vp, dp, batches, layers, seq)
  double f0_s = 0, f1_s = 0, o0_s = 0, o1_s = 0;  // seconds (the record's _ms / 1e3)
};

struct NvlinkBusbw {  // GB/s; 0 where not measured
  double all_reduce = 0, all_gather = 0, reduce_scatter = 0, sendrecv = 0, all_to_all = 0;
  int gpus = 0;
  std::string where;
  bool any() const { return all_reduce > 0 || all_gather > 0 || reduce_scatter > 0 || sendrecv > 0 || all_to_all > 0; }
};

struct TrainRun {
  std::string where;  // file:line
  std::string model, precision, gpu, recompute;
  recipe::Layout layout;  // gpus, tp, pp, cp, vp, dp, micro_batch, global_batch, layers, seq, sequence_parallel
  double step_s = 0, tokens_per_s_per_gpu = 0;
  std::vector<std::pair<std::string, double>> ops_s;  // the op profile: name, seconds per step
};

struct Inputs {
  std::vector<Measurement> runs;
  std::vector<TrainRun> trains;  // 2+ GPUs
  NvlinkBusbw nvlink;
  std::vector<std::string> files;  // what was read
};

// Error{config} for a path that cannot be read, a line that is not JSON, a run record without its fits, a train
// record without its step or with a layout it cannot read.
Inputs load_inputs(std::span<const std::filesystem::path> paths);

}  // namespace tb::project
