// core/stats.cpp: quantiles and moments of a sample (see stats.h for the formulas).
#include "core/stats.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace tb {

namespace {
double sorted_quantile(const std::vector<double>& x, double q) {
  const double h = q * double(x.size() - 1);
  const auto lo = std::size_t(std::floor(h));
  const auto hi = std::min(lo + 1, x.size() - 1);
  return x[lo] + (h - double(lo)) * (x[hi] - x[lo]);
}
}  // namespace

double quantile(std::span<const double> samples, double q) {
  if (samples.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::vector<double> x(samples.begin(), samples.end());
  std::sort(x.begin(), x.end());
  return sorted_quantile(x, std::clamp(q, 0.0, 1.0));
}

Summary summarize(std::span<const double> samples) {
  Summary s;
  s.n = samples.size();
  if (s.n == 0) return s;
  std::vector<double> x(samples.begin(), samples.end());
  std::sort(x.begin(), x.end());
  s.min = x.front();
  s.max = x.back();
  s.median = sorted_quantile(x, 0.5);
  s.p10 = sorted_quantile(x, 0.1);
  s.p90 = sorted_quantile(x, 0.9);
  s.mean = std::accumulate(x.begin(), x.end(), 0.0) / double(s.n);
  if (s.n > 1) {
    double ss = 0;
    for (double v : x) ss += (v - s.mean) * (v - s.mean);
    s.stdev = std::sqrt(ss / double(s.n - 1));
  }
  return s;
}

Summary scaled(Summary s, double f) {
  for (double* v : {&s.median, &s.p10, &s.p90, &s.mean, &s.stdev, &s.min, &s.max}) *v *= f;
  return s;
}

nlohmann::json to_json(const Summary& s) {
  return {{"median", s.median}, {"p10", s.p10}, {"p90", s.p90}, {"mean", s.mean},
          {"stdev", s.stdev},   {"min", s.min}, {"max", s.max}, {"n", s.n}};
}

}  // namespace tb
