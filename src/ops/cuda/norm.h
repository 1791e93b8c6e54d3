// ops/cuda/norm.h: RMSNorm, LayerNorm and LayerNorm1p over the last dimension on the GPU, alone and fused with
// the residual add of a pre-norm decoder. Semantics, formulas and argument order are those of ops/cpu/norm.h
// (the reference these kernels are tested against); storage here is bf16 for activations and weights, fp32 for
// the statistics and the parameter gradients:
//   rmsnorm:     rstd = 1/sqrt(mean(r^2) + eps)                       y = r * rstd * w
//   layernorm:   rstd = 1/sqrt(var(r) + eps), xh = (r - mean) * rstd  y = xh * w + b
//   layernorm1p: weight stored as w - 1 (Nemotron)                    y = xh * (1 + w) + b
//   fused:       r = x + residual_in (rounded to bf16, stored: the next residual), y = norm(r); the statistics
//                are those of the stored bf16 r, so the backward sees exactly what the forward normalised.
//   backward:    g = dy * w_eff;  dr = rstd * (g - mean(g) - xh * mean(g * xh)) + dr_next   (rmsnorm: no mean(g),
//                mean = 0);  dw += sum_rows dy * xh;  db += sum_rows dy
// Shapes: x, residual_in, y, r, dy, dr, dr_next: [rows, dim] bf16 (contiguous rows; a row stride that is a multiple
// of 8 is allowed); w, b: [dim] bf16; mean, rstd: [rows] fp32; dw, db: [dim] fp32 (accumulated, +=). dim is a
// multiple of 8 and at most 32768. Optional tensors are empty views: b (no bias; must be empty for rmsnorm),
// residual_in (r = x), mean for rmsnorm (then not written), dw / db (not wanted), dx of norm_backward.
// All math in fp32 (row statistics with a two-pass mean / variance over the row held in registers).
// Determinism: no atomic sums (the optional amax is an atomic max: order-free). The backward accumulates dw/db
// per block of rows in registers, writes fp32 partials [blocks, dim] to a workspace and a second kernel sums them
// in a fixed order, so results are bitwise reproducible on a given GPU (the block count depends on its SM count).
//
// In place: r may alias residual_in (or x), y may alias x; dr may alias dr_next or dy (each element is read and
// written by the same thread, reads first).
//
// amax (optional, device float, last parameter): *amax = max(*amax, max |v|) over the bf16 values written, y in the
// forward, dx / dr in the backward (which must then write it), as rounded; NaN propagates; the caller zeroes it for a
// fresh amax; one atomic per block. An FP8 cast of the output (ops/cuda/fp8.h, current scaling) needs no amax pass.
//
// FP8 forward (delayed scaling: the scale is known before the pass): norm_forward_fp8 / add_norm_forward_fp8 write
// r, mean, rstd as the bf16 ops do, but instead of y its FP8 copies q = fp8(y scale) [rows, dim] (if cast.q) and
// qt [dim, rows] for the next FP8 GEMM (ops/cuda/norm_fp8.cu: the cast tiles recompute y from r and the statistics).
// Bit for bit the bf16 op followed by fp8_cast with the same scale; cast.amax_out records max |y|.
//
// Ideal DRAM bytes per call (e = rows*dim; bench/ divides by the time for GB/s; has_mean: layernorms only;
// b read only when present; g = number of wanted parameter gradients, dw and/or db):
//   norm_forward:       4e (read x, write y) + 2*dim*(1 + has_b) + 4*rows*(1 + has_mean)
//   add_norm_forward:   8e (read x, residual_in; write y, r) + the same terms (6e without residual_in)
//   norm_backward:      6e (read dy, x; write dx; 4e without dx) + 2*dim (w) + 4*rows*(1 + has_mean)
//                       + g * 8*dim (read-modify-write dw/db) + g * 8*blocks*dim (fp32 partials written, read back;
//                       blocks = resident blocks of the persistent grid, e.g. 264 on an H200 at dim 4096: +3% at
//                       8192 x 4096)
//   add_norm_backward:  8e (read dy, r, dr_next; write dr; 6e without dr_next) + the same terms as norm_backward
//   norm_forward_fp8:      4e (read x for the statistics, again in the cast tiles) + e (qt) + e (q, if wanted)
//                          + 4*dim*(1 + has_b) (w, b in both passes) + 8*rows*(1 + has_mean) (statistics written,
//                          read back); the bf16 op then fp8_cast move 8e (with q; 7e without)
//   add_norm_forward_fp8:  8e (read x, residual_in; write r; read r in the cast tiles; 6e without residual_in)
//                          + e (qt) + e (q, if wanted) + the same terms; the bf16 op then fp8_cast move 12e (10e
//                          without residual_in; e less each without q)
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/tensor.h"
#include "ops/cpu/norm.h"   // NormKind
#include "ops/cuda/fp8.h"   // Fp8CastArgs
#include "ops/cuda/gemm.h"  // ops::Workspace

