// ops/cuda/attention.h: causal grouped-query attention forward and backward through cuDNN's fused SDPA
// (graph API via cudnn-frontend), bf16 in and out, fp32 softmax statistics. The spec is the CPU reference
// ops/cpu/attention.h:
//   q: [b, s, H, d], k, v: [b, s, G, d], H % G == 0; query head h reads kv head h / (H / G)
//   S[i,j] = q_i . k_j / sqrt(d) for j <= i (causal, top-left diagonal; j > i masked out)
//   lse_i = log sum_{j<=i} exp(S[i,j]) (natural log, fp32 [b, H, s]),  o_i = sum_j exp(S[i,j] - lse_i) v_j
//   backward: dq, dk, dv from dout, q, k, v, o and lse (P recomputed); dk, dv sum over the H / G query heads
//   of their group. dq, dk, dv are written (not accumulated).
// Longer keys (context parallel: a rank's query chunk against the keys of every earlier position): with
//   kv_seq = n > s, k, v (and dk, dv) are [b, n, G, d] and the s queries are the LAST s positions of the
//   n-long sequence: query i sees keys j <= i + (n - s) (causal, diagonal at the bottom right), i.e.
//   ops/cpu/attention.h's _at forms with q_pos[i] = n - s + i. o, dout: [b, s, H, d]; lse stays [b, H, s].
//   kv_seq = 0 or s is the plain (top-left) case above.
// Different q / k and v widths (multi-head latent attention, model/config.h MlaConfig): v_head_dim = dv != 0 makes v,
//   dv, o and dout [.., dv] while q, k, dq, dk stay [.., d] and the scale 1 / sqrt(d); cuDNN on Hopper takes any
//   d, dv <= 256 that are multiples of 8, DeepSeek-V3's d 192 / dv 128 among them (cudnn-frontend 1.16's
//   support check; cuDNN's SDPA support matrix, backend 9.18), forward and backward.
// Packed rows (core/packing.h; segments > 0): each of the b rows of s tokens holds segments (documents and a row's
//   padding), each attending causally within itself only: ops/cpu/attention.h's _packed forms. cuDNN's ragged (THD)
//   layout with its padding mask: the graph's batch is the segment capacity B (`segments`), its sequence the row
//   length s (no segment is longer), and per micro-batch the device tables of PackedSegments (ops/cuda/segments.h
//   fills them from the offsets of core's segment_offsets, padded to B with empty segments): each segment's length
//   and its first token's offset into q|k|v (the fused qkv rows), o (and dout) and lse, which is then token-major
//   [b s, H] (cuDNN's ragged statistics) instead of [b, H, s]. The backward's workspace is bounded by the b s tokens
//   (max_total_seq_len). Needs cuDNN >= 9.6 (grouped-query attention with ragged offsets, 64-bit offsets); an older
//   cuDNN is refused with Error{unsupported} naming the version loaded. kv_seq must be 0 (no context parallel).
// Layout: q, k, v are read in place, through strides, from the fused QKV projection output
// [b*s, (H + 2G)*d] row-major (per token: the H query heads, then the G key heads, then the G value
// heads; model/param_layout.h), and dq, dk, dv are written into a gradient buffer of the same layout:
// no copies, no transposes. o and dout are [b, s, H, d] (contiguous by default). head_dim: 64 and 128 are
// the tested ones (cuDNN on Hopper takes multiples of 8 up to 256).
//
// FLOPs (multiply-add = 2), both conventions of docs/METRICS.md (dv = d unless v_head_dim: P V is 2 b H s^2 dv):
//   forward   full:   4 b H s^2 d  (Q K^T: 2 b H s^2 d, P V: 2 b H s^2 d)
//             causal: 2 b H s^2 d  (only the lower triangle: halved; exactly s(s+1)/2 of s^2 scores)
//   with kv_seq = n > s: full 4 b H s n d; causal 4 b H d (s n - s(s-1)/2), the visible scores of the
//             bottom-right block (query i sees n - s + i + 1 keys), counted exactly (no halving)
//   backward  = 2 x forward (dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q), the model/flops.h rule
//             (fwd + bwd = 3 x fwd); the kernel also recomputes Q K^T, so it does 2.5 x forward
//             (backward_with_recompute), the FlashAttention benchmarks' count.
// Llama 3.1 8B layer at s = 8192 (b=1, H=32, d=128): forward 5.50e11 (causal) / 1.10e12 (full).
//
// Plans: one AttentionPlan per AttentionShape (dims, strides, determinism) holds the forward and backward
// cuDNN graphs, built, support-checked and planned once (heuristic mode A, its first supported engine).
// CudnnAttention is the per-device cache (std::map<AttentionShape, AttentionPlan>) with its cuDNN handle
// and a workspace grown to the largest plan. Plan every shape before CUDA-graph capture: planning may
// reallocate the workspace (cudaMalloc) and building compiles kernels.
#pragma once

