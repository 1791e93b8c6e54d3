// model/grad_sharing.cpp: the greedy placement of model/grad_sharing.h.
#include "model/grad_sharing.h"

#include <algorithm>
#include <limits>
#include <string>

#include "core/error.h"

namespace tb::model {

GradSharing place_blocks_over_grads(std::int64_t block_bytes, std::int64_t free_begin,
                                    std::span<const std::int64_t> free_end) {
  TB_REQUIRE(block_bytes > 0 && block_bytes % 256 == 0 && free_begin >= 0 && free_begin % 256 == 0,
             "gradient sharing: block size and free_begin must be positive multiples of 256 bytes, got " +
                 std::to_string(block_bytes) + " and " + std::to_string(free_begin));
  GradSharing g;
  g.block_at.resize(free_end.size());
  std::int64_t top = std::numeric_limits<std::int64_t>::max();  // where the block above starts
  for (std::size_t k = free_end.size(); k-- > 0;) {
    TB_REQUIRE(free_end[k] >= free_begin && free_end[k] % 256 == 0 && (k == 0 || free_end[k - 1] <= free_end[k]),
               "gradient sharing: free_end must be ascending multiples of 256 bytes, from free_begin");
    std::int64_t end = std::min(top, free_end[k]);
    if (free_begin > 0 && end - block_bytes < free_begin && end > 0)
      end = std::min(top, std::int64_t(0));  // it would overlap the live prefix: below the buffer
    g.block_at[k] = end - block_bytes;
    top = g.block_at[k];
  }
  g.below = free_end.empty() ? 0 : std::max<std::int64_t>(0, -top);
  return g;
}

}  // namespace tb::model
