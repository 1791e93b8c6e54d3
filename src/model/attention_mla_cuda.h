// model/attention_mla_cuda.h: the multi-head latent attention of a CUDA decoder block (model/config.h MlaConfig has the
// math), from the norm's output y1 [n, d] to the out projection's output [n, d]: BF16, tensor and context parallel 1
// (the CPU decoder runs every layout). A = heads, Dqk = Dn + Dr, every buffer [rows, cols] row-major bf16:
//   forward   cqr = y1 W_dq^T [n, Rq];  cq = rmsnorm(cqr)                        (Rq = 0: neither; q reads y1)
//             q = cq W_uq^T [n, A Dqk];  RoPE on each head's rope part of q, in place
//             ckr = y1 W_dkv^T [n, Rkv + Dr];  ckv = rmsnorm(ckr[:, :Rkv]) [n, Rkv];  RoPE on ckr[:, Rkv:] in place
//             kv = ckv W_ukv^T [n, A (Dn + Dv)];  k = mla_k_forward(kv's k_nope, ckr's k_rope) [n, A Dqk]
//             o, lse = SDPA(q, k, v: kv's v parts in place) [n, A Dv]   (cuDNN: q, k width Dqk, v width Dv)
//             y = o W_o^T
//   backward  do = dy W_o, dW_o += dy^T o;  dq, dk, dv = SDPA'(...) (dv into dkv's v parts);  RoPE^-1 on dq's rope
//             dkv's k_nope parts, dckr[:, Rkv:] = mla_k_backward(dk);  RoPE^-1 on dckr[:, Rkv:]
//             dckv = dkv W_ukv, dW_ukv;  dckr[:, :Rkv] = rmsnorm'(dckv), dW_kv_norm
//             dcq = dq W_uq, dW_uq;  dcqr = rmsnorm'(dcq), dW_q_norm;  dy1 = dcqr W_dq, dW_dq   (Rq = 0: dq W_q)
//             dy1 += dckr W_dkv, dW_dkv   (the second input gradient GEMM accumulates)
// The norms and RoPE are ops/cuda/norm.h and rope.h on strided views; the keys' assembly ops/cuda/mla.h; the SDPA
// ops/cuda/attention.h with v_head_dim. What a micro-batch keeps per activation set (model/recompute.h): cqr, ckr, q,
// kv, o, lse and the norms' rstd unless full recompute; cq, ckv and k only when the cheap outputs are kept (selective
// recompute computes them again at the start of the backward: two norms and mla_k_forward); the backward's gradients
// are one copy shared by the layers. The linears are LinearCuda objects, listed by linears() in a fixed order.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "model/arena_plan.h"
#include "model/config.h"
#include "model/linear_cuda.h"
#include "model/param_layout.h"
#include "model/recompute.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/context.h"

namespace tb::model {

// What every MLA layer of a decoder shares: the SDPA plans (their cuDNN handle and workspace) and the RoPE
// frequencies (qk_rope_head_dim / 2, on the device).
class MlaShared {
 public:
  MlaShared(ops::DeviceContext& dc, const ModelConfig& cfg, bool deterministic);
  // The SDPA shape of a micro-batch of batch x seq tokens (q, k [n, A Dqk]; v inside kv [n, A (Dn + Dv)]; o [n, A Dv]).
  static ops::AttentionShape sdpa_shape(const ModelConfig& cfg, int batch, int seq, bool deterministic);
  void prepare(int batch, int seq);  // plans the SDPA (may grow its workspace; allocates)
  std::size_t workspace_bytes() const { return sdpa_.workspace_bytes(); }
  ops::CudnnAttention& sdpa() { return sdpa_; }
  TensorView<const float> inv_freq() const;
  bool deterministic() const { return deterministic_; }

 private:
  ModelConfig cfg_;
  bool deterministic_;
  ops::CudnnAttention sdpa_;
  ops::DeviceBuffer inv_freq_;
};

// What one call of a MLA layer gets from its decoder.
struct MlaCall {
  const LinearEnv& e;
  const RecomputePolicy& policy;
  MlaShared& shared;
  ops::Workspace norm_ws;  // the norm backward's (norm_backward_workspace_bytes of n rows and the widest latent)
  int batch = 0, seq = 0;
};

class MlaAttentionCuda {
 public:
  using bf16 = __nv_bfloat16;
  MlaAttentionCuda(const ModelConfig& cfg, const DenseLayout& layout, const DenseLayout::Layer& layer);

  // q_down (Rq > 0), q_up (W_uq, or W_q), kv_down, kv_up, out; what activation set `set` keeps for linear k of them.
  std::vector<LinearCuda*> linears();
  LinearSaved& saved(int set, int k) { return sets_[std::size_t(set)].lin[k]; }
  // Plans its fields of `sets` activation sets for `rows` tokens in the pass (model/arena_plan.h).
  void plan(ArenaPlan& a, const PlanPass& pass, int sets, std::int64_t rows, const RecomputePolicy& p);
  // y [n, d] = the attention of y1 [n, d] for activation set `set` (see the top).
  void forward(const MlaCall& c, int set, const bf16* y1, bf16* y);
  // dx [n, d] (written) from the output gradient dy [n, d]; the weight gradients accumulated (or written: the
  // LinearEnv's overwrite).
  void backward(const MlaCall& c, int set, const bf16* y1, const bf16* dy, bf16* dx);

 private:
  struct Saved {  // per activation set: pointers into the arena (the gradients: one copy for every set)
    bf16 *cqr = nullptr, *cq = nullptr, *ckr = nullptr, *ckv = nullptr, *q = nullptr, *kv = nullptr, *k = nullptr,
         *o = nullptr;
    float *rstdq = nullptr, *rstdkv = nullptr, *lse = nullptr;
    bf16 *dq = nullptr, *dk = nullptr, *dkv = nullptr, *dout = nullptr, *dcq = nullptr, *dcqr = nullptr,
         *dckv = nullptr, *dckr = nullptr;
    LinearSaved lin[5];  // linears()' order
  };
  // The outputs selective recompute computes again: cq, ckv (the latent norms, from cqr and ckr) and k (from kv and
  // the rotated k_rope in ckr).
  void norms(const MlaCall& c, const Saved& S) const;
  void keys(const MlaCall& c, const Saved& S) const;

  ModelConfig cfg_;
  MlaConfig m_;
  std::int64_t heads_;
  const Slot* q_norm_;                  // the latent norms' gains (q_norm_ null when Rq = 0)
  const Slot* kv_norm_;
  std::unique_ptr<LinearCuda> q_down_;  // Rq > 0
  LinearCuda q_up_, kv_down_, kv_up_, out_;
  std::vector<Saved> sets_;
};

}  // namespace tb::model
