// parallel/decoder_cpu_parallel_state.h: internal to parallel/decoder_cpu_parallel*.cpp (not a public API): what
// ShardedCpuDecoder keeps of one micro-batch from its forward to its backward, and one call's scratch buffers.
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/decoder_cpu_parallel.h"

namespace tb::parallel {

template <class T>
struct ShardedCpuDecoder<T>::LayerActs {  // saved for the backward; y1g, y2g: the gathered norm outputs (SP)
  std::vector<T> r1, mean1, rstd1, y1, y1g, qkv, kv, o, lse, r2, mean2, rstd2, y2, y2g, h, g;
  // a MoE layer: router logits, scores s and probabilities p [rows, E]; the permuted tokens and the experts' fc1
  // output, activation and output [kept pairs, *]; the shared experts' fc1 output and activation; dp: the gradient
  // of the load-balancing losses over p (before grad_scale), dz: the z-loss coefficient over the batch's tokens
  std::vector<T> logits, scores, probs, xp, eh, eg, eo, sh, sg, dp;
  ops::cpu::Routes<T> routes;
  ops::cpu::Dispatch dispatch;
  double dz = 0;
};

template <class T>
struct ShardedCpuDecoder<T>::State {
  int batch = 0, seq = 0;
  std::int64_t n = 0, rows = 0;               // tokens on this cp rank; residual-stream rows on this rank
  std::vector<std::int64_t> pos;              // positions of the cp rank's seq / cp tokens of a sequence
  std::vector<std::int32_t> tokens, targets;  // the n local tokens, (b, j) row-major
  std::vector<LayerActs> layers;
  std::vector<T> rf, meanf, rstdf, yf;  // the final norm on this rank's rows
  std::vector<T> dyf;                   // forward_backward: the head's input gradient, from the forward
  bool head_done = false;               // the head's backward ran in the forward (dyf holds its result)
  double grad_scale = 1;                // the backward's (the MoE losses' gradients scale with it)
};

// One call's temporaries (every use writes them whole before reading).
template <class T>
struct ShardedCpuDecoder<T>::Scratch {
  std::vector<T> x0, m, dnext, partial, gathered, dg, dh, dy, dr2, dout, dqkv, dkv, kv_mine, kv_all;
  std::vector<T> dop, deg, deh, dxp, ds, dlogits, dweight;  // a MoE layer's backward
};

}  // namespace tb::parallel
