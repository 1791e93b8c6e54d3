// model/param_layout.cpp: the dense decoder's flat parameter layout and its deterministic init (see the .h).
#include "model/param_layout.h"

#include <fmt/format.h>

#include <cmath>
#include <numbers>
#include <random>
#include <string>

#include "core/error.h"

namespace tb::model {
namespace {

// 64-bit FNV-1a of the slot name, mixed with the seed by splitmix64: the seed of the slot's generator.
std::uint64_t slot_seed(std::uint64_t seed, std::string_view name) {
  std::uint64_t h = 1469598103934665603ull;
  for (char ch : name) h = (h ^ std::uint8_t(ch)) * 1099511628211ull;
  std::uint64_t z = seed ^ h;
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A standard normal by Box-Muller from two uniforms in (0, 1] (std::normal_distribution's algorithm is not
// specified by the standard; this one gives the same values with every standard library).
double normal(std::mt19937_64& g) {
  const double u1 = (double(g() >> 11) + 1.0) * 0x1.0p-53, u2 = double(g() >> 11) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace

const Slot& DenseLayout::at(std::string_view name) const {
  for (const Slot& s : slots)
    if (s.name == name) return s;
  raise_config("dense decoder: no parameter named '" + std::string(name) + "'");
}

LayerRange pipeline_stage_layers(int layers, int stages, int stage) {
  TB_REQUIRE(stages >= 1 && stage >= 0 && stage < stages && layers >= stages,
             "pipeline stage " + std::to_string(stage) + " of " + std::to_string(stages) + ": needs 0 <= stage < " +
                 "stages <= layers (" + std::to_string(layers) + ")");
  return {int(std::int64_t(stage) * layers / stages), int(std::int64_t(stage + 1) * layers / stages)};
}

DenseLayout dense_layout(const ModelConfig& c, LayerRange range) {
  c.validate();
  const int first = range.first, last = range.last < 0 ? c.layers : range.last;
  TB_REQUIRE(0 <= first && first < last && last <= c.layers,
             "dense layout: layer range [" + std::to_string(first) + ", " + std::to_string(last) +
                 ") is not a non-empty part of the model's " + std::to_string(c.layers) + " layers");
  const bool embedding = first == 0, head = last == c.layers;
  DenseLayout L;
  L.first_layer = first;
  const std::int64_t d = c.d_model;
  const double std_in = 0.02, std_out = 0.02 / std::sqrt(2.0 * c.layers);
  const bool norm_bias = c.norm != Norm::rmsnorm;
  const double norm_w0 = c.norm == Norm::layernorm1p ? 0.0 : 1.0;
  auto add = [&](std::string name, std::vector<std::int64_t> shape, double init_std, double init_value) {
    std::size_t size = 1;
    for (auto s : shape) size *= std::size_t(s);
    L.slots.push_back(Slot{std::move(name), L.total, size, std::move(shape), init_std, init_value});
    L.total += size;
    return int(L.slots.size()) - 1;
  };
  auto norm = [&](const std::string& prefix, int& w, int& b) {
    w = add(prefix + ".weight", {d}, 0.0, norm_w0);
    if (norm_bias) b = add(prefix + ".bias", {d}, 0.0, 0.0);
  };
  if (embedding) L.embed = add("embed.weight", {c.vocab, d}, std_in, 0.0);
  if (embedding && c.pos == Pos::learned) L.pos_embed = add("pos_embed.weight", {c.seq, d}, std_in, 0.0);
  const std::int64_t fc1_rows = c.act == Act::swiglu ? 2 * std::int64_t(c.ffn) : c.ffn;
  for (int i = first; i < last; ++i) {
    const std::string p = "layers." + std::to_string(i);
    DenseLayout::Layer l;
    norm(p + ".norm1", l.norm1_w, l.norm1_b);
    l.qkv = add(p + ".attn.qkv.weight", {std::int64_t(c.q_dim()) + 2 * std::int64_t(c.kv_dim()), d}, std_in, 0.0);
    l.out = add(p + ".attn.out.weight", {d, c.q_dim()}, std_out, 0.0);
    norm(p + ".norm2", l.norm2_w, l.norm2_b);
    l.fc1 = add(p + ".mlp.fc1.weight", {fc1_rows, d}, std_in, 0.0);
    l.fc2 = add(p + ".mlp.fc2.weight", {d, c.ffn}, std_out, 0.0);
    L.layers.push_back(l);
  }
  if (!head) return L;
  norm("final_norm", L.final_norm_w, L.final_norm_b);
  if (c.tied_embeddings)  // the embedding itself, or on a last stage without it a copy of the same name and values
    L.lm_head = embedding ? L.embed : add("embed.weight", {c.vocab, d}, std_in, 0.0);
  else
    L.lm_head = add("lm_head.weight", {c.vocab, d}, std_in, 0.0);
  return L;
}

template <class T>
void init_params(std::span<T> params, const DenseLayout& layout, std::uint64_t seed) {
  TB_REQUIRE(params.size() == layout.total, "init_params: the buffer holds " + std::to_string(params.size()) +
                                                " parameters, the layout " + std::to_string(layout.total));
  for (const Slot& s : layout.slots) {
    T* p = params.data() + s.offset;
    if (s.init_std == 0) {
      for (std::size_t i = 0; i < s.size; ++i) p[i] = T(s.init_value);
      continue;
    }
    std::mt19937_64 g(slot_seed(seed, s.name));
    for (std::size_t i = 0; i < s.size; ++i) p[i] = T(s.init_value + s.init_std * normal(g));
  }
}

template void init_params<float>(std::span<float>, const DenseLayout&, std::uint64_t);
template void init_params<double>(std::span<double>, const DenseLayout&, std::uint64_t);

std::string cuda_layout_problem(const ModelConfig& c, const DenseLayout& l) {
  constexpr std::size_t kAlign = 128;  // elements: 256 bytes of bf16
  for (const Slot& s : l.slots)
    if (s.offset % kAlign != 0)
      return fmt::format("parameter slot {} starts at element {}, not a multiple of {} (256 bytes of bf16, which the "
                         "CUDA GEMM, norm and cross-entropy kernels assume); choose d_model, ffn and head sizes that "
                         "are multiples of 128",
                         s.name, s.offset, kAlign);
  if (c.head_dim % 8 != 0) return fmt::format("head_dim {} is not a multiple of 8 (cuDNN's attention)", c.head_dim);
  if (c.pos == Pos::rope && c.head_dim % 16 != 0)
    return fmt::format("RoPE on CUDA needs head_dim a multiple of 16, got {}", c.head_dim);
  return "";
}

}  // namespace tb::model
