// ops/cpu/embedding.h: token and learned-position embeddings (CPU reference).
//   token:    y[t,:] = E[tok[t],:]                 E: [V, d], tok: [n] in [0, V), y: [n, d]
//             dE[tok[t],:] += dy[t,:]              (scatter-add: a repeated token adds up)
//   position: y[t,:] += P[t mod seq, :]            P: [max_seq, d], rows of y are [batch, seq] flattened
//             dP[t mod seq, :] += dy[t,:]
//   position, _at form: row t is at position positions[t] (positions.size() == rows; sequence and context
//             parallel hold rows that do not start at position 0 or are not contiguous)
//   vocab shard (vocab-parallel embedding): the table holds rows [first, first + rows) of E;
//             y[t,:] = E[tok[t],:] when tok[t] is in the shard, else 0 (the shards' outputs sum to the lookup);
//             dE[tok[t] - first,:] += dy[t,:] for the tokens in the shard. tok[t] may be any id >= 0.
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

template <class T>
void embedding_shard_forward(TensorView<T> y, In<T> table_shard, std::span<const std::int32_t> tokens,
                             std::int64_t first);
template <class T>
void embedding_shard_backward(TensorView<T> dtable_shard, In<T> dy, std::span<const std::int32_t> tokens,
                              std::int64_t first);

}  // namespace tb::ops::cpu
