// core/tensor.cpp: shape formatting for messages.
#include "core/tensor.h"

#include <fmt/format.h>

namespace tb {

std::string shape_string(const Shape& shape, int rank) {
  std::string s = "[";
  for (int d = 0; d < rank; ++d) s += fmt::format("{}{}", d ? ", " : "", shape[d]);
  return s + "]";
}

}  // namespace tb
