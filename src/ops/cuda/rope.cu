// ops/cuda/rope.cu: see rope.h. Thread (token, 8-pair chunk, group of 8 heads): sincos of the chunk's 8
// frequencies once, then the heads of its group rotated 4 at a time (all loads of a batch issued before the
// first store, since in-place views could alias as far as the compiler knows).
#include "ops/cuda/rope.h"

#include <string>
#include <vector>

#include "ops/cuda/kernel_common.cuh"

namespace tb::ops {
namespace {

using namespace detail;

constexpr int kThreads = 128;
constexpr int kHeadsPerThread = 8;
constexpr int kHeadBatch = 4;

struct RopeArgs {
  bf16* x;
  std::int64_t s0, s1, s2;  // strides of batch, seq, heads (elements)
  std::int64_t seq;
  std::int64_t pos_offset;  // position of sequence index 0
  std::int64_t items;  // batch * seq * chunks
  int chunks;          // d / 16: 8-pair chunks per head
  int half;            // d / 2
  int heads;
  const float* inv_freq;
  float sign;  // +1 forward, -1 backward (sin is odd, cos even: exactly the inverse rotation)
  const std::int32_t* positions;  // per token [batch * seq] (packed rows), or null: p + pos_offset
};

__global__ void __launch_bounds__(kThreads) rope_kernel(const RopeArgs a) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a.items) return;
  const int c = int(i % a.chunks);
  const std::int64_t tok = i / a.chunks;
  const std::int64_t b = tok / a.seq, p = tok - b * a.seq;
  const float4 f0 = __ldg(reinterpret_cast<const float4*>(a.inv_freq) + 2 * c);
  const float4 f1 = __ldg(reinterpret_cast<const float4*>(a.inv_freq) + 2 * c + 1);
  const float freq[8] = {f0.x, f0.y, f0.z, f0.w, f1.x, f1.y, f1.z, f1.w};
  float cs[8], sn[8];
  const float pos = a.positions ? float(__ldg(a.positions + tok)) : float(p + a.pos_offset);
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    sincosf(pos * freq[k], &sn[k], &cs[k]);
    sn[k] *= a.sign;
  }
  bf16* base = a.x + b * a.s0 + p * a.s1 + std::int64_t(c) * kVec;
  const int h0 = int(blockIdx.y) * kHeadsPerThread;
  const int h1 = min(a.heads, h0 + kHeadsPerThread);
  for (int h = h0; h < h1; h += kHeadBatch) {
    uint4 lo[kHeadBatch], hi[kHeadBatch];
#pragma unroll
    for (int u = 0; u < kHeadBatch; ++u) {
      if (h + u < h1) {
        bf16* q = base + std::int64_t(h + u) * a.s2;
        lo[u] = load8_rw(q);
        hi[u] = load8_rw(q + a.half);
      }
    }
#pragma unroll
    for (int u = 0; u < kHeadBatch; ++u) {
      if (h + u >= h1) continue;
      float x1[8], x2[8], y1[8], y2[8];
      unpack8(lo[u], x1);
      unpack8(hi[u], x2);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        y1[k] = x1[k] * cs[k] - x2[k] * sn[k];
        y2[k] = x2[k] * cs[k] + x1[k] * sn[k];
      }
      bf16* q = base + std::int64_t(h + u) * a.s2;
      store8(q, pack8(y1));
      store8(q + a.half, pack8(y2));
    }
  }
}

void rotate(TensorView<bf16> x, TensorView<const float> inv_freq, float sign, std::int64_t pos_offset,
            const std::int32_t* positions, cudaStream_t stream, const std::string& what) {
  TB_REQUIRE(x.rank() == 4, what + ": x must be [batch, seq, heads, head_dim], got " + x.shape_str());
  const std::int64_t d = x.size(3);
  TB_REQUIRE(d > 0 && d % 16 == 0, what +
                                       ": head_dim must be a positive multiple of 16 (8 pairs of 16-byte "
                                       "accesses per thread), got " +
                                       std::to_string(d));
  TB_REQUIRE(x.data() != nullptr && aligned16(x.data()) && (x.stride(3) == 1 || d == 1) &&
                 (x.stride(0) % 8 == 0 || x.size(0) == 1) && (x.stride(1) % 8 == 0 || x.size(1) == 1) &&
                 (x.stride(2) % 8 == 0 || x.size(2) == 1),
             what +
                 ": x must start 16-byte aligned, have a contiguous last dimension and strides that are multiples "
                 "of 8 elements (got " +
                 x.shape_str() + ", strides [" + std::to_string(x.stride(0)) + ", " + std::to_string(x.stride(1)) +
                 ", " + std::to_string(x.stride(2)) + ", " + std::to_string(x.stride(3)) + "])");
  require_vec(inv_freq, d / 2, true, what + ": inv_freq (head_dim / 2 frequencies)");
  TB_REQUIRE(pos_offset >= 0 && x.size(1) + pos_offset <= (std::int64_t(1) << 24),
             what + ": positions must be in [0, 2^24) (exact in fp32), got pos_offset " + std::to_string(pos_offset) +
                 " and seq " + std::to_string(x.size(1)));
  const std::int64_t items = x.size(0) * x.size(1) * (d / 16);
  if (items == 0 || x.size(2) == 0) return;
  const std::int64_t blocks = ceil_div(items, kThreads);
  const std::int64_t groups = ceil_div(x.size(2), kHeadsPerThread);
  TB_REQUIRE(blocks <= 0x7fffffff && groups <= 65535, what + ": too many tokens or heads for one launch");
  TB_REQUIRE(!positions || pos_offset == 0, what + ": per-token positions replace pos_offset (give one of them)");
  const RopeArgs a{x.data(),    x.stride(0), x.stride(1),    x.stride(2),     x.size(1), pos_offset, items,
                   int(d / 16), int(d / 2),  int(x.size(2)), inv_freq.data(), sign,      positions};
  rope_kernel<<<dim3(unsigned(blocks), unsigned(groups)), kThreads, 0, stream>>>(a);
  TB_CHECK_LAUNCH();
}

}  // namespace

void rope_forward(TensorView<bf16> x, TensorView<const float> inv_freq, cudaStream_t stream, std::int64_t pos_offset,
                  const std::int32_t* positions) {
  rotate(x, inv_freq, 1.f, pos_offset, positions, stream, "rope_forward");
}

void rope_backward(TensorView<bf16> dx, TensorView<const float> inv_freq, cudaStream_t stream,
                   std::int64_t pos_offset, const std::int32_t* positions) {
  rotate(dx, inv_freq, -1.f, pos_offset, positions, stream, "rope_backward");
}

void upload_rope_inv_freq(TensorView<float> dst, std::span<const double> inv_freq, cudaStream_t stream) {
  require_vec(dst, std::int64_t(inv_freq.size()), true, "upload_rope_inv_freq: dst");
  const std::vector<float> f(inv_freq.begin(), inv_freq.end());
  if (f.empty()) return;
  TB_CHECK(cudaMemcpyAsync(dst.data(), f.data(), f.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
  TB_CHECK(cudaStreamSynchronize(stream));  // f is freed on return
}

}  // namespace tb::ops
