// train/cuda_spec.h: how the CUDA trainer reads a TrainSpec (train/trainer.h): the decoder's FP8 options, whether the
// gradients share the activations' memory, each pipeline chunk's layers, cuDNN's attention workspace allowance. One
// reading shared by the trainer's parts (topology, replica, optimizer, step) and the memory estimate.
#pragma once

#include "core/dtype.h"
#include "model/config.h"
#include "model/decoder_cuda.h"
#include "model/param_layout.h"
#include "train/trainer.h"

namespace tb::train {

model::Fp8Options fp8_options(const TrainSpec& spec);
// MemorySpec::grad_buffer: shared where the step allows it: one micro-batch per step and rank (the gradients are
// written, not accumulated), one model chunk with one activation set (no pipeline), each rank the whole sequence (no
// context parallel), every parameter trained (not LoRA). Data and tensor parallel read the gradients (reduce-scatters,
// all-reduces) before the next forward, as the optimizer does.
bool shares_grads(const TrainSpec& spec, int pp, int cp, int micro_batches);
// The layers of pipeline rank r's model chunk c: global stage c·pp + r of pp·vp (the whole model at pp 1).
model::LayerRange stage_layers(const model::ModelConfig& m, int pp, int vp, int r, int c);
// cuDNN's attention backward workspace, per model chunk: bytes per element of the [tokens, heads x head_dim] output,
// from the plans on an H200 (cuDNN 9.19): BF16 8.0 (257 MiB at 8B, s 8192), FP8 12.2 (389 MiB at 8B, 778 at 70B),
// rounded up.
double attention_workspace_allowance(const model::ModelConfig& local, int micro_batch, int seq, bool fp8_attention);

}  // namespace tb::train
