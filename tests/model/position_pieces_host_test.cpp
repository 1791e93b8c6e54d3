// Tests model/position_pieces (host only): expanded to one position per row, the pieces give the positions of
// parallel::cp_positions (the CPU reference's context-parallel chunks) for every cp size 1-4, cp rank, tensor-parallel
// slice of a rank's own rows and every block of rows gathered over dp x cp (block b: cp rank b mod cp); each piece
// is a run of consecutive positions that ends at a chunk or sequence end (no piece could be longer); bad arguments
// raise.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "model/position_pieces.h"
#include "parallel/decoder_cpu_parallel.h"

namespace {

using tb::model::position_pieces;

// The position of every row in [first_row, first_row + rows), from the pieces.
std::vector<std::int64_t> expand(std::int64_t first_row, std::int64_t rows, std::int64_t block, int seq, int cp,
                                 int first_rank) {
  std::vector<std::int64_t> out;
  std::int64_t at = 0;
  for (const tb::model::PositionPiece& p : position_pieces(first_row, rows, block, seq, cp, first_rank)) {
    EXPECT_EQ(p.row, at) << "pieces in order, back to back";
    EXPECT_GT(p.rows, 0);
    for (std::int64_t i = 0; i < p.rows; ++i) out.push_back(p.position + i);
    at += p.rows;
  }
  EXPECT_EQ(at, rows);
  return out;
}

// The reference: row g of blocks of `batch` local sequences of cp rank (first_rank + block index) mod cp.
std::vector<std::int64_t> reference(std::int64_t first_row, std::int64_t rows, int batch, int seq, int cp,
                                    int first_rank) {
  std::vector<std::int64_t> out;
  const std::int64_t block = std::int64_t(batch) * seq;
  for (std::int64_t g = first_row; g < first_row + rows; ++g) {
    const int rank = int((first_rank + g / block) % cp);
    const std::vector<std::int64_t> pos = tb::parallel::cp_positions(cp, rank, seq * cp);  // seq: the rank's share
    out.push_back(pos[std::size_t(g % block % seq)]);
  }
  return out;
}

TEST(PositionPieces, OwnRowsOfEveryCpRankAndTpSlice) {
  for (int cp : {1, 2, 3, 4})
    for (int rank = 0; rank < cp; ++rank)
      for (int batch : {1, 3})
        for (int tp : {1, 2, 4}) {
          const int seq = 16;  // the rank's tokens per sequence (two chunks of 8 when cp > 1)
          const std::int64_t n = std::int64_t(batch) * seq, nl = n / tp;
          for (int t = 0; t < tp; ++t)
            EXPECT_EQ(expand(t * nl, nl, n, seq, cp, rank), reference(t * nl, nl, batch, seq, cp, rank))
                << "cp " << cp << " rank " << rank << " batch " << batch << " tp slice " << t << " of " << tp;
        }
}

TEST(PositionPieces, GatheredBlocksFollowTheDpCpRankOrder) {
  for (int cp : {1, 2, 4})
    for (int dp : {1, 2}) {
      const int seq = 8, batch = 2;
      const std::int64_t block = std::int64_t(batch) * seq, rows = block * cp * dp;
      EXPECT_EQ(expand(0, rows, block, seq, cp, 0), reference(0, rows, batch, seq, cp, 0)) << "cp " << cp << " dp "
                                                                                             << dp;
    }
}

TEST(PositionPieces, PiecesAreMaximalRuns) {
  // cp 2, rank 1: chunks 1 and 2 of 4 chunks of 4 -> positions 4..7, 8..11: consecutive, but two chunks: two pieces.
  const auto p = position_pieces(0, 8, 8, 8, 2, 1);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].position, 4);
  EXPECT_EQ(p[1].position, 8);
  // cp 1: a tp slice across a sequence end is cut there: rows 6..9 of sequences of 8 -> 6, 7 | 0, 1.
  const auto q = position_pieces(6, 4, 16, 8, 1, 0);
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(q[0].rows, 2);
  EXPECT_EQ(q[1].position, 0);
  EXPECT_EQ(position_pieces(0, 0, 8, 8, 1, 0).size(), 0u);
}

TEST(PositionPieces, BadArgumentsRaise) {
  EXPECT_THROW(position_pieces(0, 4, 8, 7, 2, 0), tb::Error);   // odd seq with cp
  EXPECT_THROW(position_pieces(0, 4, 12, 8, 1, 0), tb::Error);  // block not a multiple of seq
  EXPECT_THROW(position_pieces(0, 4, 8, 8, 2, 2), tb::Error);   // rank out of range
  EXPECT_THROW(position_pieces(-1, 4, 8, 8, 1, 0), tb::Error);
}

}  // namespace
