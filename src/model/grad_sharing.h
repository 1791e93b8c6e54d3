// model/grad_sharing.h: where the activation blocks go when the weight gradients share their memory.
// One micro-batch per step: layer k's saved activations live from its forward to its backward, its gradients from
// its backward to the optimizer. The backward runs the layers last first, so when layer k's gradients are written,
// the activations of every later layer are dead, and block k (read until layer k's backward ends) may overlap only
// the gradients written after it: those of the earlier layers and, untied, the embedding's (written last).
// In the gradient buffer's byte offsets (parameter order: embedding, layer 0, ..., final norm, LM head) that is
//   block k  ⊆  (-inf, free_end[k]),  disjoint from [0, free_begin) and from the other blocks  (offsets < 0: below),
// free_end[k] = where layer k's gradients start, free_begin = 0 (tied embeddings: where layer 0's start, as the
// LM head accumulates into the embedding's gradient first). Greedy from the last layer down: each block ends as
// high as its bound and the block above allow; one that would overlap the live prefix goes below the buffer.
// The memory saved against separate buffers is blocks x block_bytes - below.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tb::model {

struct GradSharing {
  std::vector<std::int64_t> block_at;  // block k's byte offset from the gradient buffer's start (may be negative)
  std::int64_t below = 0;              // bytes needed below the buffer: -(the lowest offset), or 0
};

// block_bytes and every offset multiples of 256 (the arena's alignment); free_end ascending, each >= free_begin.
GradSharing place_blocks_over_grads(std::int64_t block_bytes, std::int64_t free_begin,
                                    std::span<const std::int64_t> free_end);

}  // namespace tb::model
