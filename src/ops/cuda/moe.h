// ops/cuda/moe.h: Mixture-of-Experts routing and token dispatch on the GPU, dropless, for n tokens over E experts, k
// each (ops/cpu/moe.h is the reference they are tested against; model/config.h MoeConfig has the layer's math):
//   moe_route        per token (one warp): s = softmax(logits) | sigmoid(logits) (fp32 logits); chosen e_j: the k
//                    largest s + b (b: the expert bias, 0 without one; ties: the lower expert), or balanced
//                    (g k + j) mod E of the token's global index
//                    g = token0 + t;  w_j = scale · s_{e_j} / (normalize ? sum_j s_{e_j} : 1);  the pairs per
//                    sequence and expert (integer atomics: exact);  p (s, or s / sum s for sigmoid) and lse(logits)
//                    for the losses' values
//   moe_dispatch     the permuted row of every pair (t, j): held expert h's rows are [start_h, start_h + count_h)
//                    (the pairs of expert e go to held expert e mod held: a proxy of an ep rank; held = E: e), start_h
//                    a multiple of kMoeRowAlign (so every expert's rows are 256-byte aligned for the GEMMs), pairs in
//                    (t, j) order within an expert (a counting sort over chunks of pairs: deterministic).
//                    Capacity C > 0: each expert e keeps its C pairs of largest weight (ties: the earlier token; a
//                    first counting sort by expert, then each pair's rank in its expert's rows), a dropped pair gets
//                    row -1 (its weight is lost; its gradient 0); padding: each held expert's rows are (E / held) C
//                    (its C of each expert it holds), zero past its kept pairs (moe_zero_padding)
//   moe_permute      xp[row(t, j)] = x[t]
//   moe_unpermute    y[t] (+)= sum_j w_tj · o[row(t, j)]            (fp32 sum, one rounding; dropped pairs add nothing)
//   backward         dop[row] = w · dy[t], dw_tj = dy[t] · o[row] (dop may alias o; 0 when dropped);
//                    dx[t] (+)= sum_j dxp[row(t, j)]
//   moe_zero_padding  rows [start_h + count_h, start_{h+1}) of a permuted buffer = 0 (what padded GEMMs read)
//   moe_router_backward  dlogits from dw, the load-balancing losses and the z-loss, per token (one warp):
//                    ds = weights'(dw) + probs'(dp), dp_ti = aux_c · c_i + seq_c · c_{b(t) i} (c: the pair counts,
//                    the coefficients from moe_loss_coefficients);  dlogits = scores'(ds) + z · 2 lse softmax(logits)
//   moe_losses       the losses' values and the tokens per expert, added to a device accumulator (model/moe_stats.h),
//                    and the tokens per expert to the expert bias's load (when given)
//   moe_update_expert_bias  b_i += rate · sign(mean_j c_j - c_i) for the load c, then c = 0 (one block)
// Limits: E <= 256 and a multiple of 8 (the router GEMM's row alignment), k <= E, d a multiple of 8.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace tb::ops {

using bf16 = __nv_bfloat16;

enum class MoeScore : std::uint8_t { softmax, sigmoid };
inline constexpr int kMoeRowAlign = 16;  // rows: 16 rows of a width that is a multiple of 8 bf16 are 256 bytes
inline constexpr int kMoeMaxExperts = 256;

struct MoeRouting {  // one layer's routing of one micro-batch
  int tokens = 0;    // n
  int experts = 0;   // E
  int k = 1;
  int seq = 0;  // tokens per sequence (the per-sequence counts: n / seq sequences)
  MoeScore score = MoeScore::softmax;
  bool normalize = true;
  float scale = 1.f;
  bool balanced = false;
  std::int64_t token0 = 0;  // global index of token 0 (balanced routing)
  const float* bias = nullptr;  // [E] device: the expert bias added to s for the choice (null: none)
  int held = 0;             // the experts the dispatch groups rows by (0: experts); held divides experts
  int capacity = 0;         // > 0: pairs each expert keeps (the rest dropped)
  bool pad = false;         // capacity: each held expert's rows padded to (experts / held) capacity
  int sequences() const { return tokens / seq; }
  constexpr int held_experts() const { return held > 0 ? held : experts; }  // (device code too)
  // A held expert's rows when padded to capacity, aligned.
  constexpr std::int64_t padded_rows() const {
    const std::int64_t c = std::int64_t(experts / held_experts()) * capacity;
    return (c + kMoeRowAlign - 1) / kMoeRowAlign * kMoeRowAlign;
  }
  // Rows of the permuted buffers: every pair, plus each held expert's alignment padding (or its padded rows).
  std::int64_t rows() const {
    const std::int64_t free = std::int64_t(tokens) * k + std::int64_t(held_experts()) * (kMoeRowAlign - 1);
    return pad ? held_experts() * padded_rows() : free;
  }
};
// Raises Error{config} when the routing does not fit the kernels' limits (above).
void check_moe_routing(const MoeRouting& r);

