// parallel/decoder_cpu_parallel_state.h: internal to parallel/decoder_cpu_parallel*.cpp (not a public API): what
// ShardedCpuDecoder keeps of one micro-batch from its forward to its backward, and one call's scratch buffers.
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/decoder_cpu_parallel.h"

namespace tb::parallel {

// Expert parallel: how one MoE layer's permuted rows travel (parallel/decoder_cpu_parallel_moe.cpp). Sent: this
// rank's kept pairs in expert order, send_rows[r] of them to ep rank r (its experts' rows). Received: source-major
// (ep rank s's rows for local expert 0, 1, ...; then s + 1), recv_rows[s] from rank s, counts[s * El + j] for local
// expert j; the experts run on them expert-major (expert j's rows from source 0, 1, ...: rows [offsets[j],
// offsets[j + 1])), expert-major row i being source-major row order[i].
struct EpPlan {
  std::vector<std::size_t> send_rows, recv_rows;  // [ep]
  std::vector<int> counts;                        // [ep, El]
  std::vector<std::int64_t> offsets;              // [El + 1]
  std::vector<std::int64_t> order;                // [received rows]
};

template <class T>
struct ShardedCpuDecoder<T>::LayerActs {  // saved for the backward; y1g, y2g: the gathered norm outputs (SP)
  std::vector<T> r1, mean1, rstd1, y1, y1g, qkv, kv, o, lse, r2, mean2, rstd2, y2, y2g, h, g;
  // LoRA: per adapter of the layer (qkv's, out's, fc1's, fc2's in order) its dropped input (dropout only) and
  // z = xd A^T
  struct Lora {
    std::vector<T> xd, z;
  };
  std::vector<Lora> lora;
  // a MoE layer: router logits, scores s and probabilities p [rows, E]; the permuted tokens and the experts' fc1
  // output, activation and output [kept pairs, *]; the shared experts' fc1 output and activation; dp: the gradient
  // of the load-balancing losses over p (before grad_scale), dz: the z-loss coefficient over the batch's tokens.
  // Expert parallel: xe the rows this rank's experts received (expert-major), eh and eg theirs; eo the outputs of
  // this rank's pairs, back from their experts.
  std::vector<T> logits, scores, probs, xp, xe, eh, eg, eo, sh, sg, dp;
  // a MLA layer (decoder_cpu_parallel_mla.cpp): lat [y1 W_dq^T | y1 W_dkv^T] and latn [c_q | c_kv | RoPE(k_rope)] on
  // this rank's rows, latg latn gathered (SP), the norms' rstdq, rstdkv; mq the queries after RoPE, mkv the kv_up
  // output, mkvh this rank's keys and values [K | V] (kv: those of the whole sequence; o, lse as the dense layer's)
  std::vector<T> lat, latn, latg, rstdq, rstdkv, mq, mkv, mkvh;
  ops::cpu::Routes<T> routes;
  ops::cpu::Dispatch dispatch;
  EpPlan ep;
  double dz = 0;
};

template <class T>
struct ShardedCpuDecoder<T>::State {
  int batch = 0, seq = 0;
  std::int64_t n = 0, rows = 0;               // tokens on this cp rank; residual-stream rows on this rank
  std::vector<std::int64_t> pos;              // positions of the cp rank's seq / cp tokens of a sequence
  std::vector<std::int32_t> tokens, targets;  // the n local tokens, (b, j) row-major
  std::vector<std::int64_t> seg_pos;          // packed rows: each local token's position in its segment (else empty)
  std::vector<double> weights;                // the local tokens' loss weights (empty: the mean)
  std::vector<std::int64_t> token_index;      // LoRA's dropout: each local token's index in the step's global batch
  std::int64_t step = 1;                      // (sequence · seq + position) and the step (MicroBatch)
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
  std::vector<T> a2a, a2a_back, ee;                         // expert parallel: rows sent, received, expert-major
  std::vector<T> lora_dxd;                                  // a LoRA adapter's input gradient before its dropout
  ops::cpu::Routes<T> held;                                  // a proxy's routes on its held experts
  std::vector<T> dkvh, dkvup, dlat, dlatl, dlatraw, dyq;     // a MLA layer's backward
};

}  // namespace tb::parallel
