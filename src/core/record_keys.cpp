// core/record_keys.cpp: see record_keys.h.
#include "core/record_keys.h"

#include <fmt/format.h>

#include <sstream>

#include "core/error.h"

namespace tb {

double ms_value(const nlohmann::json& j, std::string_view stem, double fallback) {
  if (!j.is_object()) return fallback;
  const std::string ms = std::string(stem) + "_ms", s = std::string(stem) + "_s";
  if (auto it = j.find(ms); it != j.end() && it->is_number()) return it->get<double>();
  if (auto it = j.find(s); it != j.end() && it->is_number()) return 1e3 * it->get<double>();
  return fallback;
}

const nlohmann::json& run_figures(const nlohmann::json& run) {
  static const nlohmann::json empty = nlohmann::json::object();
  for (const char* key : {"measured", "extrapolated"})
    if (auto it = run.find(key); it != run.end() && it->is_object()) return *it;
  return empty;
}

nlohmann::json layout_object(const nlohmann::json& layout, const std::string& where) {
  if (layout.is_object()) return layout;
  nlohmann::json out = nlohmann::json::object();
  if (!layout.is_string()) return out;
  std::istringstream words(layout.get<std::string>());
  for (std::string w; words >> w;) {
    if (w == "sp") {
      out["sequence_parallel"] = true;
      continue;
    }
    const auto digit = w.find_first_of("0123456789");
    const std::string key = digit == std::string::npos ? w : w.substr(0, digit);
    TB_REQUIRE(digit != std::string::npos && digit > 0 &&
                   w.find_first_not_of("0123456789", digit) == std::string::npos &&
                   (key == "dp" || key == "cp" || key == "pp" || key == "tp" || key == "vp") && w.size() - digit <= 9,
               fmt::format("{}: layout word '{}': expected dp, cp, pp, tp, vp followed by a number (e.g. tp2), or sp",
                           where, w));
    out[key] = std::stoi(w.substr(digit));
  }
  if (!out.contains("sequence_parallel")) out["sequence_parallel"] = false;
  return out;
}

}  // namespace tb
