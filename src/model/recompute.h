// model/recompute.h: what the CUDA modules keep for their backward and what they compute again, as one policy the
// modules consult (model/decoder_cuda.h has the fields of each mode):
//   none:       every activation a backward reads is kept
//   selective:  the cheap elementwise outputs (the norms' y, the MLP activation's g) are not kept and are recomputed
//               in the backward (~1% more time)
//   full:       only each layer's input is kept; the backward runs the layer's forward again first
// FP8 keeps the linears' transposed FP8 inputs X^T instead of their BF16 inputs: then the norm and activation outputs
// are neither kept nor recomputed in any mode; a frozen weight needs neither (but LoRA's adapters read its BF16 input).
#pragma once

namespace tb::model {

enum class Recompute { none, selective, full };

struct RecomputePolicy {
  Recompute mode = Recompute::none;
  bool fp8 = false;
  // The layer's forward runs again in its backward, from its saved input.
  bool full() const { return mode == Recompute::full; }
  // What the backward reads beyond the layer input (statistics, attention's q, k, v, o and lse, the MLP's pre-activation,
  // FP8 inputs X^T) is kept.
  bool keeps_state() const { return mode != Recompute::full; }
  // The norm and activation outputs (the BF16 inputs of the linears' weight gradients) are kept.
  bool keeps_cheap_outputs() const { return mode == Recompute::none && !fp8; }
  // The backward computes them again (selective recompute in BF16).
  bool recomputes_cheap_outputs() const { return mode == Recompute::selective && !fp8; }
  // The same for the input of one linear, whose backward reads it in BF16 or not (model/linear_cuda.h
  // reads_bf16_input: a trainable weight in BF16, LoRA's adapters; not an FP8 or a frozen weight without LoRA).
  bool keeps_input(bool read_in_bf16) const { return mode == Recompute::none && read_in_bf16; }
  bool recomputes_input(bool read_in_bf16) const { return mode == Recompute::selective && read_in_bf16; }
};

}  // namespace tb::model
