// ops/cuda/attention_fp8.h: causal grouped-query attention forward and backward with FP8 operands, through cuDNN's
// fused FP8 SDPA (cudnn-frontend sdpa_fp8 / sdpa_fp8_backward), per-tensor scales in device memory. The math is
// ops/cuda/attention.h's (spec: ops/cpu/attention.h) on the dequantised tensors; every FP8 tensor x8 stands for
// x = x8 * descale_x, descale = 1 / the scale its cast used:
//   forward:  S = q k^T / sqrt(d) (causal, top left), lse = log sum_j exp S (fp32 [b, H, s]), P = exp(S - lse),
//             o = P v, with P entering P v as fp8(P * scale_s);
//             writes o8 = fp8(o * scale_o), lse, amax_o = max |o|, amax_s = max P (1: query 0 sees only itself)
//   backward: P from q, k, lse; D_i = do_i . o_i; dS = P (do v^T - D) / sqrt(d) (cuDNN calls it dP);
//             dv = P^T do (P as fp8(P * scale_s)); dq = dS k, dk = dS^T q (dS as fp8(dS * scale_dp) in the
//             gradient format); writes dq8 = fp8(dq * scale_dq) (dk, dv alike), amax_dp = max |dS|,
//             amax_dq, amax_dk, amax_dv (of the fp32 results, before scaling); dk, dv sum over a group's heads.
// Formats (cuDNN 9.19 on Hopper, cudnn-frontend 1.16): q, k, v, o and P are E4M3; dO, dS, dq, dk, dv are
//   Fp8AttentionShape::grad (E5M2 by default, the linear layers' "hybrid" format; E4M3 allowed). o and dq, dk, dv
//   come out in FP8: the frontend accepts bf16/fp16 outputs from FP8 SDPA only on Blackwell with cuDNN >= 9.13
//   (its sdpa_support_surface.h and sdpa_fp8_bwd.h say so and refuse the graph elsewhere).
// Scales:
//   P: fixed, kPScale = 448 (descale 1/448). P <= 1 in both kernels (the forward's exp(S - running max) before
//      normalisation, the backward's exp(S - lse)), so the largest P lands on E4M3's largest finite value and no
//      history is needed. amax_s is still written (cuDNN's graph has the output).
//   dS: delayed. Nothing before the backward knows max |dS|, so scale_dp = fp8_max(grad) / amax_dp / 2^margin comes
//      from an earlier backward's amax_dp (the previous step's), which every backward writes; the first step has
//      none and starts from scale 1, as the linear layers' delayed recipe does.
//   o, dq, dk, dv: the caller's recipe (delayed: from the amax outputs of an earlier call).
//   Every scale and amax is one device float (4-byte aligned; Fp8Scales' 256-byte slots in ops/cuda/fp8.h are the
//   intended home). Amaxes are overwritten each call, not max-accumulated: with several micro-batches per step the
//   caller keeps the max.
// Layout: as attention.h, in 1-byte elements: q, k, v read through strides from one fused FP8 QKV buffer
//   [b*s, (H + 2G)*d] (the FP8 copy of the bf16 fused QKV after RoPE: one cast, one scale for all three, or
//   three), dq, dk, dv written into a fused FP8 buffer of the same layout, o and dO [b, s, H, d] contiguous;
//   strides must be multiples of 16 elements (16 bytes).
// Limits: kv_seq must be 0 or seq (bottom-right causal FP8 SDPA is Blackwell-only, and frontend 1.16's FP8
//   backward drops the mask when only the bottom-right flag is set); no deterministic backward (frontend 1.16 has
//   no switch for FP8). Both: Error{config} before cuDNN is asked. head_dim: a multiple of 16, at most 256 forward;
//   the FP8 backward on Hopper takes exactly 128 (at most 128 on Blackwell): other sizes get Error{unsupported}
//   with cuDNN's reason when the plan is built.
// FLOPs: attention_flops(shape.attn, causal), the same count as the bf16 op.
// Plans: Fp8AttentionPlan (forward and backward graphs, built and planned once per shape) and CudnnFp8Attention
// (per-device cache, handle, workspace), as AttentionPlan / CudnnAttention; plan every shape before graph capture.
#pragma once

#include <cudnn.h>
#include <cuda_runtime_api.h>

#include <compare>
#include <cstddef>
#include <map>
#include <memory>
#include <string>

#include "core/dtype.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/context.h"
#include "ops/cuda/cudnn.h"

