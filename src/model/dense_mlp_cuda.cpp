// model/dense_mlp_cuda.cpp: the dense MLP of a CUDA decoder block, BF16 or FP8 (model/mlp_cuda.h has the formulas).
#include <span>

#include "model/decoder_cuda.h"
#include "model/mlp_cuda.h"
#include "model/moe_mlp_cuda.h"

namespace tb::model {
namespace {

void mark(const LinearEnv& e, std::string_view op) {
  if (e.mark) e.mark(op);
}

}  // namespace

DenseMlpCuda::DenseMlpCuda(const ModelConfig& cfg, const DenseLayout& layout, const DenseLayout::Layer& layer)
    : fc1_(layout, layer.fc1, layer.fc1_lora, cfg.lora),
      fc2_(layout, layer.fc2, layer.fc2_lora, cfg.lora),
      act_(activation_kind(cfg.act)) {}

std::unique_ptr<MlpCuda> make_mlp(const ModelConfig& cfg, const DenseLayout& layout, const DenseLayout::Layer& layer) {
  if (layer.moe()) return std::make_unique<MoeMlpCuda>(cfg, layout, layer);
  return std::make_unique<DenseMlpCuda>(cfg, layout, layer);
}

void DenseMlpCuda::plan(ArenaPlan& a, const PlanPass& pass, int sets, std::int64_t rows, int /*seq*/,
                        const RecomputePolicy& p) {
  sets_.resize(std::size_t(sets));
  const std::span<Saved> all(sets_);
  const auto n = std::size_t(rows);
  plan_field(a, pass, all, &Saved::h, n * std::size_t(fc1_out()), p.keeps_state());
  plan_field(a, pass, all, &Saved::g, n * std::size_t(ffn()), p.keeps_input(fc2_.reads_bf16_input(p.fp8)));
  const LinearCuda* lin[2] = {&fc1_, &fc2_};
  for (int k = 0; k < 2; ++k) {  // X^T of each trainable FP8 linear's input; LoRA's z
    if (lin[k]->keeps_fp8_input(p.fp8))
      plan_field_at(a, pass, all, [k](Saved& s) -> std::uint8_t*& { return s.lin[k].xt; },
                    n * std::size_t(lin[k]->in()), p.keeps_state());
    // fc2's z is always kept (rows x r per adapter): a recompute stops before fc2's forward, which writes it
    if (!lin[k]->lora().empty())
      plan_field_at(a, pass, all, [k](Saved& s) -> bf16*& { return s.lin[k].lora_z; },
                    lin[k]->lora().saved_bytes(rows), p.keeps_state() || lin[k] == &fc2_);
  }
}

void DenseMlpCuda::forward(const MlpCall& c, int set, const bf16* x, LinearInput x_input, bf16* y,
                           bool recompute_only) {
  const LinearEnv& e = c.e;
  const Saved& S = sets_[std::size_t(set)];
  const std::int64_t n = c.rows;
  cudaStream_t st = e.dc.stream();
  fc1_.forward(e, S.h, x, S.lin[0], n, x_input);
  // A recompute refreshes what fc2's backward reads of its input: FP8 X^T (a trainable weight), BF16 g (a trainable
  // weight in BF16, LoRA); nothing for a frozen one.
  if (recompute_only && !fc2_.keeps_fp8_input(e.fp8.enabled) && !fc2_.reads_bf16_input(e.fp8.enabled)) return;
  if (e.fp8.enabled && e.fp8.delayed && fc2_.fp8_fusable()) {  // the scale is known: the activation emits fc2's FP8
                                                               // input; g is not written (frozen: X^T to scratch)
    const ops::Fp8CastArgs cast = fp8_delayed_cast(S.lin[1].xs, DType::e4m3, n, ffn(), recompute_only ? nullptr : e.xq,
                                                   S.lin[1].xt ? S.lin[1].xt : e.dyqt, e.fp8.margin);
    ops::activation_forward_fp8(act_, {S.h, {n, fc1_out()}}, cast, st);
    mark(e, "activation fwd");
    if (recompute_only) return;
    fc2_.forward(e, y, nullptr, S.lin[1], n, LinearInput::cast);
    return;
  }
  float* g_amax = fp8_fused_amax(e, S.lin[1].xs);  // current scaling: fc2's input amax from the activation's output
  ops::activation_forward(act_, {S.g, {n, ffn()}}, {S.h, {n, fc1_out()}}, st, g_amax);
  mark(e, "activation fwd");
  if (recompute_only) {
    if (fc2_.keeps_fp8_input(e.fp8.enabled))
      fc2_.cast_input(e, S.g, n, S.lin[1].xs, g_amax != nullptr, nullptr, S.lin[1].xt);
    return;
  }
  fc2_.forward(e, y, S.g, S.lin[1], n, g_amax ? LinearInput::amax_ready : LinearInput::bf16);
}

void DenseMlpCuda::backward(const MlpCall& c, int set, const bf16* x, const bf16* dy, bool dy_amax_ready, bf16* dx,
                            const std::function<void()>& after_dgrad) {
  const LinearEnv& e = c.e;
  const Saved& S = sets_[std::size_t(set)];
  const std::int64_t n = c.rows;
  cudaStream_t st = e.dc.stream();
  if (c.policy.recomputes_input(fc2_.reads_bf16_input(e.fp8.enabled))) {  // g from the kept h (the block recomputed
                                                                          // x, the norm's output)
    ops::activation_forward(act_, {S.g, {n, ffn()}}, {S.h, {n, fc1_out()}}, st);
    mark(e, "recompute");
  }
  // In place: dg over g (fc2's weight gradient reads g first), dh over h (the activation backward reads each element
  // before writing it).
  fc2_.backward(e, S.g, dy, S.g, S.lin[1], n, {}, dy_amax_ready);
  const bf16* dh = S.h;  // fc1's output gradient; null: emitted in FP8 (e.dyq, e.dyqt) instead
  bool dh_amax_ready = false;
  if (e.fp8.enabled && e.fp8.delayed && fc1_.fp8_fusable()) {  // the scale is known: the backward writes fc1's FP8
                                                               // output gradient itself
    ops::Fp8CastArgs cast = fp8_delayed_cast(fc1_.fp8.dy, e.fp8.grad, n, fc1_out(), e.dyq, e.dyqt, e.fp8.margin);
    cast.stochastic = e.fp8.grad_stochastic;
    ops::activation_backward_fp8(act_, {S.g, {n, ffn()}}, {S.h, {n, fc1_out()}}, cast, st);
    dh = nullptr;
  } else {
    float* dh_amax = fp8_fused_amax(e, fc1_.fp8.dy);  // fc1's output gradient scale
    ops::activation_backward(act_, {S.h, {n, fc1_out()}}, {S.g, {n, ffn()}}, {S.h, {n, fc1_out()}}, st, dh_amax);
    dh_amax_ready = dh_amax != nullptr;
  }
  mark(e, "activation bwd");
  fc1_.backward(e, dx, dh, x, S.lin[0], n, after_dgrad, dh_amax_ready);
}

}  // namespace tb::model
