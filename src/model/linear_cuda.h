// model/linear_cuda.h: a linear layer of the CUDA decoder, y[rows, out] = x[rows, in] W[out, in]^T. A LinearCuda owns
// its weight's handle (a registry slot, model/params.h), its tensor-parallel role and communication, and its FP8 state
// (the views of its weight's E4M3 copies W and W^T, and its scaling slots: input x, weight W, output gradient dy);
// what one micro-batch keeps for its backward (FP8: X^T and its scale) is a LinearSaved in that micro-batch's
// activation set. The decoder owns the storage (one FP8 weight buffer, one scaling table per kind, so the delayed
// scaling update and the amax reduction stay one batched call per step) and lends each call a LinearEnv.
//   forward   BF16: y = x W^T (cuBLASLt abt).  FP8: xq, X^T = e4m3(x) (unless the producer of x wrote them), then
//             y = (xq s_x^-1)(Wq s_w^-1)^T with fast accumulation.
//             Column parallel (qkv, fc1) with `gathering` input: this rank's rows while the other ranks' arrive.
//             Row parallel (out, fc2) at tp > 1: y = this rank's rows of the sum over the tp ranks (a reduce-scatter;
//             tp 2 with exchange_async: the other rank's rows first, sent while this rank's are computed).
//   backward  dW (+)= dy^T x (fp32 or bf16, written at the step's first micro-batch), dx = dy W.  FP8: dyq, dyq^T =
//             fp8_grad(dy) (unless already cast); dW (+)= (dyq^T)(X^T)^T; dx = dyq (W^T)^T.
//   cast_weight  W, W^T = e4m3(W) with the weight's scale (once per optimizer step; a frozen weight's once).
// A frozen weight (no gradient slot: the base under LoRA) runs no weight-gradient GEMM, and in FP8 keeps no X^T and
// casts no transposed output gradient. LoRA's adapters (model/lora_cuda.h) run in BF16 on the same input and into the
// same output (a row-parallel linear's partial sums: at tp > 1 its rows then go in one reduce-scatter, not the tp 2
// exchange); they read x in BF16, so its producer never emits only its FP8 cast. In a BF16 forward whose adapters
// cover all of y (and whose x is not still arriving) they write y first and the base GEMM accumulates onto it; in a
// BF16 backward, where LoRA's input gradient can be written, it writes dx and the base dgrad accumulates (the base
// GEMM's epilogue reads y or dx in place of a pass of LoRA's own); else they add after the base GEMMs.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "model/lora_cuda.h"
#include "model/params.h"
#include "ops/cuda/context.h"
#include "ops/cuda/fp8.h"
#include "ops/cuda/lora.h"

namespace tb::model {

struct Fp8Options;
struct TensorParallelOps;

// How the input x reaches a linear's forward: bf16 x whole; gathering: bf16, the other tp ranks' rows still arriving
// (all_gather_async: this rank's rows first); amax_ready: current scaling's amax of x already in its slot (its
// producer recorded it); cast: the FP8 scratch xq and X^T already hold x (the producer wrote them; x unused).
enum class LinearInput { bf16, gathering, amax_ready, cast };

struct LinearSaved {  // per activation set
  std::uint8_t* xt = nullptr;  // FP8: X^T (E4M3) for the weight gradient (a trainable weight's)
  ops::Fp8Meta xs{};           // FP8: its scaling slot
  __nv_bfloat16* lora_z = nullptr;  // LoRA: each adapter's z = xd A^T (LoraCuda::z_stride elements apart)
};

// What the decoder lends its linears for one call.
struct LinearEnv {
  using bf16 = __nv_bfloat16;
  ops::DeviceContext& dc;
  const Fp8Options& fp8;
  const TensorParallelOps& tp;
  const bf16* params;  // the decoder's flat parameters (bf16)
  void* grads;         // and gradients (grad_type)
  DType grad_type;
  bool overwrite;                  // write the weight gradient (beta 0) instead of accumulating
  std::uint8_t *xq, *dyq, *dyqt;   // FP8 scratch: an input, an output gradient and that transposed
  bf16 *part, *dyl;                // tp: a row-parallel GEMM's partial output [n, out]; a received block
  const std::function<void(std::string_view)>& mark;
  // LoRA (model/lora_cuda.h): scratch ws (LoraCuda::workspace_bytes), t [n, in] and dz [adapters][n, r]; the
  // dropout's step (device) and the micro-batch's rows in the step's batch (ops/cuda/lora.h; the columns are the
  // linear's to set).
  void* lora_ws = nullptr;
  bf16 *lora_t = nullptr, *lora_dz = nullptr;
  const std::int64_t* step = nullptr;
  ops::LoraRows rows{};
  void* grad(const Slot& w) const { return static_cast<std::byte*>(grads) + w.grad_offset * dtype_size(grad_type); }
};

// a (x, shape, q / qt, type) cast with slot m's scale: delayed (the slot's scale; amax recorded) or current (the amax
// of x first, unless amax_ready).
void fp8_scaled_cast(ops::DeviceContext& dc, int margin, ops::Fp8CastArgs a, const ops::Fp8Meta& m, bool delayed,
                     bool amax_ready);

// A delayed-scaling cast of a [rows, cols] tensor into q (or null) and qt (or null) with slot m's scale, recording its
// amax (the source x is the caller's to set).
ops::Fp8CastArgs fp8_delayed_cast(const ops::Fp8Meta& m, DType type, std::int64_t rows, std::int64_t cols,
                                  std::uint8_t* q, std::uint8_t* qt, int margin);

// Current scaling: slot m's amax zeroed, for the kernel that produces the tensor to record its amax into; null otherwise
// (BF16, delayed scaling).
float* fp8_fused_amax(const LinearEnv& e, const ops::Fp8Meta& m);

class LinearCuda {
 public:
  using bf16 = __nv_bfloat16;
  struct Fp8State {
    std::uint8_t* w = nullptr;  // E4M3 W [out, in]; W^T [in, out] follows at wt
    std::uint8_t* wt = nullptr;
    ops::Fp8Meta x{}, w_scale{}, dy{};  // x: activation set 0's input slot (delayed: every set's)
  };

