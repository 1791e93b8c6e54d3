// micro/gemm_shapes.cpp: see gemm_shapes.h.
#include "micro/gemm_shapes.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/suggest.h"

namespace tb::micro {
namespace {

constexpr TransformerDims kModels[] = {
    {"llama3.1-8b", 4096, 14336, 32, 8, 128},
    {"llama3.1-70b", 8192, 28672, 64, 8, 128},
};

}  // namespace

std::vector<std::string> gemm_shape_set_names() {
  std::vector<std::string> names;
  for (const auto& m : kModels) names.emplace_back(m.name);
  return names;
}

const TransformerDims& transformer_dims(std::string_view set) {
  for (const auto& m : kModels)
    if (m.name == set) return m;
  const auto names = gemm_shape_set_names();
  raise_config(fmt::format("unknown GEMM shape set '{}'{}; known sets: {}", set, did_you_mean(set, names),
                           fmt::join(names, ", ")));
}

std::vector<NamedGemm> gemm_shape_set(std::string_view set, int tp, std::int64_t tokens) {
  const TransformerDims& m = transformer_dims(set);
  TB_REQUIRE(tokens >= 1, fmt::format("GEMM shape set {}: tokens must be >= 1 (got {})", set, tokens));
  TB_REQUIRE(tp >= 1 && m.heads % tp == 0 && m.kv_heads % tp == 0 && m.ffn % tp == 0,
             fmt::format("GEMM shape set {}: tensor-parallel size {} must divide heads ({}), kv_heads ({}) and "
                         "ffn ({}); use a tp such as 1, 2, 4 or 8",
                         set, tp, m.heads, m.kv_heads, m.ffn));
  struct Linear {
    const char* name;
    std::int64_t n, k;  // Y[M,N] = X[M,K] W[N,K]^T
  };
  const Linear layers[] = {
      {"qkv", (m.heads + 2 * m.kv_heads) * m.head_dim / tp, m.d_model},
      {"proj", m.d_model, m.heads * m.head_dim / tp},
      {"fc1", 2 * m.ffn / tp, m.d_model},
      {"fc2", m.d_model, m.ffn / tp},
  };
  std::vector<NamedGemm> out;
  for (const auto& l : layers) {
    const auto name = [&](const char* pass) { return fmt::format("{}/tp{}/{}.{}", set, tp, l.name, pass); };
    out.push_back({name("fprop"), tokens, l.n, l.k, true});
    out.push_back({name("dgrad"), tokens, l.k, l.n, false});
    out.push_back({name("wgrad"), l.n, l.k, tokens, false});
  }
  return out;
}

}  // namespace tb::micro
