// core/stats.h: summary statistics of timed samples.
//   median, p10, p90: linear interpolation between order statistics (numpy's default "linear" method):
//     q-quantile of sorted x[0..n-1] = x[floor(h)] + (h - floor(h)) * (x[floor(h)+1] - x[floor(h)]), h = q (n-1)
//   mean = sum x / n;  stdev = sqrt(sum (x - mean)^2 / (n - 1))  (sample stdev; 0 for n < 2)
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <span>

namespace tb {

struct Summary {
  std::size_t n = 0;
  double median = 0, p10 = 0, p90 = 0, mean = 0, stdev = 0, min = 0, max = 0;
};

double quantile(std::span<const double> samples, double q);  // q in [0, 1]; NaN for no samples
Summary summarize(std::span<const double> samples);
Summary scaled(Summary s, double factor);  // every statistic times factor (units: ms -> us is 1e3)
nlohmann::json to_json(const Summary& s);  // {"median":..,"p10":..,"p90":..,"mean":..,"stdev":..,"min":..,"max":..,"n":..}

}  // namespace tb
