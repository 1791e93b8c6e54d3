// model/params.h: the parameter registry. A module adds each parameter as (name, shape, init, tags) and gets a handle
// (its index); the registry packs them back to back in one flat buffer (offsets in elements) and says how each one
// starts. Everything that treats parameters differently (weight decay, tensor-parallel split and reduction, the
// optimizer's state, the tied-embedding sum over pipeline stages) reads the tags, never the names.
// Gradients: only trainable parameters have one. They are packed back to back in a gradient buffer of their own
// (grad_total elements) in the parameters' order: a slot's grad_offset, kNoGrad when frozen. With every parameter
// trainable the two layouts coincide (grad_offset == offset); with LoRA (model/lora.h) only the adapters have one.
//   init: value = init_value + init_std * N(0, 1), drawn by core/counter_rng.h's normal_value from the stream
//   slot_seed(seed, name): element i of a parameter is fma(init_std, normal_value(slot_seed(seed, name), i),
//   init_value) in fp32 on every backend, so a parameter's values depend on neither the parameters before it (a proxy
//   with fewer layers starts like the full model), nor the backend (CPU and CUDA start from the same weights), nor how
//   it is drawn (whole, in pieces, a tensor-parallel shard cut out of it). A uniform init (init_bound > 0, LoRA's A)
//   is fma(hi - lo, uniform_value(slot_seed(seed, name), i), lo) with lo, hi = init_value -+ init_bound instead (the
//   formula of ops/cuda/fill.h's fill_uniform).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tb::model {

// What a parameter is: the token embedding, learned positions, a norm's gain or bias, a linear layer's weight, the LM
// head (its own weight; tied models use the embedding), a LoRA adapter's factor A or B (model/lora.h).
enum class ParamRole { embedding, position, norm, linear, head, adapter };
// How tensor parallel holds it: whole on every rank (its gradient summed over the group), or split Megatron's way:
// column parallel (rows split: each of tp_blocks' row blocks cut into tp parts), row parallel (columns split).
enum class TpRole { replicated, column, row };
// The data-parallel group its gradient reduces over: the dense replicas, or (Mixture-of-Experts) the expert replicas.
enum class ParamGroup { dense, expert };

struct ParamTags {
  ParamRole role = ParamRole::linear;
  TpRole tp = TpRole::replicated;
  std::vector<std::int64_t> tp_blocks;  // column parallel: rows of each block split by tp (empty: all rows, one block)
  ParamGroup group = ParamGroup::dense;
  bool trainable = true;  // has a gradient, master weights and moments
  bool decay = true;      // AdamW's weight decay applies (not to norm gains and biases)
  bool tied = false;      // the embedding that the LM head shares, or its copy on a last pipeline stage
};

inline constexpr std::size_t kNoGrad = ~std::size_t(0);

struct Slot {  // one parameter in the flat buffer
  std::string name;
  std::size_t offset = 0, size = 0;  // in elements of the flat buffer
  std::vector<std::int64_t> shape;   // [rows, cols] for matrices, [n] for vectors
  double init_std = 0, init_value = 0, init_bound = 0;
  ParamTags tags;
  std::size_t grad_offset = kNoGrad;  // in elements of the gradient buffer; kNoGrad: frozen
  bool has_grad() const { return grad_offset != kNoGrad; }
};

struct ParamInit {
  double std = 0, value = 0;
  double bound = 0;  // > 0: uniform in [value - bound, value + bound] (std unused)
};

class ParamRegistry {
 public:
  std::vector<Slot> slots;
  std::size_t total = 0;       // elements
  std::size_t grad_total = 0;  // elements of the trainable slots (the gradient buffer)

  // Appends a parameter after the last one; returns its handle (index into slots).
  int add(std::string name, std::vector<std::int64_t> shape, ParamInit init, ParamTags tags);
  const Slot& at(std::string_view name) const;  // Error{config} for an unknown name
  // Elements of the parameters with the tag (e.g. trainable), in the buffer's order.
  std::size_t count_if(bool (*pred)(const ParamTags&)) const;
};

// The seed of parameter `name`'s stream: splitmix64 of the run's seed, then of each byte of the name in turn.
std::uint64_t slot_seed(std::uint64_t seed, std::string_view name);

// Fills params (registry.total elements) with the initial values (see above).
template <class T>
void init_params(std::span<T> params, const ParamRegistry& registry, std::uint64_t seed);

}  // namespace tb::model
