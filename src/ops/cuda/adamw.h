// ops/cuda/adamw.h: fused multi-tensor AdamW on fp32 master weights, global gradient norm and norm clipping, on
// one GPU. The CPU reference (the spec) is ops/cpu/adamw.h: torch.optim.AdamW (amsgrad and maximize off) and
// torch.nn.utils.clip_grad_norm_. Per element of every tensor, step t >= 1, in fp32:
//   g  = grad * clip_scale                                  (clip_scale = 1 without clipping)
//   m  = b1 m + (1 - b1) g              v = b2 v + (1 - b2) g^2
//   p  = p (1 - lr wd) - (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)
//      = p - lr (mhat / (sqrt(vhat) + eps) + wd p)          (the CPU reference's form; bias corrections in double)
//   model = bf16(p)                                         (the bf16 copy the forward pass reads, same pass)
// wd = weight_decay for tensors with decay = true, 0 for the others (norm gains, biases).
// Gradient norm and clipping (clip_grad_norm_ with the CPU reference's convention):
//   norm_sq = sum over every element of every tensor of grad^2   (each thread and block sums in double; one
//             partial per chunk, then one block sums the partials in chunk order: deterministic, bit-for-bit
//             the same on every run)
//   norm = sqrt(norm_sq);  clip_scale = norm > max_norm ? max_norm / (norm + 1e-6) : 1   (1 when norm is not finite:
//             gradients are left as they are; the caller decides whether to skip the step)
// No host round trip: the norm and clip scale stay on the device and the AdamW kernel reads them, so a whole
// optimizer step can be captured in a CUDA graph. lr and t are also read from the device at run time
// (AdamWStepScalars), so a replayed graph follows the LR schedule when the caller updates them before each replay
// (one 16-byte cudaMemcpyAsync from pinned memory, or a schedule kernel inside the graph).
//
// Multi-tensor: the tensors are cut into chunks of kAdamWChunk elements; a table of {tensor, begin, end} chunks and
// the tensors' pointers is built once (AdamWGroup, uploaded at construction) and every launch is one kernel over
// all chunks, one block per chunk. 16-byte vector accesses where all of a tensor's pointers share their alignment
// phase (the usual case: every buffer laid out like the parameters), scalar accesses otherwise.
// Moments are fp32 (default) or bf16 (DType::bf16: half the state memory; m and v are computed in fp32 and rounded
// to nearest on store).
// Gradients are fp32 (default) or bf16 (AdamWGroup's grads: read as bf16 and widened; 2 bytes per element fewer for
// the norm and the update).
//
// No master (AdamWTensor::model alone, neither master nor master_lo): the bf16 model weights are the state, widened,
// updated as above and rounded to nearest even (PyTorch's AdamW on bf16 parameters); bf16 moments and gradients:
// 8 bytes read + 6 written per element.
// Split master (AdamWTensor::master_lo, ops/cuda/master_split.h): the same fp32 master stored as the bf16 model weight
// plus a 16-bit residual; every update is bit-identical to the fp32-master one (the join is exact), and the model
// weight is the master rounded to nearest (ties away from zero instead of to even).
// Ideal DRAM bytes per element: AdamW with fp32 moments 16 read (p, g, m, v) + 14 written (p, m, v, bf16 model) = 30
// (split master: 16 read + 12 written = 28; bf16 moments: 8 fewer; bf16 gradients: 2 fewer); grad norm 4 read (bf16
// gradients: 2). ~4 FLOPs per element for the norm, ~15 for the update: memory-bound.
//
// FP8 weight copies (AdamWTensor::fp8_copy, delayed scaling): a tensor that feeds FP8 GEMMs gets its copies
//   q = fp8(model * scale), qt = q^T, *scale_inv = 1 / scale, *amax_out = max(*amax_out, max |model|)
// written in the same pass as its update (one launch per such tensor: a kernel of its own for shapes of 32 x 128
// tiles, else the FP8 cast kernels of ops/cuda/fp8_cast.cuh with a source that updates the elements it reads), bit for
// bit adamw_step followed by fp8_cast of the model weight, without reading the model weight back: 2 bytes per element
// fewer (the cast's read), its q and qt writes unchanged.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "ops/cuda/context.h"
#include "ops/cuda/fp8.h"

