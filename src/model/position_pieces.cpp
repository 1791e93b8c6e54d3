// model/position_pieces.cpp: runs of consecutive learned positions of a rank's rows (model/position_pieces.h).
#include "model/position_pieces.h"

#include <algorithm>

#include "core/error.h"

namespace tb::model {

std::vector<PositionPiece> position_pieces(std::int64_t first_row, std::int64_t rows, std::int64_t block, int seq,
                                           int cp, int first_rank) {
  TB_REQUIRE(seq >= 1 && cp >= 1 && (cp == 1 || seq % 2 == 0) && block >= seq && block % seq == 0 &&
                 first_row >= 0 && rows >= 0 && first_rank >= 0 && first_rank < cp,
             "position_pieces: needs seq >= 1 (even with cp > 1), block a multiple of seq, rows and first_row >= 0, "
             "first_rank in [0, cp)");
  const std::int64_t c = cp > 1 ? seq / 2 : seq;  // consecutive positions: a chunk
  std::vector<PositionPiece> out;
  for (std::int64_t t = 0; t < rows;) {
    const std::int64_t g = first_row + t, rank = (first_rank + g / block) % cp, within = g % block % seq;
    const std::int64_t k = within / c, chunk = cp == 1 ? 0 : k == 0 ? rank : 2 * cp - 1 - rank;
    const std::int64_t count = std::min(rows - t, c - within % c);
    out.push_back({t, count, chunk * c + within % c});
    t += count;
  }
  return out;
}

}  // namespace tb::model
