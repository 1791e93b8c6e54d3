// report/compare.h: a `run` record against the published reference of the same recipe x GPUs x precision
// (recipe/reference.h), per GPU:
//   ratio = our tokens/s per GPU / the reference's      (the same global batch and sequence: step-time ratio inverted)
//   TFLOP/s per GPU in the reference's FLOP convention = tokens/s per GPU x its FLOPs per token (the record carries
//   them per convention); MFU against each side's own GPU peak.
//   verdict: meets when 1 - tol <= ratio <= 1 + tol (tol: the reference group's tolerance, 0.05 unless it says), below
//   under, above over; none without a reference row.
// A proxy's figures are extrapolated (recipe/plan.h): its caveat says what is not included.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "recipe/reference.h"

namespace tb::report {

enum class RefVerdict { meets, below, above, none };
std::string_view ref_verdict_name(RefVerdict v);
RefVerdict ref_verdict_for(double ratio, double tolerance = 0.05);

struct Comparison {
  std::string recipe, precision, gpu, release;  // ours: the GPU's name
  int gpus = 0;                                 // the reference run's GPU count
  bool proxy = false;        // not the reference run itself: the one-GPU proxy, or a distributed run with --set
  bool distributed = false;  // the ranks trained the model at the layout (figures `measured`, not extrapolated)
  std::string caveat;
  double tokens_per_gpu = 0, step_s = 0, tflops = 0, mfu = 0;
  double tokens_per_gpu_se = 0;  // one standard error (of the extrapolation, or over the measured steps); 0: none
  std::string ref_gpu, ref_release, convention, ref_where;
  double ref_tokens_per_gpu = 0, ref_step_s = 0, ref_tflops = 0, ref_mfu = 0;
  double ratio = 0, tolerance = 0.05;
  RefVerdict verdict = RefVerdict::none;
  std::string why_none;  // no reference row: which counts exist
};

// rec: one results.jsonl record with bench "run". ref_gpu: the reference GPU model ("H100").
Comparison compare_run(const nlohmann::json& rec, const std::vector<recipe::ReferenceRow>& rows,
                       const std::string& ref_gpu);

// The terminal table (one row per comparison) and a one-line legend.
std::string render_comparisons(const std::vector<Comparison>& cs);

}  // namespace tb::report
