// ops/cuda/moe.h: Mixture-of-Experts routing and token dispatch on the GPU, dropless, for n tokens over E experts, k
// each (ops/cpu/moe.h is the reference they are tested against; model/config.h MoeConfig has the layer's math):
//   moe_route        per token (one warp): s = softmax(logits) | sigmoid(logits) (fp32 logits); chosen e_j: the k
//                    largest s (ties: the lower expert), or balanced (g k + j) mod E of the token's global index
//                    g = token0 + t;  w_j = scale · s_{e_j} / (normalize ? sum_j s_{e_j} : 1);  the pairs per
//                    sequence and expert (integer atomics: exact);  p (s, or s / sum s for sigmoid) and lse(logits)
//                    for the losses' values
//   moe_dispatch     the permuted row of every pair (t, j): expert e's rows are [start_e, start_e + count_e), start_e
//                    a multiple of kMoeRowAlign (so every expert's rows are 256-byte aligned for the GEMMs), pairs in
//                    (t, j) order within an expert (a counting sort over chunks of pairs: deterministic)
//   moe_permute      xp[row(t, j)] = x[t]
//   moe_unpermute    y[t] (+)= sum_j w_tj · o[row(t, j)]            (fp32 sum, one rounding)
//   backward         dop[row] = w · dy[t], dw_tj = dy[t] · o[row] (dop may alias o);  dx[t] (+)= sum_j dxp[row(t, j)]
//   moe_router_backward  dlogits from dw, the load-balancing losses and the z-loss, per token (one warp):
//                    ds = weights'(dw) + probs'(dp), dp_ti = aux_c · c_i + seq_c · c_{b(t) i} (c: the pair counts,
//                    the coefficients from moe_loss_coefficients);  dlogits = scores'(ds) + z · 2 lse softmax(logits)
//   moe_losses       the losses' values and the tokens per expert, added to a device accumulator (model/moe_stats.h)
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
  int sequences() const { return tokens / seq; }
  // Rows of the permuted buffers: every pair, plus each expert's alignment padding.
  std::int64_t rows() const { return std::int64_t(tokens) * k + std::int64_t(experts) * (kMoeRowAlign - 1); }
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
  std::int32_t* start = nullptr;        // [E + 1]: start[E] = the rows in use
  std::int32_t* count = nullptr;        // [E]
  std::int32_t* scratch = nullptr;      // moe_dispatch_scratch(r) ints
};
std::size_t moe_dispatch_scratch(const MoeRouting& r);
void moe_dispatch(const MoeRouting& r, const std::int32_t* expert, MoeDispatchOut out, cudaStream_t stream);

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
                double* stats, float* scratch, cudaStream_t stream);

}  // namespace tb::ops
