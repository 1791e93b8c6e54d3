// ops/cuda/embedding.h: token and learned-position embeddings on the GPU. Semantics are those of
// ops/cpu/embedding.h (the reference these kernels are tested against):
//   token:    y[t,:] = E[tok[t],:]               E: [V, d] bf16, tok: [n] int32 on the device, y: [n, d] bf16
//             dE[tok[t],:] += dy[t,:]            dE: [V, d] fp32 or bf16, accumulated (a repeated token adds up;
//                                                bf16: each row's sum in fp32, rounded when added)
//   position: y[t,:] += P[(first + t) mod seq, :]   P: [max_seq, d] bf16, y: [n, d] bf16 (in place)
//             dP[s,:] += sum of dy[t,:] over the rows t at position s, in row order   dP: [max_seq, d] fp32 or bf16
//             rows of y are [batch, seq] flattened from flat row `first` on (0: whole sequences; a run of
//             consecutive positions from p: first = p, model/position_pieces.h)
// d is a multiple of 8; 2-D views have contiguous rows (row strides that are multiples of 8 bf16 / 4 fp32).
// Tokens stay on the device, so they are not checked on the host: a token outside [0, V) gives a NaN row in y
// (visible in the loss) and is skipped by the backward.
// Determinism: every backward here is deterministic, bit for bit, without atomics:
//   embedding_backward sorts (token, position) pairs with a stable CUB radix sort (positions ascending within a
//   token), sums each token's rows in that order in chunks of 64 sorted positions, and a second kernel adds the
//   pieces of a token whose positions cross chunk boundaries in chunk order (a token repeated 65536 times is summed
//   by 1024 chunks in parallel, then one pass adds their 1023 partial rows: no 65536-long serial loop).
//   position_embedding_backward sums over the batch in order.
//
// Ideal DRAM bytes per call:
//   embedding_forward:            4 n d (read the n gathered rows, write y) + 4n (tokens)
//   embedding_backward:           2 n d (read dy) + 8 u d (read-modify-write the u distinct tokens' fp32 rows)
//                                 + ~40n (tokens, sort) + 8 d n/64 (chunk-crossing partials, worst case)
//   position_embedding_add:       4 n d (read and write y in place) + 2 seq d (P, read once per batch from L2)
//   position_embedding_backward:  2 n d (read dy) + 8 min(n, seq) d (read-modify-write dP)
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"
#include "ops/cuda/gemm.h"  // ops::Workspace

namespace tb::ops {

using bf16 = __nv_bfloat16;

void embedding_forward(TensorView<bf16> y, TensorView<const bf16> table, TensorView<const std::int32_t> tokens,
                       cudaStream_t stream);

// Workspace bytes embedding_backward needs for n tokens (sort buffers, CUB temporary storage, partial rows). An
// empty Workspace makes the call use stream-ordered memory (cudaMallocAsync / cudaFreeAsync on `stream`) instead.
std::size_t embedding_backward_workspace_bytes(std::int64_t n, std::int64_t vocab, std::int64_t dim);

template <class G>  // float or bf16
void embedding_backward(TensorView<G> dtable, TensorView<const bf16> dy, TensorView<const std::int32_t> tokens,
                        cudaStream_t stream, Workspace workspace = {});

void position_embedding_add(TensorView<bf16> y, TensorView<const bf16> pos_table, int seq, cudaStream_t stream,
                            std::int64_t first = 0);
template <class G>  // float or bf16
void position_embedding_backward(TensorView<G> dpos_table, TensorView<const bf16> dy, int seq, cudaStream_t stream,
                                 std::int64_t first = 0);

}  // namespace tb::ops
