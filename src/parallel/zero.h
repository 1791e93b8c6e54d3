// parallel/zero.h: the distributed optimizer's (ZeRO-1) partition of the flat gradient buffer over the dp ranks: the
// trainable parameters' (model/params.h grad_offset; every parameter in full training, LoRA's adapters when
// fine-tuning), which are the parameter buffer's last ones in the same order (model/decoder_cuda.h trainable_begin()),
// so a bucket's parameters are all-gathered at the same offsets past it. A frozen parameter takes no part.
// The buffer (model/param_layout.h order, padded to `padded_total`) is cut into buckets at layer boundaries, from
// the end (the backward finishes the LM head first and the embedding last), each at least `bucket_elems` long
// where layers allow; every bucket's length is a multiple of dp and rank r owns the r-th 1/dp of each bucket:
//   bucket b = [begin_b, end_b),  len_b = end_b - begin_b,  piece_b(r) = [begin_b + r len_b / dp, + len_b / dp)
//   shard(r) = the concatenation of piece_b(r) over b (shard_offset[b] = sum_{b' < b} len_b' / dp)
// Per step: reduce-scatter each bucket's gradients into the shard (as soon as the backward has finished it), the
// optimizer on the shard, all-gather each bucket's bf16 parameters back in place (before the forward reads them).
// Bucket boundaries are the layer starts rounded UP to a multiple of dp: a boundary element then belongs to the
// earlier (lower) bucket, which is reduced later, never before its gradient is final. A trainable embedding (with
// learned positions) is always a bucket of its own, bucket 0: its gradient can be exchanged sparsely (the rows of the
// step's tokens) instead of reduce-scattered, train/data_parallel_cuda.h.
#pragma once

#include <cstddef>
#include <vector>

#include "model/param_layout.h"

namespace tb::parallel {

struct ZeroBucket {
  std::size_t begin = 0, end = 0;  // in the padded flat buffer; (end - begin) % dp == 0
  std::size_t shard_offset = 0;    // where this rank's piece starts in its shard
  std::size_t piece() const { return end - begin; }
};

// A run of the shard inside one parameter slot (the optimizer's tensors: decay differs per slot).
struct ZeroSegment {
  std::size_t flat = 0, shard = 0, count = 0;  // flat: in the gradient buffer
  int slot = -1;
};

struct ZeroLayout {
  int dp = 1, rank = 0;
  std::size_t padded_total = 0;    // flat buffers are allocated with this many elements
  std::size_t shard_size = 0;      // elements of this rank's shard
  std::vector<ZeroBucket> buckets; // ascending; buckets.back().end == padded_total
  std::vector<ZeroSegment> segments;
  std::size_t piece_begin(const ZeroBucket& b) const { return b.begin + std::size_t(rank) * (b.end - b.begin) / dp; }
  std::size_t piece_size(const ZeroBucket& b) const { return (b.end - b.begin) / std::size_t(dp); }
};

// bucket_elems: the target bucket size (Megatron's default is 40M parameters).
ZeroLayout zero_layout(const model::DenseLayout& layout, int dp, int rank, std::size_t bucket_elems = 40'000'000);

}  // namespace tb::parallel
