// train/schedule.cpp: see schedule.h.
#include "train/schedule.h"

#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace tb::train {

void LrSchedule::validate() const {
  TB_REQUIRE(std::isfinite(peak) && peak >= 0,
             fmt::format("lr schedule: peak lr must be finite and >= 0, got {}; set train.lr", peak));
  TB_REQUIRE(std::isfinite(min) && min >= 0 && min <= peak,
             fmt::format("lr schedule: min lr must lie in [0, peak = {}], got {}; typical peak / 10", peak, min));
  TB_REQUIRE(total_steps >= 1, fmt::format("lr schedule: total_steps must be >= 1, got {}", total_steps));
  TB_REQUIRE(warmup_steps >= 0 && warmup_steps <= total_steps,
             fmt::format("lr schedule: warmup_steps must lie in [0, total_steps = {}], got {}; "
                         "shorten the warmup or train longer",
                         total_steps, warmup_steps));
}

double LrSchedule::lr(int step) const {
  validate();
  TB_REQUIRE(step >= 0, fmt::format("lr schedule: step must be >= 0 (0-based), got {}", step));
  if (step < warmup_steps) return peak * double(step + 1) / double(warmup_steps);
  if (step >= total_steps) return min;
  const double progress = double(step - warmup_steps) / double(total_steps - warmup_steps);
  return min + (peak - min) * 0.5 * (1 + std::cos(std::numbers::pi * progress));
}

}  // namespace tb::train
