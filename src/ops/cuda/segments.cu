// ops/cuda/segments.cu: see segments.h. One block walks the B + 1 offsets.
#include "ops/cuda/segments.h"

#include "core/error.h"
#include "ops/cuda/kernel_common.cuh"

namespace tb::ops {
namespace {

constexpr int kThreads = 256;

std::size_t part(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

struct Tables {
  std::int32_t* seq_len;
  std::int64_t *qkv, *o, *stats;
};

Tables tables(void* buffer, std::int64_t capacity) {
  auto* base = static_cast<unsigned char*>(buffer);
  const std::size_t len = part(std::size_t(capacity) * 4), off = part(std::size_t(capacity + 1) * 8);
  return {reinterpret_cast<std::int32_t*>(base), reinterpret_cast<std::int64_t*>(base + len),
          reinterpret_cast<std::int64_t*>(base + len + off), reinterpret_cast<std::int64_t*>(base + len + 2 * off)};
}

__global__ void __launch_bounds__(kThreads)
    segment_tables_kernel(Tables t, const std::int32_t* __restrict__ cu, std::int64_t capacity, std::int64_t qkv_width,
                          std::int64_t o_width, std::int64_t heads) {
  for (std::int64_t k = threadIdx.x; k <= capacity; k += kThreads) {
    const std::int64_t at = cu[k];
    if (k < capacity) t.seq_len[k] = cu[k + 1] - cu[k];
    t.qkv[k] = at * qkv_width, t.o[k] = at * o_width, t.stats[k] = at * heads;
  }
}

}  // namespace

std::size_t segment_table_bytes(std::int64_t capacity) {
  return part(std::size_t(capacity) * 4) + 3 * part(std::size_t(capacity + 1) * 8);
}

PackedSegments segment_tables(const void* buffer, std::int64_t capacity) {
  const Tables t = tables(const_cast<void*>(buffer), capacity);
  return {t.seq_len, t.qkv, t.o, t.stats};
}

void fill_segment_tables(void* buffer, const std::int32_t* cu_seqlens, std::int64_t capacity, std::int64_t qkv_width,
                         std::int64_t o_width, std::int64_t heads, cudaStream_t stream) {
  TB_REQUIRE(buffer && cu_seqlens && capacity >= 1,
             "fill_segment_tables: a buffer, the device offsets and a capacity >= 1 are needed");
  segment_tables_kernel<<<1, kThreads, 0, stream>>>(tables(buffer, capacity), cu_seqlens, capacity, qkv_width, o_width,
                                                    heads);
  TB_CHECK_LAUNCH();
}

}  // namespace tb::ops
