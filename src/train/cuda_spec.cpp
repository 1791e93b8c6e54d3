// train/cuda_spec.cpp: the CUDA trainer's reading of a TrainSpec (train/cuda_spec.h).
#include "train/cuda_spec.h"

#include "ops/cuda/cross_entropy.h"

namespace tb::train {

model::Fp8Options fp8_options(const TrainSpec& spec) {
  const Fp8Spec& f = spec.precision.fp8;
  model::Fp8Options o;
  o.enabled = spec.fp8();
  o.delayed = f.recipe == Fp8Recipe::delayed;
  o.history = f.history;
  o.most_recent = f.amax == AmaxRule::most_recent;
  o.margin = f.margin;
  o.lm_head = f.lm_head;
  o.attention = f.attention;
  const AttentionEmulation& emulate = spec.debug.fp8_attention_emulate;
  o.attention_emulate = (emulate.qkv ? model::kEmulateQkv : 0u) | (emulate.o ? model::kEmulateO : 0u);
  o.grad = f.format == Fp8Format::e4m3 ? DType::e4m3 : DType::e5m2;
  o.grad_stochastic = spec.debug.fp8_grad_rounding == Rounding::stochastic;
  o.head_grad = fp8_head_grad_format(spec);
  o.head_stochastic = fp8_head_rounding(spec) == Rounding::stochastic;
  const HeadGemms& g = spec.debug.fp8_head_gemms;
  o.head_gemms =
      (g.forward ? ops::kHeadForward : 0u) | (g.dgrad ? ops::kHeadDgrad : 0u) | (g.wgrad ? ops::kHeadWgrad : 0u);
  return o;
}

bool shares_grads(const TrainSpec& spec, int pp, int cp, int micro_batches) {
  return spec.memory.grad_buffer == GradBuffer::shared && pp == 1 && cp == 1 && micro_batches == 1 &&
         !spec.lora.on();  // (LoRA's gradients are too small to hold the activations)
}

model::LayerRange stage_layers(const model::ModelConfig& m, int pp, int vp, int r, int c) {
  return pp > 1 ? model::pipeline_stage_layers(m.layers, pp * vp, c * pp + r) : model::LayerRange{};
}

double attention_workspace_allowance(const model::ModelConfig& local, int micro_batch, int seq, bool fp8_attention) {
  return (fp8_attention ? 13.0 : 9.0) * micro_batch * seq * double(local.q_dim()) + 16.0 * 1024 * 1024;
}

}  // namespace tb::train
