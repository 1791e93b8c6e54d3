// mlperf/ttt.cpp: the formula of ttt.h.
#include "mlperf/ttt.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace tb::mlperf {

std::optional<TttProjection> project_ttt(const Benchmark& b, int global_batch, double samples_per_s) {
  TB_REQUIRE(global_batch > 0 && samples_per_s > 0,
             fmt::format("time to train: global batch {} and {} samples/s must be positive", global_batch,
                         samples_per_s));
  const auto point = b.convergence_at(global_batch);
  if (!point) return std::nullopt;
  TttProjection p;
  p.point = *point;
  const double interval = double(b.eval_every_steps(global_batch)) * global_batch;
  const double intervals = std::ceil(point->samples / interval);
  p.samples = intervals * interval;
  p.evals = std::max(0, int(intervals) - b.eval_skipped(global_batch));
  p.train_s = p.samples / samples_per_s;
  p.eval_s = p.evals * double(b.eval_samples) / (3 * samples_per_s);
  p.minutes = (p.train_s + p.eval_s) / 60;
  return p;
}

}  // namespace tb::mlperf
