// parallel/zero.cpp: the ZeRO-1 bucket and shard layout (parallel/zero.h).
#include "parallel/zero.h"

#include <algorithm>

#include "core/error.h"

namespace tb::parallel {
namespace {
std::size_t round_up(std::size_t x, std::size_t m) { return (x + m - 1) / m * m; }
}  // namespace

ZeroLayout zero_layout(const model::DenseLayout& L, int dp, int rank, std::size_t bucket_elems) {
  TB_REQUIRE(dp >= 1 && rank >= 0 && rank < dp, "ZeRO layout: rank must be in [0, dp)");
  ZeroLayout z;
  z.dp = dp, z.rank = rank;
  const std::size_t udp = std::size_t(dp);
  z.padded_total = round_up(std::max<std::size_t>(L.grad_total, 1), udp);
  // Candidate boundaries: where the backward's frontier stops (the final norm, each layer's first trainable slot), and
  // 0; in the gradient buffer (a frozen embedding: layer 0 starts at 0, no bucket of its own).
  std::vector<std::size_t> cuts;
  if (L.final_norm_w >= 0 && L.slots[std::size_t(L.final_norm_w)].has_grad())
    cuts.push_back(L.slots[std::size_t(L.final_norm_w)].grad_offset);
  for (auto it = L.layers.rbegin(); it != L.layers.rend(); ++it) cuts.push_back(it->grad_begin(L));
  std::vector<std::size_t> bounds = {z.padded_total};
  for (std::size_t i = 0; i < cuts.size(); ++i) {
    const std::size_t b = round_up(cuts[i], udp);
    const bool embedding_end = i + 1 == cuts.size();  // always a boundary: the embedding is a bucket of its own
    if (b > 0 && b < bounds.back() && (bounds.back() - b >= bucket_elems || embedding_end)) bounds.push_back(b);
  }
  if (bounds.back() != 0) bounds.push_back(0);
  std::reverse(bounds.begin(), bounds.end());
  for (std::size_t i = 0; i + 1 < bounds.size(); ++i) {
    ZeroBucket b{bounds[i], bounds[i + 1], z.shard_size};
    z.shard_size += b.piece() / udp;
    z.buckets.push_back(b);
  }
  // Segments: each piece of this rank intersected with the slots.
  for (const ZeroBucket& b : z.buckets) {
    const std::size_t p0 = z.piece_begin(b), p1 = p0 + z.piece_size(b);
    for (std::size_t s = 0; s < L.slots.size(); ++s) {
      if (!L.slots[s].has_grad()) continue;
      const std::size_t g = L.slots[s].grad_offset, a = std::max(p0, g), e = std::min(p1, g + L.slots[s].size);
      if (a < e) z.segments.push_back({a, b.shard_offset + (a - p0), e - a, int(s)});
    }
  }
  return z;
}

}  // namespace tb::parallel
