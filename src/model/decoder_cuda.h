// model/decoder_cuda.h: the dense decoder family (model/decoder_cpu.h is the spec) on one GPU through the
// ops/cuda kernels: bf16 weights and activations, fp32 weight gradients, no recomputation, no CUDA graphs yet.
// Data flow (n = batch * seq tokens, [rows, cols] row-major bf16 unless marked f32; ops in namespace tb::ops):
//   forward
//     x0 = embedding_forward(E, tokens) (+ position_embedding_add(P))          [n, d]
//     per layer:  y1, r1 = add_norm(x, resid)             (resid: none for layer 0; r1 = x + resid, saved)
//                 qkv = y1 Wqkv^T                          GEMM abt  [n, (H + 2G) hd]  (Q heads | K heads | V heads)
//                 rope_forward on the Q and K heads of qkv, in place (one call, a strided view that skips V)
//                 o, lse = CudnnAttention(qkv)             o [n, H hd], lse f32 [b, H, s]
//                 a = o Wout^T                             GEMM abt  [n, d]
//                 y2, r2 = add_norm(a, r1)
//                 h = y2 W1^T                              GEMM abt  [n, ffn or 2 ffn]
//                 g = act(h)                               [n, ffn]
//                 x = g W2^T;  resid = r2                  GEMM abt  [n, d]
//     yf, rf = add_norm(x, resid);  loss = lm_head_cross_entropy(yf, Wlm)   (tied: Wlm is E)
//   backward (dnext: gradient of the sum r entering the next norm), each linear y = x W^T as
//     dx = dy W (GEMM ab, bf16)  and  dW += dy^T x (GEMM atb, fp32, accumulated into the gradient slot):
//     dyf, dWlm += CE'(...);  dnext = add_norm_backward(dyf)
//     per layer, last first:  dg = dnext W2, dW2 += dnext^T g;  dh = act'(dg, h);  dy2 = dh W1, dW1 += dh^T y2
//                             dr2 = add_norm_backward(dy2, r2) + dnext
//                             do = dr2 Wout, dWout += dr2^T o;  dqkv = attention'(do, ...)
//                             rope_backward on the dQ and dK heads of dqkv;  dy1 = dqkv Wqkv, dWqkv += dqkv^T y1
//                             dnext = add_norm_backward(dy1, r1) + dr2
//     dE += embedding_backward(dnext, tokens)  (+ dP += position_embedding_backward(dnext))
// Parameters: ONE bf16 device buffer in model/param_layout.h's DenseLayout (the CPU decoder's), gradients ONE
// fp32 device buffer of the same layout. forward_backward ACCUMULATES grad_scale * dloss/dparams (the caller
// zeroes, as with CpuDecoder). Activations live in plainly allocated device buffers, (re)allocated when the token
// count changes (an arena comes later). Every slot must start 256-byte aligned in the bf16 buffer (offsets
// multiples of 128 elements: the cuBLASLt plans, norm and CE kernels assume it); the constructor refuses a config
// whose layout breaks that, saying which slot.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/config.h"
#include "model/param_layout.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/context.h"

namespace tb::model {

class CudaDecoder {
 public:
  using bf16 = __nv_bfloat16;

  CudaDecoder(ops::DeviceContext& dc, const ModelConfig& cfg);
  ~CudaDecoder();
  CudaDecoder(const CudaDecoder&) = delete;
  CudaDecoder& operator=(const CudaDecoder&) = delete;

  const ModelConfig& config() const { return cfg_; }
  const DenseLayout& dense_layout() const { return layout_; }

  // host_params: layout total elements, in CpuDecoder::params() order; rounded to bf16 (nearest even).
  void load_params(std::span<const float> host_params);
  std::vector<float> params_to_host();  // the bf16 parameters, widened
  std::vector<float> grads_to_host();   // the fp32 gradients
  void zero_grads();

  bf16* params_device() const { return params_.as<bf16>(); }
  float* grads_device() const { return grads_.as<float>(); }

  // tokens, targets: [batch, seq] row-major host arrays, values in [0, vocab) (checked on the host);
  // 1 <= seq <= config().seq. Returns the mean cross-entropy (synchronizes the stream).
  double forward_backward(const std::int32_t* host_tokens, const std::int32_t* host_targets, int batch, int seq,
                          double grad_scale = 1.0);

 private:
  struct LayerActs {  // saved for the backward
    ops::DeviceBuffer r1, mean1, rstd1, y1, qkv, o, lse, r2, mean2, rstd2, y2, h, g;
  };
  void ensure_buffers(int batch, int seq);
  void linear_forward(bf16* y, const bf16* x, int w_slot, std::int64_t rows);
  void linear_backward(bf16* dx, int w_slot, const bf16* dy, const bf16* x, std::int64_t rows);

  ops::DeviceContext& dc_;
  ModelConfig cfg_;
  DenseLayout layout_;
  ops::DeviceBuffer params_, grads_;  // bf16, fp32; layout_.total elements each
  ops::DeviceBuffer inv_freq_;        // [head_dim / 2] fp32 (pos == rope)
  std::unique_ptr<ops::CudnnAttention> attention_;

  // Activations and gradient scratch for batch_ x seq_ tokens.
  int batch_ = 0, seq_ = 0;
  std::vector<LayerActs> acts_;
  ops::DeviceBuffer tokens_, targets_, x0_, m_, rf_, meanf_, rstdf_, yf_, loss_, ce_scratch_;
  ops::DeviceBuffer dyf_, dnext_, dr2_, dy_, dg_, dh_, dout_, dqkv_;
};

}  // namespace tb::model
