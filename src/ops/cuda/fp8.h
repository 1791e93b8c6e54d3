// ops/cuda/fp8.h: per-tensor FP8 scaling on the GPU (Transformer-Engine style) and the casts that feed FP8 GEMMs.
// A scaled tensor x (bf16) is stored as q = fp8(x * scale) (round to nearest even, saturating to the format's
// largest finite value; NaN stays NaN) and read back by the GEMM as q * scale_inv (cuBLASLt's A/B scale pointers):
//   scale = fp8_max / amax / 2^margin   when amax is finite and > 0;  1 otherwise (a zero tensor, or NaN/inf amax:
//                                        then q keeps the NaN/saturates and the loss shows it)
//   fp8_max: e4m3 448, e5m2 57344.  scale_inv = 1 / scale.
// The way back (FP8 outputs that bf16 ops read, e.g. FP8 attention's o and dq, dk, dv): x = bf16(float(q) * scale_inv).
// Recipes (train/): current scaling takes amax of this very tensor (fp8_amax, then the cast); delayed scaling takes
// the scale from a history of earlier amaxes (fp8_update_scales) and records this tensor's amax during the cast.
// Every scaling slot (Fp8Meta) lives in its own 256-byte block: cuBLASLt rejects scale pointers that are only 4-byte
// aligned. Nothing here syncs with the host: all of it can be captured in a CUDA graph.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "ops/cuda/context.h"

namespace tb::ops {

// One tensor's scaling state (device). history holds `history_len` amaxes, most recent first.
struct Fp8Meta {
  float* amax = nullptr;       // amax of the tensor as cast (current: input; delayed: recorded by the cast)
  float* scale = nullptr;      // the scale the cast uses
  float* scale_inv = nullptr;  // 1 / scale: the GEMM's dequantisation scale
  float* history = nullptr;    // delayed scaling only
};

// n slots of 256 bytes: [amax, pad..] [scale..] [scale_inv..] [history (history_len floats)], all zeroed except
// scale and scale_inv = 1. Owned device memory.
class Fp8Scales {
 public:
  static constexpr std::size_t kSlotFloats = 64;  // 256 bytes
  Fp8Scales(int device, int tensors, int history_len, cudaStream_t stream);
  Fp8Meta meta(int i) const;
  int tensors() const { return n_; }
  int history_len() const { return h_; }
  float* base() const { return buf_.as<float>(); }
  std::size_t slot_stride() const { return stride_; }  // floats between consecutive tensors' slots

 private:
  int n_, h_;
  std::size_t stride_;
  DeviceBuffer buf_;
};

float fp8_max(DType t);  // 448 (e4m3), 57344 (e5m2)

// *amax = max(*amax, max |x|) over n bf16 elements (the caller zeroes *amax first for a fresh amax). NaN propagates.
void fp8_amax(const __nv_bfloat16* x, std::size_t n, float* amax, cudaStream_t stream);

struct Fp8CastArgs {
  const __nv_bfloat16* x = nullptr;  // [rows, cols] row-major
  std::int64_t rows = 0, cols = 0;
  void* q = nullptr;                 // [rows, cols] fp8, or null
  void* qt = nullptr;                // [cols, rows] fp8 (the transpose), or null
  DType type = DType::e4m3;
  // Scale: from amax_in (current scaling: scale = fp8_max / *amax_in / 2^margin, written to *scale and *scale_inv by
  // the kernel) or, when amax_in is null, read from *scale (delayed scaling; *scale_inv is then written too).
  const float* amax_in = nullptr;
  float* scale = nullptr;
  float* scale_inv = nullptr;
  float* amax_out = nullptr;         // delayed: *amax_out = max(*amax_out, max |x|), recorded while casting
  int margin = 0;
  // Round stochastically instead of to nearest even: up with probability (|v| - lo) / spacing, unbiased in
  // expectation (ops/cuda/fp8_cast.cuh: draws hashed from the element index and the scale; the same inputs give the
  // same codes). The FP8 LM head rounds its logit gradients this way (LmHeadFp8::stochastic).
  bool stochastic = false;
};
// One pass over x: rows and cols multiples of 16 when qt is wanted (32 x 32 tiles through shared memory), any sizes
// for q alone. Throws Error{config} for bad shapes or null pointers before launching.
void fp8_cast(const Fp8CastArgs& a, cudaStream_t stream);

// y[r, c] = bf16(float(q[r, c]) * *scale_inv) (round to nearest even; the FP8 value is exact in fp32, NaN stays NaN)
// over a [rows, cols] block with row strides ld_q (1-byte elements) and ld_y (bf16 elements): a whole tensor, or one
// column range of a fused buffer (dq | dk | dv, each with its own scale). cols, ld_q, ld_y multiples of 8; q 8-byte
// and y 16-byte aligned; Error{config} before launching otherwise.
struct Fp8DequantArgs {
  const void* q = nullptr;
  std::int64_t ld_q = 0;
  __nv_bfloat16* y = nullptr;
  std::int64_t ld_y = 0;
  std::int64_t rows = 0, cols = 0;
  DType type = DType::e4m3;
  const float* scale_inv = nullptr;
};
void fp8_dequantize(const Fp8DequantArgs& a, cudaStream_t stream);

// Delayed scaling, for every tensor of `scales`: history = [amax, history[0..len-2]]; amax = 0;
//   amax_ref = max(history) (algo "max") or history[0] ("most_recent"); scale = fp8_max / amax_ref / 2^margin when
//   amax_ref > 0 and finite, else unchanged; scale_inv = 1 / scale. All tensors of one Fp8Scales share one format.
enum class AmaxAlgo { max, most_recent };
void fp8_update_scales(const Fp8Scales& scales, DType type, AmaxAlgo algo, int margin, cudaStream_t stream);

// The scale for an amax, as the kernels compute it (host and device).
#if defined(__CUDACC__)
__host__ __device__
#endif
inline float fp8_scale_for(float amax, float max_finite, int margin) {
  if (!(amax > 0.0f) || amax > 3.4028234e38f) return 1.0f;  // zero, NaN or inf
  float s = max_finite / amax;
  for (int i = 0; i < margin; ++i) s *= 0.5f;
  return s;
}

}  // namespace tb::ops