#include <cudnn.h>
#include <cuda_runtime_api.h>

#include <compare>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "ops/cuda/context.h"
#include "ops/cuda/cudnn.h"

namespace tb::ops {

// Element strides of one [batch, seq, heads, head_dim] bf16 tensor; head_dim is contiguous (stride 1).
struct HeadStrides {
  std::int64_t batch = 0, seq = 0, head = 0;
  auto operator<=>(const HeadStrides&) const = default;
};

struct AttentionShape {
  std::int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
  HeadStrides q, k, v;  // also the strides of dq, dk, dv
  HeadStrides o;        // also the strides of dout
  // Backward without atomic accumulation (bit-reproducible dq from run to run); slower.
  bool deterministic = false;
  // Keys and values per sequence; 0 means seq. Larger than seq: the queries are the last seq positions of
  // the kv_seq-long sequence (causal, bottom-right diagonal; see the top of this file).
  std::int64_t kv_seq = 0;
  // Packed rows: the capacity of segments per micro-batch (all rows together); 0: one sequence per row.
  std::int64_t segments = 0;
  // The width of v, dv, o and dout; 0 means head_dim (multi-head latent attention: its v_head_dim).
  std::int64_t v_head_dim = 0;
  std::int64_t keys() const { return kv_seq > 0 ? kv_seq : seq; }  // the key (and value) sequence length
  std::int64_t v_dim() const { return v_head_dim > 0 ? v_head_dim : head_dim; }
  auto operator<=>(const AttentionShape&) const = default;
};

// The segment tables of one packed micro-batch, on the device (ops/cuda/segments.h): for k < segments the length of
// segment k (0 for an unused one), and for k <= segments the element offsets of its first token in the fused qkv
// (and dqkv), in o (and dout) and in lse.
struct PackedSegments {
  const std::int32_t* seq_len = nullptr;
  const std::int64_t* qkv_offset = nullptr;
  const std::int64_t* o_offset = nullptr;
  const std::int64_t* stats_offset = nullptr;
};

// The oldest cuDNN packed shapes run on (grouped-query attention with ragged offsets).
inline constexpr int kCudnnPackedVersion = 90600;
// Error{unsupported} "<what>: packed sequences need cuDNN >= 9.6.0 ...; this process loaded cuDNN X.Y.Z ..." when the
// cuDNN loaded at run time (cudnnGetVersion) is older: planning a packed shape checks it, and so does the trainer
// before it allocates anything.
void require_packed_cudnn(const std::string& what);

// The model's layout: q, k, v views into the fused QKV buffer [b*s, (H + 2G)*d] (row stride (H + 2G)*d,
// q at column 0, k at H*d, v at (H + G)*d), o and dout contiguous [b, s, H, d].
AttentionShape fused_qkv_attention(std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t kv_heads,
                                   std::int64_t head_dim, bool deterministic = false);
std::size_t fused_qkv_elements(const AttentionShape& s);  // b*s*(H + 2G)*d: one fused QKV (or dQKV) buffer

// q, k, v (or dq, dk, dv) inside a fused bf16 buffer of fused_qkv_attention's layout.
struct QkvPointers {
  void* q = nullptr;
  void* k = nullptr;
  void* v = nullptr;
};
QkvPointers split_fused_qkv(void* qkv, const AttentionShape& s);

// Throws Error{config} saying what is wrong: non-positive dims, H % G != 0, head_dim or v_head_dim not a multiple of 8,
// kv_seq negative or (when not 0) below seq, strides that are not positive multiples of 8 elements (16 bytes,
// cuDNN's alignment), negative segments or segments with kv_seq.
void check_attention_shape(const AttentionShape& s);
// "b=1 s=8192 H=32 G=8 d=128 fused-qkv"; "b=1 s=1024 kv=4096 H=32 ..." when kv_seq differs from seq; " dv=128"
// after d when v_head_dim differs; " packed=64" for a packed shape's segment capacity.
std::string describe(const AttentionShape& s);

struct AttentionFlops {
  double forward = 0, backward = 0, backward_with_recompute = 0;
};
// causal = true: the causal convention (Q K^T and P V over the visible scores only: halved when kv_seq is
// seq); false: the full convention (every score of the s x kv_seq block). A packed shape is counted as unpacked rows
// (its work depends on the documents: model/flops.h counts them from their lengths).
AttentionFlops attention_flops(const AttentionShape& s, bool causal);

// Device pointers (cudaMalloc'ed, at least 16-byte aligned); q/k/v/o/dout/dq/dk/dv are bf16, lse fp32
// contiguous [b, H, s]. k, v, dk, dv hold kv_seq positions (through the k and v strides).
struct AttentionForwardArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  PackedSegments packed = {};  // packed shapes only
};
struct AttentionBackwardArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* o = nullptr;
  const void* dout = nullptr;
  const float* lse = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  PackedSegments packed = {};  // packed shapes only
};

