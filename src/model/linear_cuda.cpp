// model/linear_cuda.cpp: a linear layer of the CUDA decoder, BF16 or FP8, with its tensor-parallel communication
// (model/linear_cuda.h has the formulas).
#include "model/linear_cuda.h"

#include <cuda_runtime_api.h>

#include "core/error.h"
#include "model/decoder_cuda.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/norm.h"

namespace tb::model {
namespace {

// A BF16 GEMM shape in one of the three layouts; the weight gradient (atb) is of type `grads` (fp32 or bf16),
// accumulated unless `overwrite`.
ops::GemmShape gemm_shape(std::int64_t m, std::int64_t n, std::int64_t k, ops::GemmLayout layout,
                          bool overwrite = false, DType grads = DType::f32) {
  ops::GemmShape s;
  s.m = m;
  s.n = n;
  s.k = k;
  s.a = s.b = s.d = DType::bf16;
  s.layout = layout;
  if (layout == ops::GemmLayout::atb) {
    s.d = grads;
    s.accumulate = !overwrite;
  }
  return s;
}

void mark(const LinearEnv& e, std::string_view op) {
  if (e.mark) e.mark(op);
}

}  // namespace

void fp8_scaled_cast(ops::DeviceContext& dc, int margin, ops::Fp8CastArgs a, const ops::Fp8Meta& m, bool delayed,
                     bool amax_ready) {
  cudaStream_t st = dc.stream();
  a.scale = m.scale, a.scale_inv = m.scale_inv, a.margin = margin;
  if (delayed) {
    a.amax_out = m.amax;
  } else {
    if (!amax_ready) {
      TB_CHECK(cudaMemsetAsync(m.amax, 0, sizeof(float), st));
      ops::fp8_amax(a.x, std::size_t(a.rows) * std::size_t(a.cols), m.amax, st);
    }
    a.amax_in = m.amax;
  }
  ops::fp8_cast(a, st);
}

float* fp8_fused_amax(const LinearEnv& e, const ops::Fp8Meta& m) {
  if (!e.fp8.enabled || e.fp8.delayed) return nullptr;
  TB_CHECK(cudaMemsetAsync(m.amax, 0, sizeof(float), e.dc.stream()));
  return m.amax;
}

LinearCuda::LinearCuda(const ParamRegistry& registry, int slot, const std::vector<Adapter>& adapters,
                       const LoraConfig& lora)
    : slot_(slot), w_(&registry.slots.at(std::size_t(slot))) {
  TB_REQUIRE(w_->shape.size() == 2 && w_->tags.role == ParamRole::linear,
             "CUDA decoder: " + w_->name + " is not a linear layer's weight");
  TB_REQUIRE(adapters.empty() || !trainable(), "CUDA decoder: LoRA's adapters on " + w_->name +
                                                  ", a trainable weight (LoRA freezes its base)");
  if (!adapters.empty()) lora_ = LoraCuda(registry, *w_, adapters, lora);
}

void LinearCuda::cast_input(const LinearEnv& e, const bf16* x, std::int64_t rows, const ops::Fp8Meta& m,
                            bool amax_ready, std::uint8_t* q, std::uint8_t* qt) const {
  ops::Fp8CastArgs a;
  a.x = x, a.rows = rows, a.cols = in(), a.q = q, a.qt = qt, a.type = DType::e4m3;
  fp8_scaled_cast(e.dc, e.fp8.margin, a, m, e.fp8.delayed, amax_ready);
}

// (frozen: dgrad reads dyq only; no transposed copy for a weight gradient)
void LinearCuda::cast_grad(const LinearEnv& e, const bf16* dy, std::int64_t rows, bool amax_ready) const {
  ops::Fp8CastArgs a;
  a.x = dy, a.rows = rows, a.cols = out(), a.q = e.dyq, a.qt = trainable() ? e.dyqt : nullptr, a.type = e.fp8.grad;
  a.stochastic = e.fp8.grad_stochastic;
  fp8_scaled_cast(e.dc, e.fp8.margin, a, fp8.dy, e.fp8.delayed, amax_ready);
}

void LinearCuda::cast_weight(const LinearEnv& e, bool delayed) const {
  ops::Fp8CastArgs a;
  a.x = e.params + w_->offset, a.rows = out(), a.cols = in(), a.q = fp8.w, a.qt = fp8.wt, a.type = DType::e4m3;
  fp8_scaled_cast(e.dc, e.fp8.margin, a, fp8.w_scale, delayed, false);
}

ops::Fp8CastArgs fp8_delayed_cast(const ops::Fp8Meta& m, DType type, std::int64_t rows, std::int64_t cols,
                                  std::uint8_t* q, std::uint8_t* qt, int margin) {
  ops::Fp8CastArgs a;
  a.rows = rows, a.cols = cols, a.q = q, a.qt = qt, a.type = type;
  a.scale = m.scale, a.scale_inv = m.scale_inv, a.amax_out = m.amax, a.margin = margin;
  return a;
}

ops::Fp8CastArgs LinearCuda::weight_cast(int margin) const {
  return fp8_delayed_cast(fp8.w_scale, DType::e4m3, out(), in(), fp8.w, fp8.wt, margin);
}

void LinearCuda::forward(const LinearEnv& e, bf16* y, const bf16* x, const LinearSaved& s, std::int64_t rows,
                         LinearInput input) const {
  const TensorParallelOps& tp = e.tp;
  if (tp_role() == TpRole::row && tp.size > 1) {  // this rank's rows of the sum over the tp ranks, into y
    const std::int64_t nl = rows / tp.size, o = out();
    if (!tp.exchange_async || !lora_.empty()) {  // (LoRA: its products join the partial sums first)
      forward_cast(e, x, s, rows, input);
      forward_with_lora(e, e.part, x, s, rows);
      tp.reduce_scatter(e.part, y, std::size_t(nl * o));
      mark(e, "tp reduce-scatter");
      return;
    }
    // tp 2: the other rank's rows first; they travel while this rank's own are computed, then the two partials add.
    const std::int64_t own = std::int64_t(tp.rank) * nl, other = std::int64_t(1 - tp.rank) * nl;
    forward_cast(e, x, s, rows, input);
    forward_gemm(e, e.part, x, s, other, nl);
    tp.exchange_async(e.part + other * o, e.dyl, std::size_t(nl * o));
    forward_gemm(e, e.part, x, s, own, nl);
    tp.wait_async();
    mark(e, "tp exchange (overlapped)");
    ops::residual_add({y, {nl, o}}, {e.part + own * o, {nl, o}}, {e.dyl, {nl, o}}, e.dc.stream());
    mark(e, "tp reduce-scatter sum");
    return;
  }
  if (input == LinearInput::gathering) {  // bf16: this rank's rows while the other ranks' arrive, then theirs
    const std::int64_t nl = rows / tp.size, r0 = std::int64_t(tp.rank) * nl;
    forward_gemm(e, y, x, s, r0, nl);
    tp.wait_async();
    mark(e, "tp all-gather (overlapped)");
    forward_gemm(e, y, x, s, 0, r0);
    forward_gemm(e, y, x, s, r0 + nl, rows - r0 - nl);
    if (!lora_.empty()) lora_.forward(e, y, x, s, rows);
    return;
  }
  forward_cast(e, x, s, rows, input);
  forward_with_lora(e, y, x, s, rows);
}

// (BF16 with LoRA over all of y: the adapters write y, the base GEMM accumulates: its epilogue's read of y instead of
// an accumulating GEMM's read and write)
void LinearCuda::forward_with_lora(const LinearEnv& e, bf16* y, const bf16* x, const LinearSaved& s,
                                   std::int64_t rows) const {
  if (lora_.empty()) return forward_gemm(e, y, x, s, 0, rows);
  if (!e.fp8.enabled && lora_.covers_output()) {
    lora_.forward(e, y, x, s, rows, true);
    return forward_gemm(e, y, x, s, 0, rows, true);
  }
  forward_gemm(e, y, x, s, 0, rows);
  lora_.forward(e, y, x, s, rows);
}

void LinearCuda::forward_cast(const LinearEnv& e, const bf16* x, const LinearSaved& s, std::int64_t rows,
                              LinearInput input) const {
  if (!e.fp8.enabled || input == LinearInput::cast) return;
  cast_input(e, x, rows, s.xs, input == LinearInput::amax_ready, e.xq, s.xt);
  mark(e, "fp8 casts");
}

void LinearCuda::forward_gemm(const LinearEnv& e, bf16* y, const bf16* x, const LinearSaved& s, std::int64_t r0,
                              std::int64_t m, bool accumulate) const {
  const std::int64_t o = out(), i = in();
  if (m == 0) return;
  if (!e.fp8.enabled) {
    ops::GemmShape g = gemm_shape(m, o, i, ops::GemmLayout::abt);
    g.accumulate = accumulate;
    e.dc.gemm(g, y + r0 * o, x + r0 * i, e.params + w_->offset);
  } else {
    TB_REQUIRE(!accumulate, "CUDA decoder: internal: an FP8 forward GEMM writes its output");
    ops::GemmShape g;
    g.m = m, g.n = o, g.k = i, g.a = g.b = DType::e4m3, g.d = DType::bf16, g.fast_accum = true;
    e.dc.gemm(g, y + r0 * o, e.xq + r0 * i, fp8.w, {s.xs.scale_inv, fp8.w_scale.scale_inv});
  }
  mark(e, "gemm fwd");
}

// The order: with after_dgrad, dx first (the base's, then LoRA's), after_dgrad(), the weight gradients; else the
// weight gradients first (dx may alias x, which they read), then dx. In BF16, where LoRA can write dx (dx not
// accumulated), LoRA's dx comes first and the base's dgrad accumulates onto it.
void LinearCuda::backward(const LinearEnv& e, bf16* dx, const bf16* dy, const bf16* x, const LinearSaved& s,
                          std::int64_t rows, const std::function<void()>& after_dgrad, bool amax_ready,
                          bool dx_accumulate) const {
  const std::int64_t o = out(), i = in();
  TB_REQUIRE(!dx_accumulate || !e.fp8.enabled,
             "CUDA decoder: an accumulating input gradient (" + w_->name + ") runs in BF16 only");
  void* dw = trainable() ? e.grad(*w_) : nullptr;
  const bool lora_dx_first = !lora_.empty() && !e.fp8.enabled && !dx_accumulate && lora_.writes_input_grad();
  const float* dy_inv = e.fp8.enabled ? fp8.dy.scale_inv : nullptr;  // (read by the lambdas below, after this block)
  std::function<void()> wgrad = [] {}, dgrad;  // (frozen: no weight-gradient GEMM)
  if (!e.fp8.enabled) {
    if (trainable())
      wgrad = [&] { e.dc.gemm(gemm_shape(o, i, rows, ops::GemmLayout::atb, e.overwrite, e.grad_type), dw, dy, x); };
    dgrad = [&] {
      ops::GemmShape g = gemm_shape(rows, i, o, ops::GemmLayout::ab);
      g.accumulate = dx_accumulate || lora_dx_first;
      e.dc.gemm(g, dx, dy, e.params + w_->offset);
    };
  } else {
    if (dy) {  // (null: its producer wrote the FP8 copies)
      cast_grad(e, dy, rows, amax_ready);
      mark(e, "fp8 casts");
    }
    if (trainable()) wgrad = [&] {
      ops::GemmShape gw;
      gw.m = o, gw.n = i, gw.k = rows, gw.a = e.fp8.grad, gw.b = DType::e4m3, gw.d = e.grad_type;
      gw.accumulate = !e.overwrite;
      e.dc.gemm(gw, dw, e.dyqt, s.xt, {dy_inv, s.xs.scale_inv});
    };
    dgrad = [&] {
      ops::GemmShape gd;
      gd.m = rows, gd.n = i, gd.k = o, gd.a = e.fp8.grad, gd.b = DType::e4m3, gd.d = DType::bf16;
      e.dc.gemm(gd, dx, e.dyq, fp8.wt, {dy_inv, fp8.w_scale.scale_inv});
    };
  }
  if (after_dgrad) {
    TB_REQUIRE(dx && dx != x, "CUDA decoder: a linear backward with after_dgrad needs dx apart from x");
    if (lora_dx_first) lora_.input_grad(e, dx, dy, s, rows, true);
    dgrad();
    mark(e, "gemm dgrad");
    if (!lora_.empty() && !lora_dx_first) lora_.input_grad(e, dx, dy, s, rows);
    after_dgrad();
    if (!lora_.empty()) lora_.weight_grads(e, dy, x, s, rows);
  } else if (!lora_.empty()) {  // (dx may alias x: LoRA's weight gradients read x before dgrad writes over it; the
                                // base is frozen: no weight gradient of its own)
    TB_REQUIRE(dx && dy, "CUDA decoder: a linear with LoRA needs its output gradient in BF16 and an input gradient");
    lora_.backward_over_input(
        e, dx, dy, x, s, rows,
        [&] {
          dgrad();
          mark(e, "gemm dgrad");
        },
        lora_dx_first);
  }
  if (trainable()) {
    wgrad();
    mark(e, "gemm wgrad");
  }
  if (dx && !after_dgrad && lora_.empty()) {
    dgrad();
    mark(e, "gemm dgrad");
  }
}

}  // namespace tb::model
