// core/suggest.h: "did you mean" for unknown commands, flags and keys: the candidate with the smallest
// Levenshtein distance, if that distance is at most max(2, |word| / 3).
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace tb {

std::size_t edit_distance(std::string_view a, std::string_view b);
std::string nearest(std::string_view word, std::span<const std::string> candidates);  // "" when none is close
std::string did_you_mean(std::string_view word, std::span<const std::string> candidates);  // " (did you mean 'x'?)" or ""

}  // namespace tb
