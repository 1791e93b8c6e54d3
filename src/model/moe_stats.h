// model/moe_stats.h: what the MoE layers of a decoder (or a pipeline stage) routed, summed over the forwards since the
// last reset, on either backend: the pairs (token, choice) per layer and expert, the pairs dropped over capacity, and
// the load-balancing losses before their coefficients (model/config.h MoeConfig has their formulas).
//   objective = sum over layers of aux_loss · aux + seq_aux_loss · seq aux + z_loss · z (what they add to the loss
//   the gradient follows; the reported LM loss leaves them out)
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace tb::model {

struct MoeStats {
  int experts = 0;
  std::vector<std::int64_t> tokens_per_expert;  // [MoE layers, experts]: pairs routed, the whole micro-batches
  std::int64_t dropped = 0;                     // pairs dropped over capacity
  double aux = 0, seq_aux = 0, z = 0;           // the losses before their coefficients, summed over layers
  double objective = 0;

  bool empty() const { return tokens_per_expert.empty(); }
  void add(const MoeStats& o) {  // another stage's or chunk's layers
    experts = o.experts;
    tokens_per_expert.insert(tokens_per_expert.end(), o.tokens_per_expert.begin(), o.tokens_per_expert.end());
    dropped += o.dropped, aux += o.aux, seq_aux += o.seq_aux, z += o.z, objective += o.objective;
  }
  // Pairs per expert over every layer and expert: min, mean, max.
  struct Spread {
    double min = 0, mean = 0, max = 0;
  };
  Spread spread() const {
    if (empty()) return {};
    const auto [lo, hi] = std::minmax_element(tokens_per_expert.begin(), tokens_per_expert.end());
    double sum = 0;
    for (std::int64_t v : tokens_per_expert) sum += double(v);
    return {double(*lo), sum / double(tokens_per_expert.size()), double(*hi)};
  }
};

}  // namespace tb::model
