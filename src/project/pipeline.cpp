// project/pipeline.cpp: see pipeline.h.
#include "project/pipeline.h"

#include <algorithm>

#include "core/error.h"

namespace tb::project {

double bubble_fraction(int pp, int vp, int micro_batches) {
  TB_REQUIRE(pp >= 1 && vp >= 1 && micro_batches >= 1, "bubble_fraction: pp, vp and micro-batches must be positive");
  return double(pp - 1) / (double(vp) * micro_batches);
}

double pipeline_ramp_chunks(int pp, int vp) {
  TB_REQUIRE(pp >= 1 && vp >= 1, "pipeline_ramp_chunks: pp and vp must be positive");
  if (pp == 1) return 0;
  return vp > 1 ? double(pp - 1) * 2 + double(vp - 1) * pp : double(pp - 1);
}

double bubble_time_s(int pp, int vp, double microbatch_s) {
  TB_REQUIRE(pp >= 1 && vp >= 1, "bubble_time_s: pp and vp must be positive");
  return double(pp - 1) / vp * microbatch_s;
}

double StageLayers::most() const { return std::max({first, middle, last}); }

StageLayers stage_layers(int layers, int pp, bool pp_counts_embedding) {
  TB_REQUIRE(layers >= 1 && pp >= 1, "stage_layers: layers and pp must be positive");
  StageLayers s;
  if (pp == 1) {
    s.first = s.middle = s.last = layers;
    return s;
  }
  if (!pp_counts_embedding) {
    s.first = s.middle = s.last = double(layers) / pp;
    return s;
  }
  const double per = double(layers + 2) / pp;
  s.first = per - 1, s.last = per - 1;
  s.middle = pp > 2 ? per : std::max(s.first, s.last);
  return s;
}

}  // namespace tb::project