class AttentionPlan {
 public:
  // Validates the shape, builds the forward and backward graphs, checks cuDNN supports them and builds
  // their execution plans. The device whose handle `handle` is must be current. Unsupported by this
  // cuDNN / GPU: Error{unsupported} with cuDNN's reason; other failures: Error{cudnn}.
  AttentionPlan(cudnnHandle_t handle, const AttentionShape& s);
  ~AttentionPlan();
  AttentionPlan(AttentionPlan&&) noexcept;
  AttentionPlan& operator=(AttentionPlan&&) noexcept;

  const AttentionShape& shape() const { return s_; }
  std::size_t forward_workspace_bytes() const;
  std::size_t backward_workspace_bytes() const;
  std::size_t workspace_bytes() const;                // the larger of the two
  std::string describe() const;                       // shape and the engines cuDNN chose (for results)

  // Enqueue on `stream` (set on the handle). ws.bytes must be at least the direction's workspace bytes.
  void forward(cudnnHandle_t handle, const AttentionForwardArgs& a, Workspace ws, cudaStream_t stream) const;
  void backward(cudnnHandle_t handle, const AttentionBackwardArgs& a, Workspace ws, cudaStream_t stream) const;

 private:
  struct Graphs;  // the cudnn-frontend graphs, in attention.cpp only (the frontend is heavy to compile)
  AttentionShape s_;
  std::unique_ptr<Graphs> g_;
};

// The per-device attention state: cuDNN handle, plan cache, workspace. Owned by whoever runs the model
// (no globals); the device is made current as needed.
// The per-device cache (ops/cuda/cudnn.h).
using CudnnAttention = CudnnPlanCache<AttentionShape, AttentionPlan, AttentionForwardArgs, AttentionBackwardArgs>;

}  // namespace tb::ops
