// ops/cpu/attention.h: causal softmax attention with grouped-query heads (CPU reference).
//   q: [b, s, H, d], k: [b, s, KV, d], v: [b, s, KV, dv] (any strides: views into a fused QKV buffer), H % KV == 0;
//   query head h reads kv head h / (H / KV) (GQA; KV == H is MHA, KV == 1 is MQA). dv is d but for multi-head latent
//   attention (d = qk_nope + qk_rope, dv = v_head_dim).
//   S[i,j] = q_i . k_j / sqrt(d) for j <= i (causal; j > i masked out)
//   lse_i  = log sum_{j<=i} exp(S[i,j]),  P[i,j] = exp(S[i,j] - lse_i),  o_i = sum_j P[i,j] v_j
//   o: [b, s, H, dv], lse: [b, H, s] (saved for the backward).
// Backward (P recomputed from q, k and lse):
//   dv_j += sum_i P[i,j] do_i;  dP[i,j] = do_i . v_j;  D_i = do_i . o_i;  dS = P * (dP - D_i)
//   dq_i = sum_j dS[i,j] k_j / sqrt(d);  dk_j += sum_i dS[i,j] q_i / sqrt(d)
//   (dk, dv sum over the H / KV query heads of a group.) dq, dk, dv are written.
// The _at forms take queries at given absolute positions against a longer key sequence (context parallel: a
// rank's query chunks against every key): q: [b, sq, H, d] with query i at position q_pos[i] (sq of them, each
// in [0, sk)); k, v: [b, sk, KV, d] with key j at position j; key j is visible to query i iff j <= q_pos[i].
// o: [b, sq, H, dv], lse: [b, H, sq]; dk, dv: [b, sk, KV, d or dv] (written: zero for keys no query sees).
// The plain forms are the _at forms with sq == sk and q_pos[i] = i.
// The _packed forms run packed rows (core/packing.h): q, k, v [b, s, ...] of the same rows, each row split into
// segments; positions [b s] is each token's position in its segment (core's segment_positions), and query i of row r
// sees the keys of its segment up to itself: i - positions[r s + i] <= j <= i. Shapes as the plain forms.
#pragma once

#include <cstdint>
#include <span>

#include "ops/cpu/common.h"

namespace tb::ops::cpu {

template <class T>
void attention_forward(TensorView<T> o, TensorView<T> lse, In<T> q, In<T> k, In<T> v);

template <class T>
void attention_backward(TensorView<T> dq, TensorView<T> dk, TensorView<T> dv, In<T> dout, In<T> q, In<T> k,
                        In<T> v, In<T> o, In<T> lse);

template <class T>
void attention_forward_at(TensorView<T> o, TensorView<T> lse, In<T> q, In<T> k, In<T> v,
                          std::span<const std::int64_t> q_pos);

template <class T>
void attention_backward_at(TensorView<T> dq, TensorView<T> dk, TensorView<T> dv, In<T> dout, In<T> q, In<T> k,
                           In<T> v, In<T> o, In<T> lse, std::span<const std::int64_t> q_pos);

template <class T>
void attention_forward_packed(TensorView<T> o, TensorView<T> lse, In<T> q, In<T> k, In<T> v,
                              std::span<const std::int64_t> positions);

template <class T>
void attention_backward_packed(TensorView<T> dq, TensorView<T> dk, TensorView<T> dv, In<T> dout, In<T> q, In<T> k,
                               In<T> v, In<T> o, In<T> lse, std::span<const std::int64_t> positions);

}  // namespace tb::ops::cpu
