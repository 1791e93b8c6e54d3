// ops/cuda/mla.cu: see mla.h. Thread (token, 8-column chunk of the Dn + Dr key width): a nope chunk is copied head by
// head; a rope chunk is read once and stored to every head (forward), or summed over the heads in fp32 (backward).
#include "ops/cuda/mla.h"

#include <string>

#include "ops/cuda/kernel_common.cuh"

namespace tb::ops {
namespace {

using namespace detail;

constexpr int kThreads = 128;

struct MlaKArgs {
  bf16* out;         // forward: k; backward: dk_nope
  const bf16* in;    // forward: k_nope; backward: dk
  const bf16* rope;  // forward: k_rope (read)
  bf16* rope_out;    // backward: dk_rope (written)
  std::int64_t k_t, k_h;          // k's (dk's) strides of token and head
  std::int64_t n_t, n_h;          // k_nope's (dk_nope's) strides
  std::int64_t r_t;               // k_rope's (dk_rope's) token stride
  std::int64_t tokens;
  int heads, nope_chunks, chunks;  // Dn / 8, (Dn + Dr) / 8
};

__global__ void __launch_bounds__(kThreads) mla_k_forward_kernel(const MlaKArgs a) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a.tokens * a.chunks) return;
  const int c = int(i % a.chunks);
  const std::int64_t t = i / a.chunks;
  bf16* k = a.out + t * a.k_t + std::int64_t(c) * kVec;
  if (c >= a.nope_chunks) {  // the shared rope chunk, to every head
    const uint4 v = load8(a.rope + t * a.r_t + std::int64_t(c - a.nope_chunks) * kVec);
    for (int h = 0; h < a.heads; ++h) store8(k + h * a.k_h, v);
    return;
  }
  const bf16* nope = a.in + t * a.n_t + std::int64_t(c) * kVec;
  for (int h = 0; h < a.heads; ++h) store8(k + h * a.k_h, load8(nope + h * a.n_h));
}

__global__ void __launch_bounds__(kThreads) mla_k_backward_kernel(const MlaKArgs a) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a.tokens * a.chunks) return;
  const int c = int(i % a.chunks);
  const std::int64_t t = i / a.chunks;
  const bf16* dk = a.in + t * a.k_t + std::int64_t(c) * kVec;
  if (c >= a.nope_chunks) {  // the rope chunk: its sum over the heads
    float sum[8] = {}, x[8];
    for (int h = 0; h < a.heads; ++h) {
      unpack8(load8(dk + h * a.k_h), x);
#pragma unroll
      for (int k = 0; k < 8; ++k) sum[k] += x[k];
    }
    store8(a.rope_out + t * a.r_t + std::int64_t(c - a.nope_chunks) * kVec, pack8(sum));
    return;
  }
  bf16* dnope = a.out + t * a.n_t + std::int64_t(c) * kVec;
  for (int h = 0; h < a.heads; ++h) store8(dnope + h * a.n_h, load8(dk + h * a.k_h));
}

// Checks a 3-D [T, H, w] or 2-D [T, w] view for 16-byte accesses: contiguous last dimension, the others' strides and w
// multiples of 8, a 16-byte aligned start.
template <class P>
void require_chunks(const TensorView<P>& v, int rank, const std::string& what) {
  TB_REQUIRE(v.data() != nullptr && v.rank() == rank, what + " must be a " + std::to_string(rank) + "-D view, got " +
                                                          (v.data() ? v.shape_str() : std::string("an empty view")));
  bool ok = aligned16(v.data()) && v.stride(rank - 1) == 1 && v.size(rank - 1) % kVec == 0;
  for (int d = 0; d < rank - 1; ++d) ok = ok && (v.stride(d) % kVec == 0 || v.size(d) <= 1);
  TB_REQUIRE(ok, what + ": 16-byte accesses need a contiguous last dimension, a width and strides that are multiples "
                        "of 8 elements and a 16-byte aligned start (got " +
                     v.shape_str() + ")");
}

// T, H, Dn, Dr of k [T, H, Dn + Dr], k_nope [T, H, Dn], k_rope [T, Dr] (or their gradients), checked.
template <class K, class N, class R>
MlaKArgs args(const TensorView<K>& k, const TensorView<N>& nope, const TensorView<R>& rope, const std::string& what) {
  require_chunks(k, 3, what + ": k");
  require_chunks(nope, 3, what + ": k_nope");
  require_chunks(rope, 2, what + ": k_rope");
  const std::int64_t t = k.size(0), h = k.size(1), dn = nope.size(2), dr = rope.size(1);
  TB_REQUIRE(nope.size(0) == t && nope.size(1) == h && rope.size(0) == t && k.size(2) == dn + dr,
             what + ": k " + k.shape_str() + " must be [tokens, heads, Dn + Dr] for k_nope " + nope.shape_str() +
                 " [tokens, heads, Dn] and k_rope " + rope.shape_str() + " [tokens, Dr]");
  TB_REQUIRE(h <= 65536, what + ": at most 65536 heads");
  MlaKArgs a{};
  a.k_t = k.stride(0), a.k_h = k.stride(1), a.n_t = nope.stride(0), a.n_h = nope.stride(1), a.r_t = rope.stride(0);
  a.tokens = t, a.heads = int(h), a.nope_chunks = int(dn / kVec), a.chunks = int((dn + dr) / kVec);
  return a;
}

template <class Kernel>
void launch(Kernel kernel, const MlaKArgs& a, cudaStream_t stream, const std::string& what) {
  const std::int64_t items = a.tokens * a.chunks;
  if (items == 0) return;
  const std::int64_t blocks = ceil_div(items, kThreads);
  TB_REQUIRE(blocks <= 0x7fffffff, what + ": too many tokens for one launch");
  kernel<<<unsigned(blocks), kThreads, 0, stream>>>(a);
  TB_CHECK_LAUNCH();
}

}  // namespace

void mla_k_forward(TensorView<bf16> k, TensorView<const bf16> k_nope, TensorView<const bf16> k_rope,
                   cudaStream_t stream) {
  MlaKArgs a = args(k, k_nope, k_rope, "mla_k_forward");
  a.out = k.data(), a.in = k_nope.data(), a.rope = k_rope.data();
  launch(mla_k_forward_kernel, a, stream, "mla_k_forward");
}

void mla_k_backward(TensorView<bf16> dk_nope, TensorView<bf16> dk_rope, TensorView<const bf16> dk,
                    cudaStream_t stream) {
  MlaKArgs a = args(dk, dk_nope, dk_rope, "mla_k_backward");
  a.out = dk_nope.data(), a.in = dk.data(), a.rope_out = dk_rope.data();
  launch(mla_k_backward_kernel, a, stream, "mla_k_backward");
}

}  // namespace tb::ops
