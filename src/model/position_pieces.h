// model/position_pieces.h: where the learned positions of a rank's token rows are, as runs of consecutive positions
// (one position-embedding kernel call each; host only).
// Rows come in blocks of `block` rows, each one rank's local rows [batch, seq] (seq: the rank's tokens per sequence).
// With context parallel (cp > 1) a local sequence is two chunks of c = seq / 2 positions, global chunks r and
// 2 cp - 1 - r of cp rank r; cp 1: one chunk of seq. Block b is cp rank's (first_rank + b) mod cp: a rank's own rows
// (one block, first_rank its cp rank), or the rows gathered over the dp x cp group (first_rank 0: rank order
// dp * cp + cp). Row g (from the first block's start) sits at
//   within = g mod block mod seq,  k = within / c,  position = chunk(rank, k) * c + within mod c,
// and a piece ends where a chunk (or a sequence) ends.
#pragma once

#include <cstdint>
#include <vector>

namespace tb::model {

struct PositionPiece {
  std::int64_t row, rows, position;  // rows [row, row + rows) of the caller's span at positions position, ...
};

// Rows [first_row, first_row + rows), pieces relative to first_row. seq even when cp > 1; block a multiple of seq.
std::vector<PositionPiece> position_pieces(std::int64_t first_row, std::int64_t rows, std::int64_t block, int seq,
                                           int cp, int first_rank);

}  // namespace tb::model
