// core/packing.cpp: the segments of packed rows (core/packing.h).
#include "core/packing.h"

#include <fmt/format.h>

#include <cstddef>

#include "core/error.h"

namespace tb {

Documents Documents::slice(int first, int count) const {
  TB_REQUIRE(first >= 0 && count >= 0 && first + count <= rows(),
             fmt::format("packed documents: rows [{}, {}) of {}", first, first + count, rows()));
  std::size_t begin = 0;
  for (int r = 0; r < first; ++r) begin += std::size_t(per_row[std::size_t(r)]);
  std::size_t n = 0;
  for (int r = first; r < first + count; ++r) n += std::size_t(per_row[std::size_t(r)]);
  TB_REQUIRE(begin + n <= lengths.size(), fmt::format("packed documents: the rows count {} documents, {} are given",
                                                      begin + n, lengths.size()));
  return {lengths.subspan(begin, n), per_row.subspan(std::size_t(first), std::size_t(count))};
}

std::vector<std::int32_t> segment_offsets(const Documents& docs, int seq) {
  TB_REQUIRE(seq >= 1, fmt::format("packed documents: seq must be >= 1, got {}", seq));
  std::vector<std::int32_t> off{0};
  std::size_t d = 0;
  for (int r = 0; r < docs.rows(); ++r) {
    const std::int32_t count = docs.per_row[std::size_t(r)];
    TB_REQUIRE(count >= 0, fmt::format("packed documents: row {} has {} documents", r, count));
    std::int64_t used = 0;
    for (std::int32_t i = 0; i < count; ++i, ++d) {
      TB_REQUIRE(d < docs.lengths.size(), fmt::format("packed documents: row {} counts {} documents but only {} "
                                                      "lengths are given for all rows",
                                                      r, count, docs.lengths.size()));
      const std::int32_t len = docs.lengths[d];
      used += len;
      TB_REQUIRE(len >= 1 && used <= seq,
                 fmt::format("packed documents: document {} of row {} has {} tokens; a document has at least 1 and "
                             "the row's documents at most the sequence's {} ({} up to this one)",
                             i, r, len, seq, used));
      off.push_back(off.back() + len);
    }
    if (used < seq) off.push_back(off.back() + std::int32_t(seq - used));  // the row's padding
  }
  TB_REQUIRE(d == docs.lengths.size(), fmt::format("packed documents: {} lengths for the {} documents the {} rows "
                                                   "count",
                                                   docs.lengths.size(), d, docs.rows()));
  return off;
}

std::vector<std::int32_t> segment_positions(std::span<const std::int32_t> offsets) {
  std::vector<std::int32_t> pos;
  if (offsets.empty()) return pos;
  pos.reserve(std::size_t(offsets.back()));
  for (std::size_t k = 0; k + 1 < offsets.size(); ++k)
    for (std::int32_t t = offsets[k]; t < offsets[k + 1]; ++t) pos.push_back(t - offsets[k]);
  return pos;
}

}  // namespace tb
