// ops/cpu/embedding.h: token and learned-position embeddings (CPU reference).
//   token:    y[t,:] = E[tok[t],:]                 E: [V, d], tok: [n] in [0, V), y: [n, d]
//             dE[tok[t],:] += dy[t,:]              (scatter-add: a repeated token adds up)
//   position: y[t,:] += P[t mod seq, :]            P: [max_seq, d], rows of y are [batch, seq] flattened
//             dP[t mod seq, :] += dy[t,:]
//   position, _at form: row t is at position positions[t] (positions.size() == rows; sequence and context
//             parallel hold rows that do not start at position 0 or are not contiguous)
#pragma once

#include <cstdint>
#include <span>

#include "ops/cpu/common.h"

namespace tb::ops::cpu {

template <class T>
void embedding_forward(TensorView<T> y, In<T> table, std::span<const std::int32_t> tokens);
template <class T>
void embedding_backward(TensorView<T> dtable, In<T> dy, std::span<const std::int32_t> tokens);

template <class T>
void position_embedding_add(TensorView<T> y, In<T> pos_table, int seq);
template <class T>
void position_embedding_backward(TensorView<T> dpos_table, In<T> dy, int seq);

template <class T>
void position_embedding_add_at(TensorView<T> y, In<T> pos_table, std::span<const std::int64_t> positions);
template <class T>
void position_embedding_backward_at(TensorView<T> dpos_table, In<T> dy, std::span<const std::int64_t> positions);

}  // namespace tb::ops::cpu