namespace tb::ops {

inline constexpr std::int64_t kAdamWChunk = 32768;  // elements per block

// One parameter tensor (device pointers, `numel` elements each). m and v are of the group's moment type.
struct AdamWTensor {
  float* master = nullptr;         // fp32 master weights, updated in place (null with master_lo, and without a master)
  std::int16_t* master_lo = nullptr;  // split master (ops/cuda/master_split.h): the fp32 master is (model, master_lo),
                                      // exactly; model then holds its round-to-nearest bf16 half
  const void* grad = nullptr;      // gradients of the group's type, fp32 or bf16 (read only: clipping is applied on
                                   // the fly)
  void* exp_avg = nullptr;         // m, zero before step 1
  void* exp_avg_sq = nullptr;      // v, zero before step 1
  __nv_bfloat16* model = nullptr;  // bf16 model weights written from the updated master; null: none
  std::int64_t numel = 0;
  bool decay = true;               // false: no weight decay (norm gains, biases)
  // FP8 copies of the updated model weight, made in the same pass (see the top; used when fp8_copy.qt is set): the
  // tensor as [rows, cols] row-major (rows * cols == numel), x null, q (or null), qt, type, scale (read: delayed
  // scaling, no amax_in), scale_inv, amax_out (or null) and margin as fp8_cast takes them; needs `model`.
  Fp8CastArgs fp8_copy;
};

// Hyperparameters fixed for a run, passed by value to each launch (torch.optim.AdamW's defaults).
struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

// Per-step scalars in device memory, read by the AdamW kernel when it runs (graph-capturable).
struct AdamWStepScalars {
  float lr = 0;
  std::int32_t reserved = 0;
  std::int64_t step = 0;  // 1-based t of the bias correction, including this step
};

// The gradient norm in device memory, written by grad_norm().
struct GradNormResult {
  double norm_sq = 0;      // sum of grad^2 over the group
  float norm = 0;          // sqrt(norm_sq), before clipping
  float clip_scale = 1;    // what adamw_step multiplies the gradients by
};

// The chunk table of a set of tensors, on the device. Build it once (not while capturing a graph: it uploads
// with cudaMemcpy); the pointers it holds must stay valid while it is used.
class AdamWGroup {
 public:
  // Throws tb::Error{config}: empty list, numel < 1, null master / grad / m / v, misaligned pointers (fp32 must be
  // 4-byte, bf16 2-byte aligned), moments or gradients not f32 or bf16, an FP8 copy not as described at fp8_copy.
  AdamWGroup(int device, std::span<const AdamWTensor> tensors, DType moments = DType::f32,
             DType grads = DType::f32);

  int device() const { return device_; }
  DType moments() const { return moments_; }
  DType grads() const { return grads_; }
  int tensors() const { return tensors_; }
  std::int64_t chunks() const { return chunks_; }
  std::int64_t numel() const { return numel_; }
  const void* tensor_table() const { return table_.get(); }  // device: kernel-side tensor records
  const void* chunk_table() const { return chunk_table_.get(); }
  double* partials() const { return partials_.as<double>(); }  // device: one norm partial per chunk
  // The update's chunks: those of the tensors without FP8 copies (chunk_table() when there are none).
  const void* update_chunk_table() const { return update_chunks_ ? update_table_.get() : chunk_table_.get(); }
  std::int64_t update_chunks() const { return update_chunks_ ? *update_chunks_ : chunks_; }
  const std::vector<AdamWTensor>& fp8_copies() const { return fp8_copies_; }  // the tensors with FP8 copies
  void* step_consts() const { return consts_.get(); }  // device scratch: the step's constants (FP8 copies only)

 private:
  int device_;
  DType moments_, grads_;
  int tensors_ = 0;
  std::int64_t chunks_ = 0, numel_ = 0;
  std::optional<std::int64_t> update_chunks_;  // set when some tensors have FP8 copies
  std::vector<AdamWTensor> fp8_copies_;
  DeviceBuffer table_, chunk_table_, update_table_, partials_, consts_;
};

// Split master conversions, n elements (device pointers): src fp32 -> (hi, lo), and back.
void master_split(const float* src, __nv_bfloat16* hi, std::int16_t* lo, std::size_t n, cudaStream_t stream);
void master_join(float* dst, const __nv_bfloat16* hi, const std::int16_t* lo, std::size_t n, cudaStream_t stream);

// out->norm_sq, norm, clip_scale (device) from the group's gradients; max_norm > 0 (+inf: measure, never clip).
// Two launches on stream (partials, then one block), no host synchronisation.
void grad_norm(const AdamWGroup& group, float max_norm, GradNormResult* out, cudaStream_t stream);
// Recomputes r->norm and r->clip_scale from r->norm_sq (one thread): for norm_sq summed across ranks by the caller
// (data-parallel shards) after grad_norm() on each rank's own group.
void clip_from_norm_sq(GradNormResult* r, float max_norm, cudaStream_t stream);

// One AdamW step over every tensor of the group: one launch on stream (and, with FP8 copies, one more per such
// tensor after a one-thread launch of the step's constants). scalars: device lr and step (step >= 1;
// a step < 1 leaves everything unchanged, as the device cannot throw). clip: the grad_norm() result whose
// clip_scale multiplies the gradients, or null for no clipping.
void adamw_step(const AdamWGroup& group, const AdamWConfig& cfg, const AdamWStepScalars* scalars,
                const GradNormResult* clip, cudaStream_t stream);

}  // namespace tb::ops
