// cli/run_recipe.h: what `trainbench run`'s two modes share. cmd_run.cpp parses the request and measures the
// one-device proxy (recipe/plan.h); run_distributed.cpp trains the whole model at the recipe's layout on the job's
// ranks. Both build their TrainSpec with recipe_spec, write one "run" record whose figures are `extrapolated`
// (proxy) or `measured` (distributed), and end with finish_run: TFLOP/s per GPU and MFU from the figures'
// tokens/s per GPU (the reference's FLOP convention, recipe/convention.h), the comparison with the published
// reference, the record, the printed table.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/common.h"
#include "core/record.h"
#include "recipe/plan.h"
#include "recipe/reference.h"
#include "train/spec.h"

namespace tb::cli {

struct RunRequest {
  CommonOptions common;
  const recipe::Recipe* recipe = nullptr;
  recipe::RunPlan plan;
  std::vector<recipe::ReferenceRow> ref_rows;
  std::string precision, device, ref_gpu, recompute, fp8_recipe, fp8_format;
  int steps = 0, warmup = 0;
  int argc = 0;
  char** argv = nullptr;
  bool cuda() const { return device == "cuda"; }
};

// The spec of one training run of the recipe: model m, micro and global batch, the request's steps, device,
// recompute and precision, the plan's data.
train::TrainSpec recipe_spec(const RunRequest& q, const model::ModelConfig& m, int micro_batch, int global_batch);

// The run record's fields both modes write: recipe, precision, release, layout, mode, proxy, differences, GPU, peak,
// FLOPs per token in each convention, backend, recompute (and FP8's recipe and format), the data, the tokens per step
// of the layout (global batch x seq) and the tokens the FLOPs count ("rows": every token of the rows, the references'
// basis; each mode adds loss_tokens_per_step, the targets the loss counts: packed data's answers).
nlohmann::json run_record_data(const RunRequest& q, const std::string& gpu_name, double peak_tflops);

// TFLOP/s per GPU and MFU into rec, the comparison, the record written, the table and the results folder printed;
// the exit status (kFailed below the reference, as `compare` exits).
int finish_run(const RunRequest& q, Record& rec, RunOutput& run);

// The distributed mode: re-executes under mpirun for `run --gpus N`, or runs as a rank of the launcher's job.
int run_distributed(RunRequest& q);

}  // namespace tb::cli
