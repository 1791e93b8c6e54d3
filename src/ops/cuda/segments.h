// ops/cuda/segments.h: the device tables of one packed micro-batch for cuDNN's ragged attention (ops/cuda/attention.h
// PackedSegments), from its segment offsets (cu_seqlens: core/packing.h's segment_offsets, padded to the capacity B
// by repeating the last offset, i.e. empty segments), all on the device (no host sync; capturable):
//   seq_len[k] = cu[k+1] - cu[k]                               k < B
//   qkv_offset[k] = cu[k] qkv_width;  o_offset[k] = cu[k] o_width;  stats_offset[k] = cu[k] heads     k <= B
// qkv_width = (H + 2G) d (the fused qkv rows), o_width = H d, heads = H (lse is token-major [tokens, H]).
// One buffer holds the four tables (segment_table_bytes(B), 256-byte aligned parts); segment_tables() views it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "ops/cuda/attention.h"

namespace tb::ops {

std::size_t segment_table_bytes(std::int64_t capacity);
PackedSegments segment_tables(const void* buffer, std::int64_t capacity);

void fill_segment_tables(void* buffer, const std::int32_t* cu_seqlens, std::int64_t capacity, std::int64_t qkv_width,
                         std::int64_t o_width, std::int64_t heads, cudaStream_t stream);

}  // namespace tb::ops
