// model/lora.h: LoRA adapters (Hu et al. 2021; computed as HF PEFT computes them) on the dense decoder's linear layers,
// chosen in the model config before anything is allocated. A linear y = x W^T (x [rows, in], W [out, in]) with an
// adapter on its output rows [row0, row0 + rows_b) of W computes
//   y[:, row0 : row0 + rows_b] += (alpha / r) · dropout(x) A^T B^T            A [r, in], B [rows_b, r]
//   dropout(x)[t, j] = x[t, j] · keep · s,  keep = dropout_bits(dropout_row_key(stream, token), j) >=
//                      dropout_threshold(p), stream = step_stream(slot_seed(seed, A's name), step), s ≈ 1 / (1 - p)
//                      (core/counter_rng.h: 16 bits an element, a 32-bit hash per pair of columns; token: the row's
//                      index in the step's global batch, sequence · seq + position; j: the full input column) — the
//                      same mask on every backend and parallel layout, drawn again in the backward instead of stored
// Init (PEFT's default): A ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform with a = sqrt(5) of an [r, in] weight), B = 0.
// With LoRA the base (every parameter that is not an adapter) is frozen: no gradient, master weights or moments.
// Targets, by name (a linear has one adapter per named block; its blocks' adapters are separate, each with its A, B
// and dropout mask, as PEFT's separate q, k, v modules are on trainbench's fused qkv):
//   q, k, v     the Q, K and V row blocks of attn.qkv        qkv    the whole fused attn.qkv
//   o           attn.out
//   gate, up    the gate and up row blocks of mlp.fc1 (swiglu; otherwise fc1 is up alone)    fc1    the whole fc1
//   down        mlp.fc2
// Named sets: fused = qkv, fc1 (NeMo's fused linears); canonical = q, k, v, o, gate, up, down (HF PEFT's seven
// projections); mlperf = qkv, o (MLPerf Llama 2 70B LoRA). Or an explicit comma-separated list.
// Tensor parallel (parallel/tensor_shard.h): the adapters follow their linear's role. Column parallel (qkv, fc1): A
// whole on every rank, B split over its rows; row parallel (out, fc2): A split over its columns, B whole. The whole
// factor's gradient is then a partial sum over the tp ranks (summed like a replicated slot's under SP), and no
// activation needs communication beyond the base linear's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tb::model {

struct ModelConfig;

enum LoraTarget : unsigned {
  kLoraQ = 1u << 0,
  kLoraK = 1u << 1,
  kLoraV = 1u << 2,
  kLoraQkv = 1u << 3,
  kLoraO = 1u << 4,
  kLoraGate = 1u << 5,
  kLoraUp = 1u << 6,
  kLoraFc1 = 1u << 7,
  kLoraDown = 1u << 8,
};
inline constexpr unsigned kLoraFused = kLoraQkv | kLoraFc1;
inline constexpr unsigned kLoraCanonical = kLoraQ | kLoraK | kLoraV | kLoraO | kLoraGate | kLoraUp | kLoraDown;
inline constexpr unsigned kLoraMlperf = kLoraQkv | kLoraO;

struct LoraConfig {
  int rank = 0;           // r; 0: no adapters (full training)
  double alpha = 0;       // the scale is alpha / r; 0: 2 r (the DGXC and MLPerf settings: r 8 α 16, r 16 α 32)
  double dropout = 0;     // p, on each adapter's input
  unsigned targets = kLoraFused;
  std::uint64_t seed = 0;  // of the dropout masks (the run's seed)

  bool enabled() const { return rank > 0; }
  double scale() const { return (alpha > 0 ? alpha : 2.0 * rank) / rank; }
};

// "fused", "canonical", "mlperf", or "q,k,v,o" for another set.
std::string lora_targets_name(unsigned targets);
// The adapters in one line: "LoRA r 8 alpha 16 dropout 0.1 on canonical" (alpha as the scale gives it).
std::string lora_text(const LoraConfig& l);
// A named set or a comma-separated list of q, k, v, qkv, o, gate, up, fc1, down; Error{config} for an unknown name
// (with the nearest one), an empty item, a name given twice, or a block with its whole linear (q with qkv).
unsigned parse_lora_targets(std::string_view text);
// What the model cannot take of its LoRA config (ModelConfig::validate calls it): a rank <= 0 with targets named,
// r above min(in, out) of a targeted block, dropout outside [0, 1), alpha < 0, gate on a model without a gate, LoRA on
// a Mixture-of-Experts model or on multi-head latent attention. One Error{config} per problem.
void validate_lora(const ModelConfig& c);

}  // namespace tb::model
