// report/plus_minus.h: a measured value with its uncertainty for human output, "11,700 ± 180":
//   the uncertainty to two significant figures, the value rounded to the same decimal place (no more decimals
//   than max_decimals), thousands grouped with commas. An uncertainty of 0 (unknown) prints the value alone.
#pragma once

#include <string>

namespace tb::report {

std::string grouped(double value, int decimals);  // 11700.4, 0 -> "11,700"
std::string plus_minus(double value, double err, int max_decimals = 3);

}  // namespace tb::report
