// model/params.cpp: the parameter registry and its deterministic init (model/params.h).
#include "model/params.h"

#include <cmath>
#include <string>

#include "core/counter_rng.h"
#include "core/error.h"

namespace tb::model {

int ParamRegistry::add(std::string name, std::vector<std::int64_t> shape, ParamInit init, ParamTags tags) {
  TB_REQUIRE(!name.empty() && !shape.empty(), "parameter registry: a parameter needs a name and a shape");
  std::size_t size = 1;
  for (std::int64_t s : shape) {
    TB_REQUIRE(s > 0, "parameter registry: " + name + " has a dimension of " + std::to_string(s));
    size *= std::size_t(s);
  }
  if (tags.tp == TpRole::column) {
    std::int64_t rows = 0;
    for (std::int64_t b : tags.tp_blocks) rows += b;
    TB_REQUIRE(tags.tp_blocks.empty() || rows == shape[0],
               "parameter registry: " + name + "'s column-parallel blocks do not add up to its rows");
  }
  TB_REQUIRE(init.bound >= 0, "parameter registry: " + name + " has a negative init bound");
  const std::size_t grad = tags.trainable ? grad_total : kNoGrad;
  slots.push_back(
      Slot{std::move(name), total, size, std::move(shape), init.std, init.value, init.bound, std::move(tags), grad});
  total += size;
  if (grad != kNoGrad) grad_total += size;
  return int(slots.size()) - 1;
}

const Slot& ParamRegistry::at(std::string_view name) const {
  for (const Slot& s : slots)
    if (s.name == name) return s;
  raise_config("model: no parameter named '" + std::string(name) + "'");
}

std::size_t ParamRegistry::count_if(bool (*pred)(const ParamTags&)) const {
  std::size_t n = 0;
  for (const Slot& s : slots)
    if (pred(s.tags)) n += s.size;
  return n;
}

std::uint64_t slot_seed(std::uint64_t seed, std::string_view name) {
  std::uint64_t h = splitmix64(seed);
  for (char ch : name) h = splitmix64(h ^ std::uint64_t(static_cast<unsigned char>(ch)));
  return h;
}

template <class T>
void init_params(std::span<T> params, const ParamRegistry& registry, std::uint64_t seed) {
  TB_REQUIRE(params.size() == registry.total, "init_params: the buffer holds " + std::to_string(params.size()) +
                                                  " parameters, the model " + std::to_string(registry.total));
  for (const Slot& s : registry.slots) {
    T* p = params.data() + s.offset;
    const auto sd = float(s.init_std), mean = float(s.init_value);
    const std::uint64_t stream = slot_seed(seed, s.name);
    if (s.init_bound > 0) {
      const auto lo = float(s.init_value - s.init_bound), hi = float(s.init_value + s.init_bound);
      for (std::size_t i = 0; i < s.size; ++i) p[i] = T(std::fma(hi - lo, uniform_value(stream, i), lo));
      continue;
    }
    for (std::size_t i = 0; i < s.size; ++i) p[i] = T(std::fma(sd, normal_value(stream, i), mean));
  }
}

template void init_params<float>(std::span<float>, const ParamRegistry&, std::uint64_t);
template void init_params<double>(std::span<double>, const ParamRegistry&, std::uint64_t);

}  // namespace tb::model
