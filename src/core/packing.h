// core/packing.h: packed sequences. A row (one sequence of s tokens) holds several documents back to back, given by
// their lengths in order; the row's tokens after its last document are padding. Attention and positions see segments:
// each document, and a row's padding as one more segment of its own, so every token belongs to exactly one segment:
//   offsets (cu_seqlens): o_0 = 0, o_{k+1} = o_k + len_k over every row's segments in order; o_K = rows · s
//   position of token t (flat index over the rows): t - o_k for o_k <= t < o_{k+1}   (positions restart per segment)
//   attention: query t sees key u iff o_k <= u <= t, with k the segment of t             (causal within a segment)
// The loss of packed data counts only the targets a loss mask keeps (the answers; not the prompts, the padding or the
// token after a document's last), train/data.h.
// Documents of rows: `lengths`, every row's documents row after row, and `per_row`, the documents of each row.
// Empty per_row: not packed (one document filling each row).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tb {

struct Documents {
  std::span<const std::int32_t> lengths;  // every row's documents, row after row
  std::span<const std::int32_t> per_row;  // documents in each row; empty: not packed
  bool packed() const { return !per_row.empty(); }
  int rows() const { return int(per_row.size()); }
  // Rows [first, first + count) (a micro-batch of a step's rows).
  Documents slice(int first, int count) const;
};

// The segment offsets of `rows` rows of seq tokens (Documents above), checked: per_row has one count per row, they add
// up to the lengths given, every document has at least one token and a row's documents fit in it. Error{config} names
// the row and the document.
std::vector<std::int32_t> segment_offsets(const Documents& docs, int seq);
// Each token's position in its segment, [offsets.back()].
std::vector<std::int32_t> segment_positions(std::span<const std::int32_t> offsets);

}  // namespace tb
