// report/plus_minus.cpp: see plus_minus.h.
#include "report/plus_minus.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace tb::report {

std::string grouped(double value, int decimals) {
  std::string s = fmt::format("{:.{}f}", std::abs(value), std::max(0, decimals));
  const std::size_t dot = std::min(s.find('.'), s.size());
  std::string out;
  for (std::size_t i = 0; i < dot; ++i) {
    if (i > 0 && (dot - i) % 3 == 0) out.push_back(',');
    out.push_back(s[i]);
  }
  out.append(s, dot, std::string::npos);
  const bool negative = value < 0 && s.find_first_not_of("0.") != std::string::npos;
  return (negative ? "-" : "") + out;
}

std::string plus_minus(double value, double err, int max_decimals) {
  if (!(err > 0) || !std::isfinite(err)) return grouped(value, std::clamp(max_decimals, 0, 3));
  // Two significant figures of err: rounded to step = 10^(p - 1), p the place of its leading digit (183 -> 180,
  // 0.0374 -> 0.037); the value to the same step. max_decimals caps the decimals (the step then grows).
  const int place = int(std::floor(std::log10(err)));
  const int decimals = std::min(std::max(0, 1 - place), std::max(0, max_decimals));
  const double step = decimals > 0 ? std::pow(10.0, -decimals) : std::pow(10.0, std::max(0, place - 1));
  const double rounded_err = std::max(step, std::round(err / step) * step);
  const double rounded_value = std::round(value / step) * step;
  return grouped(rounded_value, decimals) + " ± " + grouped(rounded_err, decimals);
}

}  // namespace tb::report
