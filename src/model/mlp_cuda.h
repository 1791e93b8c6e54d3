// model/mlp_cuda.h: the MLP of a CUDA decoder block, behind one interface (a block calls forward and backward once per
// micro-batch; a Mixture-of-Experts MLP is another implementation), and the dense MLP:
//   forward   h = x W1^T  [n, fc1_out];  g = act(h)  [n, ffn];  y = g W2^T  [n, d]
//             (fc1_out = 2 ffn for swiglu: gate | up; act: swiglu, gelu, sqrelu)
//   backward  dg = dy W2, dW2 (+)= dy^T g;  dh = act'(dg, h);  dx = dh W1, dW1 (+)= dh^T x
//             (dg over g and dh over h, in place: neither is read afterwards)
// FP8 (model/linear_cuda.h): with delayed scaling the activation writes fc2's E4M3 input and its transpose itself
// (g is not written) and its backward writes fc1's FP8 output gradient (dh not written in BF16); with current scaling
// they record the amax of what they write. Tensor parallel: fc1 column parallel, fc2 row parallel (x gathered and y
// reduce-scattered by the linears and the block).
// What it keeps for its backward, per activation set (RecomputePolicy): h unless full recompute, g only when the cheap
// outputs are kept (selective recompute computes it again from h), the FP8 X^T of fc1 and fc2 unless full recompute.
// The Mixture-of-Experts MLP: model/moe_mlp_cuda.h.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "model/arena_plan.h"
#include "model/config.h"
#include "model/linear_cuda.h"
#include "model/param_layout.h"
#include "model/recompute.h"
#include "ops/cuda/activation.h"

namespace tb::model {

inline ops::Activation activation_kind(Act a) {
  switch (a) {
    case Act::swiglu:
      return ops::Activation::swiglu;
    case Act::gelu:
      return ops::Activation::gelu;
    case Act::sqrelu:
      break;
  }
  return ops::Activation::sqrelu;
}

// What one call of an MLP gets from its decoder.
struct MlpCall {
  const LinearEnv& e;
  const RecomputePolicy& policy;
  std::int64_t rows;  // tokens of the micro-batch (gathered: all n rows under tensor parallel)
  int seq = 0;        // tokens per sequence (rows / seq sequences)
  double grad_scale = 1;  // the micro-batch's loss scale (a MoE layer's load-balancing losses scale with it)
};

class MlpCuda {
 public:
  using bf16 = __nv_bfloat16;
  virtual ~MlpCuda() = default;

  // Its linear layers in a fixed order (the decoder's FP8 tables and weight casts go over them in this order), and
  // what activation set `set` keeps for linear k of them.
  virtual std::vector<LinearCuda*> linears() = 0;
  virtual LinearSaved& saved(int set, int k) = 0;
  // The linear that reads the MLP's input x, when the block's pre-norm may write x's FP8 cast for it (index into
  // linears(); -1: the MLP reads x in BF16 itself, e.g. a router).
  virtual int input_linear() const = 0;
  // The linear whose output is y, when the norm backward that produces dy may record its amax (index; -1: none).
  virtual int output_linear() const = 0;

  // The most rows one call of a linear of it takes for a micro-batch of `rows` tokens (the FP8 scratch's rows).
  virtual std::int64_t max_linear_rows(std::int64_t rows, int /*seq*/) const { return rows; }
  // Plans its fields of `sets` activation sets for `rows` tokens (sequences of `seq`) in the pass (model/arena_plan.h).
  virtual void plan(ArenaPlan& a, const PlanPass& pass, int sets, std::int64_t rows, int seq,
                    const RecomputePolicy& p) = 0;
  // y = mlp(x) for set `set`; x_input: how x reaches the input linear (its FP8 cast may already be written).
  // recompute_only (full recompute in the backward): only what the backward reads, without y.
  virtual void forward(const MlpCall& c, int set, const bf16* x, LinearInput x_input, bf16* y,
                       bool recompute_only) = 0;
  // dx = d mlp / dx (dy), accumulating the weight gradients. dy: the output gradient [rows, d]; dy_amax_ready: its
  // producer recorded its amax (current scaling); after_dgrad: called after dx is written, before the last weight
  // gradient (the block's reduce-scatter of dx overlaps it). Selective recompute's cheap outputs are computed here.
  virtual void backward(const MlpCall& c, int set, const bf16* x, const bf16* dy, bool dy_amax_ready, bf16* dx,
                        const std::function<void()>& after_dgrad) = 0;
};

class DenseMlpCuda final : public MlpCuda {
 public:
  DenseMlpCuda(const ModelConfig& cfg, const DenseLayout& layout, const DenseLayout::Layer& layer);

  std::vector<LinearCuda*> linears() override { return {&fc1_, &fc2_}; }
  LinearSaved& saved(int set, int k) override { return sets_[std::size_t(set)].lin[k]; }
  int input_linear() const override { return 0; }
  int output_linear() const override { return 1; }
  void plan(ArenaPlan& a, const PlanPass& pass, int sets, std::int64_t rows, int seq,
            const RecomputePolicy& p) override;
  void forward(const MlpCall& c, int set, const bf16* x, LinearInput x_input, bf16* y, bool recompute_only) override;
  void backward(const MlpCall& c, int set, const bf16* x, const bf16* dy, bool dy_amax_ready, bf16* dx,
                const std::function<void()>& after_dgrad) override;

 private:
  struct Saved {  // per activation set: pointers into the arena
    bf16 *h = nullptr, *g = nullptr;
    LinearSaved lin[2];  // fc1, fc2
  };
  std::int64_t ffn() const { return fc2_.in(); }
  std::int64_t fc1_out() const { return fc1_.out(); }

  LinearCuda fc1_, fc2_;
  ops::Activation act_;
  std::vector<Saved> sets_;
};

// The MLP of `layer`: dense, or MoeMlpCuda for a MoE layer (ModelConfig::is_moe_layer).
std::unique_ptr<MlpCuda> make_mlp(const ModelConfig& cfg, const DenseLayout& layout, const DenseLayout::Layer& layer);

}  // namespace tb::model