struct MoeRouteOut {
  std::int32_t* expert = nullptr;      // [n, k]
  float* weight = nullptr;             // [n, k]
  std::int32_t* seq_counts = nullptr;  // [n / seq, E] (zeroed here)
  float* probs = nullptr;              // [n, E] or null
  float* lse = nullptr;                // [n] or null
};
void moe_route(const MoeRouting& r, const float* logits, MoeRouteOut out, cudaStream_t stream);

struct MoeDispatchOut {
  std::int32_t* row_of_pair = nullptr;  // [n, k]
  std::int32_t* start = nullptr;        // [held + 1]: start[held] = the rows in use
  std::int32_t* count = nullptr;        // [held]: the kept pairs
  std::int32_t* scratch = nullptr;      // moe_dispatch_scratch(r) ints
  double* dropped = nullptr;            // capacity: the pairs dropped are added here (may be null)
};
std::size_t moe_dispatch_scratch(const MoeRouting& r);
// weight: the pairs' weights (what a capacity keeps the largest of; unread without one).
void moe_dispatch(const MoeRouting& r, const std::int32_t* expert, const float* weight, MoeDispatchOut out,
                  cudaStream_t stream);

void moe_zero_padding(bf16* buf, const std::int32_t* start, const std::int32_t* count, int held, int d,
                      cudaStream_t stream);
void moe_permute(bf16* xp, const bf16* x, const std::int32_t* row_of_pair, int n, int k, int d, cudaStream_t stream);
void moe_unpermute(bf16* y, const bf16* o, const std::int32_t* row_of_pair, const float* weight, int n, int k, int d,
                   bool accumulate, cudaStream_t stream);
void moe_unpermute_backward(bf16* dop, float* dweight, const bf16* dy, const bf16* o, const std::int32_t* row_of_pair,
                            const float* weight, int n, int k, int d, cudaStream_t stream);
void moe_permute_backward(bf16* dx, const bf16* dxp, const std::int32_t* row_of_pair, int n, int k, int d,
                          bool accumulate, cudaStream_t stream);

// The gradient coefficients of the losses over p, times grad_scale: aux_c = aux_loss · E / (T² k), seq_c =
// seq_aux_loss · E / (k S · B S) with T = n tokens, B sequences of S; z = z_loss / T.
struct MoeLossCoeffs {
  float aux = 0, seq = 0, z = 0;
};
MoeLossCoeffs moe_loss_coefficients(const MoeRouting& r, double aux_loss, double seq_aux_loss, double z_loss,
                                    double grad_scale);
void moe_router_backward(const MoeRouting& r, bf16* dlogits, const float* logits, const std::int32_t* expert,
                         const float* dweight, const std::int32_t* seq_counts, MoeLossCoeffs c, cudaStream_t stream);

// stats (device doubles, accumulated): [0] aux = E / (T² k) sum_i c_i P_i, [1] seq aux = (1/B) sum_b sum_i
// (c_bi E / (k S)) (P_bi / S), [2] z = mean lse², [3 + i] c_i (P: sums of p). scratch: moe_losses_scratch(r) floats.
std::size_t moe_losses_scratch(const MoeRouting& r);
void moe_losses(const MoeRouting& r, const std::int32_t* seq_counts, const float* probs, const float* lse,
                double* stats, float* scratch, cudaStream_t stream, float* load = nullptr);
void moe_update_expert_bias(float* bias, float* load, int experts, float rate, cudaStream_t stream);

}  // namespace tb::ops