namespace tb::ops {

inline constexpr float kPScale = 448.0f;  // scale_s: P <= 1 onto E4M3's largest finite value

struct Fp8AttentionShape {
  AttentionShape attn;       // dims and strides in elements (1 byte each); kv_seq 0 or seq; not deterministic
  DType grad = DType::e5m2;  // dO, dS, dq, dk, dv: e5m2 or e4m3
  auto operator<=>(const Fp8AttentionShape&) const = default;
};

// The model's layout (fused_qkv_attention's strides) with FP8 gradients in `grad`.
Fp8AttentionShape fp8_fused_qkv_attention(std::int64_t batch, std::int64_t seq, std::int64_t heads,
                                          std::int64_t kv_heads, std::int64_t head_dim, DType grad = DType::e5m2);
// q, k, v (or dq, dk, dv) inside a fused FP8 buffer of fused_qkv_attention's layout (1-byte elements).
QkvPointers split_fused_qkv_fp8(void* qkv, const AttentionShape& s);

// check_attention_shape's rules, then Error{config} for strides that are not multiples of 16 elements, kv_seq other
// than 0 or seq, deterministic, or grad not e4m3/e5m2.
void check_fp8_attention_shape(const Fp8AttentionShape& s);
std::string describe(const Fp8AttentionShape& s);  // "fp8 b=1 s=8192 H=32 G=8 d=128 fused-qkv grad e5m2"

// An FP8 input: x = *data * *descale.
struct Fp8AttentionIn {
  const void* data = nullptr;
  const float* descale = nullptr;
};
// An FP8 output: data = fp8(x * *scale); *amax = max |x| (written).
struct Fp8AttentionOut {
  void* data = nullptr;
  const float* scale = nullptr;
  float* amax = nullptr;
};
// A tensor that lives only inside the kernel (P, dS): its FP8 scale, descale (1 / scale) and amax (written).
struct Fp8AttentionInner {
  const float* scale = nullptr;
  const float* descale = nullptr;
  float* amax = nullptr;
};

// Data pointers: device, 16-byte aligned; lse fp32 contiguous [b, H, s].
struct Fp8AttentionForwardArgs {
  Fp8AttentionIn q, k, v;  // E4M3
  Fp8AttentionOut o;       // E4M3
  float* lse = nullptr;
  Fp8AttentionInner s;     // P: scale kPScale, descale 1 / kPScale
};
struct Fp8AttentionBackwardArgs {
  Fp8AttentionIn q, k, v, o;   // E4M3: the forward's inputs and its output o8 (descale = 1 / its scale_o)
  Fp8AttentionIn dout;         // grad format
  const float* lse = nullptr;  // the forward's
  Fp8AttentionInner s;         // P: the forward's scale and descale; amax unused (the backward has no amax of P)
  Fp8AttentionInner dp;        // dS: scale (delayed), descale = 1 / scale, amax written
  Fp8AttentionOut dq, dk, dv;  // grad format
};

class Fp8AttentionPlan {
 public:
  // Checks the shape, builds the forward and backward FP8 graphs, checks cuDNN supports them and builds their plans;
  // the handle's device must be current. Unsupported by this cuDNN / GPU: Error{unsupported} naming the direction,
  // the shape and cuDNN's reason; other failures: Error{cudnn}.
  Fp8AttentionPlan(cudnnHandle_t handle, const Fp8AttentionShape& s);
  ~Fp8AttentionPlan();
  Fp8AttentionPlan(Fp8AttentionPlan&&) noexcept;
  Fp8AttentionPlan& operator=(Fp8AttentionPlan&&) noexcept;

  const Fp8AttentionShape& shape() const { return s_; }
  std::size_t forward_workspace_bytes() const;
  std::size_t backward_workspace_bytes() const;
  std::size_t workspace_bytes() const;  // the larger of the two
  std::string describe() const;         // shape and the engines cuDNN chose

  // Enqueue on `stream`. ws.bytes must be at least the direction's workspace bytes. Null or misaligned pointers:
  // Error{config} before anything is enqueued.
  void forward(cudnnHandle_t handle, const Fp8AttentionForwardArgs& a, Workspace ws, cudaStream_t stream) const;
  void backward(cudnnHandle_t handle, const Fp8AttentionBackwardArgs& a, Workspace ws, cudaStream_t stream) const;

 private:
  struct Graphs;  // in attention_fp8.cpp only (the frontend is heavy to compile)
  Fp8AttentionShape s_;
  std::unique_ptr<Graphs> g_;
};

// The per-device FP8 attention state: cuDNN handle, plan cache, workspace (no globals).
// The per-device cache (ops/cuda/cudnn.h).
using CudnnFp8Attention =
    CudnnPlanCache<Fp8AttentionShape, Fp8AttentionPlan, Fp8AttentionForwardArgs, Fp8AttentionBackwardArgs>;

}  // namespace tb::ops
