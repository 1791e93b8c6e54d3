// model/config.h: the dense decoder family (Llama 3.x, GPT-3, Nemotron-4, Mistral) as one config, and
// the named presets of the reference recipes (shapes from the DGXC recipe files) plus `tiny` for CPUs and `small`,
// `small-hd128` (its head_dim 128 for FP8 attention), `small-gpt` (GPT-3's form) for quick GPU runs.
//   attention: heads query heads, kv_heads key/value heads (GQA when kv_heads < heads), head_dim each;
//   mlp: swiglu (3 GEMMs: gate, up, down), gelu or sqrelu (2 GEMMs: up, down), ffn wide;
//   norm: rmsnorm, layernorm, or layernorm1p (LayerNorm with weight stored as w - 1, Nemotron);
//   positions: rope (theta, optional Llama 3.1 frequency scaling) or learned absolute embeddings.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace tb::model {

enum class Norm { rmsnorm, layernorm, layernorm1p };
enum class Act { swiglu, gelu, sqrelu };
enum class Pos { rope, learned };

std::string_view norm_name(Norm n);
std::string_view act_name(Act a);
std::string_view pos_name(Pos p);

// Llama 3.1 RoPE frequency scaling (factor 8, low 1, high 4, original context 8192 for Llama 3.1).
struct RopeScaling {
  bool enabled = false;
  double factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
  int original_max_position = 8192;
};

struct ModelConfig {
  std::string name;    // preset name, e.g. "llama3.1-8b"
  std::string family;  // "llama", "gpt", "nemotron", "mistral"
  int layers = 0, d_model = 0, ffn = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0, seq = 0;
  Norm norm = Norm::rmsnorm;
  Act act = Act::swiglu;
  Pos pos = Pos::rope;
  bool tied_embeddings = false;  // LM head shares the token embedding (GPT-3)
  double rope_theta = 500000.0;
  RopeScaling rope_scaling;
  double norm_eps = 1e-5;

  int q_dim() const { return heads * head_dim; }         // width of Q (and of the attention output)
  int kv_dim() const { return kv_heads * head_dim; }     // width of K and of V
  void validate() const;  // TB_REQUIRE: positive sizes, kv_heads divides heads, ...
};

std::span<const ModelConfig> presets();
// The preset with this name; unknown names raise Error{config} listing the presets (with a "did you mean").
const ModelConfig& preset(std::string_view name);

// Parameter counts: every weight (embeddings, norms, projections), and those in matmuls (the FLOP
// convention's "params in matmuls": projections and MLP per layer, plus the LM head).
std::int64_t param_count(const ModelConfig& c);
std::int64_t matmul_param_count(const ModelConfig& c);

}  // namespace tb::model
