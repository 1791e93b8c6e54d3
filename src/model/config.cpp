// model/config.cpp: validation, the presets (shapes as in the DGXC recipe files), parameter counts.
#include "model/config.h"

#include <fmt/format.h>

#include <vector>

#include "core/error.h"
#include "core/suggest.h"

namespace tb::model {
namespace {

ModelConfig llama(std::string name, int layers, int d, int ffn, int heads, int kv, int vocab, int seq) {
  ModelConfig c;
  c.name = std::move(name);
  c.family = "llama";
  c.layers = layers, c.d_model = d, c.ffn = ffn, c.heads = heads, c.kv_heads = kv, c.head_dim = d / heads;
  c.vocab = vocab, c.seq = seq;
  c.norm = Norm::rmsnorm, c.act = Act::swiglu, c.pos = Pos::rope;
  c.rope_theta = 500000.0;
  c.rope_scaling.enabled = true;  // Llama 3.1
  return c;
}

ModelConfig nemotron(std::string name, int layers, int d, int ffn, int heads, int kv) {
  ModelConfig c;
  c.name = std::move(name);
  c.family = "nemotron";
  c.layers = layers, c.d_model = d, c.ffn = ffn, c.heads = heads, c.kv_heads = kv, c.head_dim = d / heads;
  c.vocab = 256000, c.seq = 4096;
  c.norm = Norm::layernorm1p, c.act = Act::sqrelu, c.pos = Pos::rope;
  c.rope_theta = 10000.0;
  return c;
}

std::vector<ModelConfig> make_presets() {
  std::vector<ModelConfig> p;
  p.push_back(llama("llama3.1-8b", 32, 4096, 14336, 32, 8, 128256, 8192));
  p.push_back(llama("llama3.1-70b", 80, 8192, 28672, 64, 8, 128256, 8192));
  p.push_back(llama("llama3.1-405b", 126, 16384, 53248, 128, 16, 128256, 8192));
  p.push_back(nemotron("nemotron4-15b", 32, 6144, 24576, 48, 8));
  p.push_back(nemotron("nemotron4-340b", 96, 18432, 73728, 96, 8));
  ModelConfig gpt;
  gpt.name = "gpt3-175b";
  gpt.family = "gpt";
  gpt.layers = 96, gpt.d_model = 12288, gpt.ffn = 49152, gpt.heads = 96, gpt.kv_heads = 96, gpt.head_dim = 128;
  gpt.vocab = 51200, gpt.seq = 2048;
  gpt.norm = Norm::layernorm, gpt.act = Act::gelu, gpt.pos = Pos::learned, gpt.tied_embeddings = true;
  p.push_back(gpt);
  ModelConfig mistral = llama("mistral-7b", 32, 4096, 14336, 32, 8, 32000, 4096);
  mistral.family = "mistral";
  mistral.rope_theta = 10000.0;
  mistral.rope_scaling.enabled = false;
  p.push_back(mistral);
  ModelConfig tiny = llama("tiny", 2, 64, 192, 4, 2, 256, 64);  // for CPUs: trains in seconds
  tiny.rope_theta = 10000.0;
  tiny.rope_scaling.enabled = false;
  p.push_back(tiny);
  ModelConfig small = llama("small", 4, 256, 768, 4, 2, 512, 256);  // for quick GPU runs and tests (CUDA-aligned)
  small.rope_theta = 10000.0;
  small.rope_scaling.enabled = false;
  p.push_back(small);
  ModelConfig small_gpt = gpt;  // `small` in the GPT-3 form (LayerNorm, GELU, MHA, learned positions, tied)
  small_gpt.name = "small-gpt";
  small_gpt.layers = 4, small_gpt.d_model = 256, small_gpt.ffn = 1024, small_gpt.heads = small_gpt.kv_heads = 4;
  small_gpt.head_dim = 64, small_gpt.vocab = 512, small_gpt.seq = 256;
  p.push_back(small_gpt);
  ModelConfig small128 = small;  // `small` with head_dim 128 (2 heads, MHA): what cuDNN's FP8 attention takes
  small128.name = "small-hd128";
  small128.heads = small128.kv_heads = 2, small128.head_dim = 128;
  p.push_back(small128);
  return p;
}

}  // namespace

std::string_view norm_name(Norm n) {
  switch (n) {
    case Norm::rmsnorm: return "rmsnorm";
    case Norm::layernorm: return "layernorm";
    case Norm::layernorm1p: return "layernorm1p";
  }
  return "?";
}

std::string_view act_name(Act a) {
  switch (a) {
    case Act::swiglu: return "swiglu";
    case Act::gelu: return "gelu";
    case Act::sqrelu: return "sqrelu";
  }
  return "?";
}

std::string_view pos_name(Pos p) { return p == Pos::rope ? "rope" : "learned"; }

void ModelConfig::validate() const {
  const std::string who = name.empty() ? std::string("model") : fmt::format("model '{}'", name);
  TB_REQUIRE(layers > 0 && d_model > 0 && ffn > 0 && heads > 0 && kv_heads > 0 && head_dim > 0 && vocab > 0 && seq > 0,
             fmt::format("{}: layers, d_model, ffn, heads, kv_heads, head_dim, vocab and seq must all be positive", who));
  TB_REQUIRE(heads % kv_heads == 0,
             fmt::format("{}: kv_heads={} must divide heads={} (each KV head serves a group of query heads)", who,
                         kv_heads, heads));
  TB_REQUIRE(pos != Pos::rope || head_dim % 2 == 0,
             fmt::format("{}: RoPE rotates pairs of dimensions, so head_dim={} must be even", who, head_dim));
  TB_REQUIRE(norm_eps > 0, fmt::format("{}: norm_eps must be positive", who));
}

std::span<const ModelConfig> presets() {
  static const std::vector<ModelConfig> all = make_presets();
  return all;
}

const ModelConfig& preset(std::string_view name) {
  std::vector<std::string> names;
  for (const auto& p : presets()) {
    if (p.name == name) return p;
    names.push_back(p.name);
  }
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  raise_config(fmt::format("unknown model '{}'{}; presets: {}", name, did_you_mean(name, names), list));
}

std::int64_t matmul_param_count(const ModelConfig& c) {
  const std::int64_t d = c.d_model;
  const std::int64_t attn = d * (c.q_dim() + 2 * std::int64_t(c.kv_dim())) + std::int64_t(c.q_dim()) * d;
  const std::int64_t mlp = (c.act == Act::swiglu ? 3 : 2) * d * c.ffn;
  return c.layers * (attn + mlp) + std::int64_t(c.vocab) * d;  // + the LM head
}

std::int64_t param_count(const ModelConfig& c) {
  const std::int64_t d = c.d_model;
  const bool bias = c.norm != Norm::rmsnorm;                    // LayerNorm has a bias
  const std::int64_t norm = d * (bias ? 2 : 1);
  std::int64_t n = matmul_param_count(c) + c.layers * 2 * norm + norm;  // two norms per layer, the final one
  n += std::int64_t(c.vocab) * d;                                 // token embedding
  if (c.tied_embeddings) n -= std::int64_t(c.vocab) * d;          // the LM head is the embedding
  if (c.pos == Pos::learned) n += std::int64_t(c.seq) * d;
  return n;
}

}  // namespace tb::model
