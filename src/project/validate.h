// project/validate.h: the projection of every published reference row it can project (a measurement of the
// recipe's precision, or of the same model or family; the row's GPU model is the target's), against the
// published tokens/s per GPU:
//   error = predicted / published − 1        (published: tokens_per_s / gpus, else global_batch·seq / step_s / gpus)
// Rows of the anchor measurement's release or newer are "primary" (the software generation whose layouts were
// measured); older releases are reported apart. Weak-scaling efficiency per recipe × release × precision, from the
// smallest to the largest full-size (non-proxy) GPU count listed: tokens/s per GPU at the largest / at the smallest,
// published and predicted; their difference in points.
// Calibration: the three [projection] constants by grid search (reference_efficiency 0.70–1.10 step 0.005,
// overlap_cost 0–1 step 0.05, straggler_sigma_ms 0–200 step 5). The straggler σ is the only term that grows with
// the data-parallel size, so it is fitted to the weak-scaling shape: for each (e, c), the σ minimizing the mean
// |shape error|, shape error = (predicted_i / predicted_0) / (published_i / published_0) − 1 for every full-size row
// i of a recipe × release × precision and 0 its smallest count; then the (e, c) whose rows, with their σ, have the
// smallest mean |error|. Cross-validation fits them on half of the recipes (every split of the primary recipes in two
// halves), on every other row, or on one precision's rows, and reports the error and the weak-scaling gaps on the
// primary rows left out.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "project/step_model.h"
#include "recipe/reference.h"

namespace tb::project {

struct Case {  // one reference row, ready to project
  const recipe::ReferenceRow* row = nullptr;
  const recipe::Recipe* recipe = nullptr;
  recipe::Layout layout;
  std::string release;
  double published = 0;  // tokens/s per GPU
  bool primary = false;
  recipe::Convention convention = recipe::Convention::full;
};

struct Skip {
  const recipe::ReferenceRow* row = nullptr;
  std::string reason;
};

struct Point {
  Case c;
  Projection p;
  double error = 0;  // predicted / published − 1
};

struct ScalingCheck {
  std::string recipe, release, precision;
  bool primary = false;
  int from_gpus = 0, to_gpus = 0;
  double published = 0, predicted = 0;  // efficiency (fraction)
  double points() const { return 100 * (predicted - published); }
};

struct ErrorStats {
  int n = 0;
  double median = 0, max = 0, mean = 0;  // of |error|
};
ErrorStats error_stats(const std::vector<double>& errors);

struct Validation {
  std::vector<Point> points;
  std::vector<Skip> skipped;
  std::vector<ScalingCheck> scaling;
  ErrorStats primary, older, all;
  std::map<std::string, ErrorStats> primary_by_precision;
};

// The cases: every row whose GPU model is named in the target's name, sorted by recipe, precision, release, GPUs. A
// mixture of experts needs a measurement of its own model (a dense family's proxies do not time its MoE layers).
std::vector<Case> reference_cases(const std::vector<recipe::Recipe>& recipes,
                                  const std::vector<recipe::ReferenceRow>& rows, const Context& ctx,
                                  std::vector<Skip>* skipped);
Validation validate(const std::vector<Case>& cases, const Context& ctx);

std::string render_validation(const Validation& v);

struct Fit {
  Calibration cal;
  ErrorStats stats;  // on the rows it was fit to
  ErrorStats shape;  // of the rows' weak-scaling efficiency against their group's smallest count (fits σ)
};
// Best constants for these cases (mean |error|), the other fields of ctx unchanged.
Fit fit_calibration(const std::vector<Case>& cases, const Context& ctx);
struct Split {
  std::string trained_on;  // the recipes fit to, "even rows" / "odd rows", or "<precision> rows"
  Fit fit;
  ErrorStats held_out;         // on the primary rows left out
  double held_out_points = 0;  // the largest weak-scaling gap of the rows left out, |points|
};
struct CrossValidation {
  Fit all;  // on every primary row
  std::vector<Split> splits;
  double median_of_medians = 0, worst_median = 0, worst_max = 0, worst_points = 0;
};
// Fit on subsets of the primary cases (every half of the recipes; even and odd rows; each precision's rows when
// there are two), test on the rest.
CrossValidation cross_validate(const std::vector<Case>& cases, const Context& ctx);
std::string render_cross_validation(const CrossValidation& cv);

}  // namespace tb::project
