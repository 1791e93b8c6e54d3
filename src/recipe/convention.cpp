// recipe/convention.cpp: publisher FLOP conventions over model/flops.h (LoRA 2/3, full-mha, linear).
#include "recipe/convention.h"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "core/suggest.h"
#include "model/flops.h"

namespace tb::recipe {
namespace {
const std::vector<std::string> kNames = {"full", "causal", "full-mha", "linear"};
}

std::string_view convention_name(Convention c) { return kNames[size_t(c)]; }

Convention parse_convention(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i)
    if (kNames[i] == name) return Convention(i);
  raise_config(fmt::format("unknown FLOP convention '{}'{}: use full, causal, full-mha or linear", name,
                           did_you_mean(name, kNames)));
}

bool can_count_flops(const Recipe& r) { return !r.needs_feature("mamba"); }

double flops_per_token(const Recipe& r, const Layout& l, Convention c) {
  TB_REQUIRE(can_count_flops(r),
             fmt::format("recipe '{}': trainbench cannot count FLOPs of this model yet (it needs mamba)", r.name));
  model::ModelConfig m = r.model;
  m.layers = l.layers > 0 ? l.layers : m.layers;
  if (c == Convention::full_mha) m.kv_heads = m.heads;
  const auto conv = c == Convention::causal ? model::FlopConvention::causal : model::FlopConvention::full;
  const auto f = model::flops_per_token(m, conv, l.seq > 0 ? l.seq : r.model.seq);
  const double total = c == Convention::linear ? f.total() - f.attention_core : f.total();
  return r.task == "lora" ? total * model::kLoraFlopFactor : total;  // (r.model has no adapters: counted once here)
}

double flops_per_token(const Recipe& r, Convention c) {
  Layout full;
  full.layers = r.model.layers;
  full.seq = r.model.seq;
  return flops_per_token(r, full, c);
}

double convert_tflops(const Recipe& r, const Layout& l, double tflops, Convention from, Convention to) {
  return tflops * flops_per_token(r, l, to) / flops_per_token(r, l, from);
}

}  // namespace tb::recipe
