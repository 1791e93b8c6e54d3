// train/cuda_spec.cpp: the CUDA trainer's reading of a TrainSpec (train/cuda_spec.h).
#include "train/cuda_spec.h"

#include <string>

#include "ops/cuda/cross_entropy.h"

namespace tb::train {

model::CudaDecoder::Recompute recompute_mode(const TrainSpec& spec) {
  using Recompute = model::CudaDecoder::Recompute;
  if (spec.recompute == "selective") return Recompute::selective;
  if (spec.recompute == "full") return Recompute::full;
  return Recompute::none;
}

model::Fp8Options fp8_options(const TrainSpec& spec) {
  model::Fp8Options o;
  o.enabled = spec.precision == "fp8";
  o.delayed = spec.fp8_recipe == "delayed";
  o.history = spec.fp8_history;
  o.most_recent = spec.fp8_amax == "most_recent";
  o.margin = spec.fp8_margin;
  o.lm_head = spec.fp8_lm_head;
  o.attention = spec.fp8_attention;
  const std::string& emulate = spec.fp8_attention_emulate;  // "", qkv, o or qkv,o (validate())
  o.attention_emulate = (emulate == "qkv" || emulate == "qkv,o" ? model::kEmulateQkv : 0u) |
                        (emulate == "o" || emulate == "qkv,o" ? model::kEmulateO : 0u);
  o.grad = spec.fp8_format == "e4m3" ? DType::e4m3 : DType::e5m2;
  o.grad_stochastic = spec.fp8_grad_rounding == "stochastic";
  o.head_grad = fp8_head_grad_format(spec) == "e4m3" ? DType::e4m3 : DType::e5m2;
  o.head_stochastic = fp8_head_rounding(spec) == "stochastic";
  o.head_gemms = 0;
  for (const std::string& g : fp8_head_gemms(spec))
    o.head_gemms |= g == "forward" ? ops::kHeadForward : g == "dgrad" ? ops::kHeadDgrad : ops::kHeadWgrad;
  return o;
}

DType grad_type(const TrainSpec& spec) { return spec.grads == "bf16" ? DType::bf16 : DType::f32; }

bool shares_grads(const TrainSpec& spec, int pp, int cp, int micro_batches) {
  return spec.grad_buffer == "shared" && pp == 1 && cp == 1 && micro_batches == 1;
}

model::LayerRange stage_layers(const model::ModelConfig& m, int pp, int vp, int r, int c) {
  return pp > 1 ? model::pipeline_stage_layers(m.layers, pp * vp, c * pp + r) : model::LayerRange{};
}

double attention_workspace_allowance(const model::ModelConfig& local, int micro_batch, int seq, bool fp8_attention) {
  return (fp8_attention ? 13.0 : 9.0) * micro_batch * seq * double(local.q_dim()) + 16.0 * 1024 * 1024;
}

}  // namespace tb::train