namespace tb::ops {

using bf16 = __nv_bfloat16;
using ops::cpu::NormKind;

// y = norm(x); mean (layernorms) and rstd written.
void norm_forward(NormKind kind, TensorView<bf16> y, TensorView<float> mean, TensorView<float> rstd,
                  TensorView<const bf16> x, TensorView<const bf16> w, TensorView<const bf16> b, float eps,
                  cudaStream_t stream, float* amax = nullptr);

// r = x + residual_in, y = norm(r); y, r, mean (layernorms) and rstd written.
void add_norm_forward(NormKind kind, TensorView<bf16> y, TensorView<bf16> r, TensorView<float> mean,
                      TensorView<float> rstd, TensorView<const bf16> x, TensorView<const bf16> residual_in,
                      TensorView<const bf16> w, TensorView<const bf16> b, float eps, cudaStream_t stream,
                      float* amax = nullptr);

// The two above with y written as FP8 (see the top): cast describes y, [rows, dim], with cast.x null, qt required,
// q optional, the scale read from *cast.scale (*cast.scale_inv written); cast.amax_in is refused (current scaling
// needs the amax before the cast: use the bf16 op with amax, then fp8_cast). Error{config} before any launch.
void norm_forward_fp8(NormKind kind, const Fp8CastArgs& cast, TensorView<float> mean, TensorView<float> rstd,
                      TensorView<const bf16> x, TensorView<const bf16> w, TensorView<const bf16> b, float eps,
                      cudaStream_t stream);
void add_norm_forward_fp8(NormKind kind, const Fp8CastArgs& cast, TensorView<bf16> r, TensorView<float> mean,
                          TensorView<float> rstd, TensorView<const bf16> x, TensorView<const bf16> residual_in,
                          TensorView<const bf16> w, TensorView<const bf16> b, float eps, cudaStream_t stream);

// Workspace bytes the backward needs for dw/db partials on the current device (0 when neither is wanted is the
// caller's business: this returns the size for both). An empty Workspace makes the call use stream-ordered
// memory (cudaMallocAsync / cudaFreeAsync on `stream`) instead.
std::size_t norm_backward_workspace_bytes(std::int64_t rows, std::int64_t dim);

// dx written (may be empty: only dw/db); dw, db accumulated (empty: not wanted; db must be empty for rmsnorm), G
// float or bf16 (gradients in bf16: the sum in fp32, rounded once when added). x, mean, rstd are the forward's input
// and statistics.
template <class G>
void norm_backward(NormKind kind, TensorView<bf16> dx, TensorView<G> dw, std::type_identity_t<TensorView<G>> db,
                   TensorView<const bf16> dy, TensorView<const bf16> x, TensorView<const bf16> w,
                   TensorView<const float> mean, TensorView<const float> rstd, cudaStream_t stream,
                   Workspace workspace = {}, float* amax = nullptr);

// dr = d(norm)/dr * dy + dr_next (dr_next empty: no residual gradient); dr is the gradient of both x and
// residual_in. r, mean, rstd are the forward's outputs.
template <class G>
void add_norm_backward(NormKind kind, TensorView<bf16> dr, TensorView<G> dw, std::type_identity_t<TensorView<G>> db,
                       TensorView<const bf16> dy, TensorView<const bf16> dr_next, TensorView<const bf16> r,
                       TensorView<const bf16> w, TensorView<const float> mean, TensorView<const float> rstd,
                       cudaStream_t stream, Workspace workspace = {}, float* amax = nullptr);

// r = x + residual_in, rounded to bf16 exactly as add_norm_forward rounds its r (fp32 sum, nearest even): the
// residual stream's sum without the norm (a pipeline stage's output h). [rows, dim] contiguous; r may alias either.
// Ideal DRAM bytes: 6e.
void residual_add(TensorView<bf16> r, TensorView<const bf16> x, TensorView<const bf16> residual_in,
                  cudaStream_t stream);

}  // namespace tb::ops
