// model/attention_cuda.h: the attention core of a CUDA decoder block, between its qkv and out linears (the block owns
// those): RoPE on the q and k heads of the fused qkv [n, (H + 2G) hd], then causal grouped-query attention
//   o[i] = sum_{j <= i} softmax_j(q_i . k_j / sqrt(hd)) v_j      o [n, H hd], lse f32 [b, H, s] for the backward
// and its backward (dqkv from dO; cuDNN's fused attention recomputes the [s, s] probabilities). One core serves every
// layer of a decoder (the layer index picks its scaling slots); the kind is chosen once:
//   make_bf16_attention     cuDNN's BF16 SDPA (model/attention_cuda.cpp), with the FP8 attention emulation diagnostic
//   make_fp8_attention      cuDNN's FP8 SDPA (model/attention_fp8_cuda.cpp: qkv8, o8 kept instead of qkv, o)
//   make_cp_attention       context parallel: this rank's two chunks against the gathered K|V of the whole sequence
//                           (model/attention_cp_cuda.cpp)
// What a layer keeps for the backward is an AttentionActs per activation set; plan_attention_fields() places them.
// Packed rows (core/packing.h): prepare() with a segment capacity plans cuDNN's ragged attention
// (ops/cuda/attention.h), and each forward and backward takes its micro-batch's PackedRows: RoPE at each token's
// position in its segment, attention within each segment. The BF16 core only (the FP8 and context-parallel cores
// refuse a capacity).
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "model/arena_plan.h"
#include "model/config.h"
#include "model/recompute.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/context.h"
#include "ops/cuda/fp8.h"

namespace tb::model {

struct Fp8Options;
struct ContextParallelOps;

struct AttentionActs {                          // per layer and activation set: pointers into the arena
  __nv_bfloat16 *qkv = nullptr, *o = nullptr;   // the fused qkv after RoPE; the attention output
  float* lse = nullptr;                         // the softmax's log-sum-exp per query and head
  std::uint8_t *qkv8 = nullptr, *o8 = nullptr;  // FP8 attention: qkv and o in E4M3
  ops::Fp8Meta qkv8_scale{};                    // FP8 attention: qkv8's current-scaling slot
};

// One packed micro-batch on the device: each token's position in its segment [n], and its segment tables.
struct PackedRows {
  const std::int32_t* positions = nullptr;
  ops::PackedSegments segments;
};

// The backward's gradients: dO [n, H hd] in, dqkv [n, (H + 2G) hd] out (FP8 attention: their E5M2 scratch beside).
struct AttentionGrads {
  const __nv_bfloat16* dout;
  __nv_bfloat16* dqkv;
  std::uint8_t *dout8, *dqkv8;
};

struct AttentionSetup {
  ops::DeviceContext& dc;
  ModelConfig cfg;  // this rank's shard (heads and kv_heads divided by tp)
  const Fp8Options& fp8;
  bool deterministic;                                  // cuDNN's deterministic backward
  int layers;                                          // of the decoder
  const std::function<void(std::string_view)>& on_op;  // the decoder's op marks (may be empty)
};

class AttentionCore {
 public:
  using bf16 = __nv_bfloat16;
  explicit AttentionCore(const AttentionSetup& s);
  virtual ~AttentionCore() = default;

  // Plans for batch x seq local rows and `sets` activation sets (may grow workspaces; allocates); segments > 0: packed
  // rows of at most that many segments per micro-batch.
  virtual void prepare(int batch, int seq, int sets, int segments) = 0;
  // RoPE on A.qkv in place, then A.o, A.lse (FP8: A.qkv8, A.o8 too) of layer `layer`; packed: the micro-batch's rows
  // (null when not packed).
  virtual void forward(int layer, const AttentionActs& A, int batch, int seq, const PackedRows* packed) = 0;
  // g.dqkv = the gradient of A.qkv before RoPE, from g.dout.
  virtual void backward(int layer, const AttentionActs& A, const AttentionGrads& g, int batch, int seq,
                        const PackedRows* packed) = 0;
  virtual std::size_t workspace_bytes() const = 0;
  // FP8 attention: the scaling tables whose delayed scales the decoder rolls each step, and qkv8's slot per set.
  virtual void delayed_tables(std::vector<std::pair<const ops::Fp8Scales*, DType>>& out) const {}
  virtual ops::Fp8Meta qkv8_scale(int layer, int set) const { return {}; }

 protected:
  void mark(std::string_view op) const {
    if (on_op_) on_op_(op);
  }
  ops::AttentionShape shape(int batch, int seq, int segments = 0) const;  // the fused-qkv causal shape
  TensorView<const float> inv_freq() const;                               // empty unless pos == rope
  // RoPE (or its backward) on the q and k heads of `rows` positions of each sequence of a fused [batch, seq] qkv,
  // starting at `at`, their positions from `offset` (or each token's, `positions`: packed rows).
  void rope(bf16* at, int batch, int seq, std::int64_t rows, std::int64_t offset, bool backward,
            const std::int32_t* positions = nullptr) const;
  // Refuses a segment capacity: `core` runs one sequence per row.
  static void require_unpacked(int segments, const char* core);

  ops::DeviceContext& dc_;
  ModelConfig cfg_;
  const Fp8Options& fp8_;
  bool deterministic_;
  int layers_;
  const std::function<void(std::string_view)>& on_op_;
  ops::DeviceBuffer inv_freq_;
  std::unique_ptr<ops::CudnnAttention> attention_;  // the BF16 SDPA (the BF16 and context-parallel cores)
};

std::unique_ptr<AttentionCore> make_bf16_attention(const AttentionSetup& s);
std::unique_ptr<AttentionCore> make_fp8_attention(const AttentionSetup& s);
std::unique_ptr<AttentionCore> make_cp_attention(const AttentionSetup& s, const ContextParallelOps& cp);

// Places a layer's AttentionActs (get(set struct) names them) in the pass: qkv, o (BF16 cores) or qkv8, o8 (FP8 core)
// and lse, kept unless full recompute; n rows of the fused width.
template <class S, class Get>
void plan_attention_fields(ArenaPlan& a, const PlanPass& pass, std::span<S> sets, Get get, const ModelConfig& c,
                           std::size_t n, const RecomputePolicy& p, bool fp8_core) {
  const std::size_t qd = std::size_t(c.q_dim()), width = qd + 2 * std::size_t(c.kv_dim());
  const bool state = p.keeps_state();
  const auto bf16_bytes = [&](std::size_t cols) { return n * cols * sizeof(__nv_bfloat16); };
  plan_field_at(a, pass, sets, [&](S& s) -> __nv_bfloat16*& { return get(s).qkv; }, bf16_bytes(width),
                state && !fp8_core);
  plan_field_at(a, pass, sets, [&](S& s) -> __nv_bfloat16*& { return get(s).o; }, bf16_bytes(qd), state && !fp8_core);
  plan_field_at(a, pass, sets, [&](S& s) -> float*& { return get(s).lse; }, n * std::size_t(c.heads) * 4, state);
  if (!fp8_core) return;
  plan_field_at(a, pass, sets, [&](S& s) -> std::uint8_t*& { return get(s).qkv8; }, n * width, state);
  plan_field_at(a, pass, sets, [&](S& s) -> std::uint8_t*& { return get(s).o8; }, n * qd, state);
}

}  // namespace tb::model