  // adapters: LoRA's on this linear (model/param_layout.h), with the model's LoRA config.
  LinearCuda(const ParamRegistry& registry, int slot, const std::vector<Adapter>& adapters = {},
             const LoraConfig& lora = {});
  int slot() const { return slot_; }
  const Slot& weight() const { return *w_; }
  std::int64_t out() const { return w_->shape[0]; }
  std::int64_t in() const { return w_->shape[1]; }
  TpRole tp_role() const { return w_->tags.tp; }
  bool trainable() const { return w_->has_grad(); }
  const LoraCuda& lora() const { return lora_; }
  // What its backward reads of its input: x in BF16 (LoRA; a trainable weight's gradient in BF16), its FP8 X^T (a
  // trainable weight in FP8). fp8_fusable: the producers of its input and of its output gradient may write their FP8
  // casts alone, without the BF16 tensor (the pre-norm's, the MLP activation's fused casts): no LoRA, which reads
  // both in BF16. (A frozen weight keeps no X^T: the fused casts write theirs to scratch.)
  bool reads_bf16_input(bool fp8_on) const { return !lora_.empty() || (trainable() && !fp8_on); }
  bool keeps_fp8_input(bool fp8_on) const { return fp8_on && trainable(); }
  bool fp8_fusable() const { return lora_.empty(); }
  Fp8State fp8;

  void forward(const LinearEnv& e, bf16* y, const bf16* x, const LinearSaved& s, std::int64_t rows,
               LinearInput input = LinearInput::bf16) const;
  // dy: the output gradient (FP8: cast into dyq / dyqt first; null: already there); amax_ready: its amax was recorded
  // by its producer (current scaling). dx null: no input gradient; it may alias x. With `after_dgrad` (dx apart from
  // x): dx first, then after_dgrad() (e.g. start dx's reduce-scatter), then dW.
  // dx_accumulate (BF16): dx += dy W instead of dx = dy W (two linears reading one input: MLA's down projections).
  void backward(const LinearEnv& e, bf16* dx, const bf16* dy, const bf16* x, const LinearSaved& s, std::int64_t rows,
                const std::function<void()>& after_dgrad = {}, bool amax_ready = false,
                bool dx_accumulate = false) const;
  // FP8: x [rows, in] (forward, E4M3) or an output gradient [rows, out] (Fp8Options::grad) cast into q and/or qt.
  void cast_input(const LinearEnv& e, const bf16* x, std::int64_t rows, const ops::Fp8Meta& m, bool amax_ready,
                  std::uint8_t* q, std::uint8_t* qt) const;
  // delayed: with the weight slot's delayed scale (recording its amax), else current scaling (its own amax first).
  void cast_weight(const LinearEnv& e, bool delayed) const;
  // Delayed scaling: the cast that writes W and W^T with the weight's scale (an optimizer's fused copy).
  ops::Fp8CastArgs weight_cast(int margin) const;

 private:
  void forward_cast(const LinearEnv& e, const bf16* x, const LinearSaved& s, std::int64_t rows,
                    LinearInput input) const;
  void forward_gemm(const LinearEnv& e, bf16* y, const bf16* x, const LinearSaved& s, std::int64_t r0,
                    std::int64_t m, bool accumulate = false) const;  // rows [r0, r0 + m) of y (BF16: or +=)
  void forward_with_lora(const LinearEnv& e, bf16* y, const bf16* x, const LinearSaved& s, std::int64_t rows) const;
  void cast_grad(const LinearEnv& e, const bf16* dy, std::int64_t rows, bool amax_ready) const;

  int slot_;
  const Slot* w_;
  LoraCuda lora_;
};

}  // namespace tb::model
