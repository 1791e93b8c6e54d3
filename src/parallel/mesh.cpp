// parallel/mesh.cpp: mesh coordinates, layout checks and group construction (parallel/mesh.h).
#include "parallel/mesh.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace tb::parallel {

std::string MeshShape::str() const {
  return fmt::format("dp{} cp{} pp{} tp{} vp{}{}{}", dp, cp, pp, tp, vp, sequence_parallel ? " sp" : "",
                     ep > 1 ? fmt::format(" ep{}", ep) : "");
}

Coord coord_of(const MeshShape& s, int rank) {
  Coord c;
  c.tp = rank % s.tp;
  rank /= s.tp;
  c.pp = rank % s.pp;
  rank /= s.pp;
  c.cp = rank % s.cp;
  c.dp = rank / s.cp;
  return c;
}

int rank_of(const MeshShape& s, const Coord& c) { return ((c.dp * s.cp + c.cp) * s.pp + c.pp) * s.tp + c.tp; }

ExpertCoord expert_coord_of(const MeshShape& s, const Coord& c) {
  const int l = (c.dp * s.cp + c.cp) * s.tp + c.tp;
  return {l % s.ep, l / s.ep};
}

std::string layout_problems(const MeshShape& s, const model::ModelConfig& m, int world, int micro_batch,
                            int global_batch) {
  std::string out;
  auto add = [&](const std::string& p) { out += (out.empty() ? "" : "\n") + p; };
  if (s.dp < 1 || s.cp < 1 || s.pp < 1 || s.tp < 1 || s.vp < 1 || s.ep < 1) {
    add("every degree (dp, cp, pp, tp, vp, ep) must be at least 1");
    return out;
  }
  if (s.world() != world)
    add(fmt::format("dp·cp·pp·tp = {}·{}·{}·{} = {} ranks, but the job has {}: set --gpus (or mpirun -np) to {} or "
                    "change the layout",
                    s.dp, s.cp, s.pp, s.tp, s.world(), world, s.world()));
  auto divides = [&](int n, int d, const char* what, const char* by) {
    if (d > 1 && n % d != 0) add(fmt::format("{} ({}) is not divisible by {} ({})", what, n, by, d));
  };
  divides(m.heads, s.tp, "heads", "tp");
  divides(m.kv_heads, s.tp, "kv_heads", "tp");
  divides(m.ffn, s.tp, "ffn", "tp");
  divides(m.vocab, s.tp, "vocab", "tp");
  divides(m.layers, s.pp * s.vp, "layers", "pp·vp");
  divides(m.seq, 2 * s.cp, "seq", "2·cp (two load-balanced causal chunks per context-parallel rank)");
  if (s.sequence_parallel) divides(m.seq / std::max(1, s.cp), s.tp, "seq / cp", "tp (sequence parallel)");
  if (s.sequence_parallel && s.tp == 1) add("sequence parallel needs tp > 1");
  if (micro_batch < 1) add("micro-batch must be at least 1");
  const int gb = global_batch > 0 ? global_batch : micro_batch * s.dp;
  if (micro_batch >= 1 && gb % (micro_batch * s.dp) != 0)
    add(fmt::format("global batch ({}) is not divisible by micro-batch·dp ({}·{})", gb, micro_batch, s.dp));
  if (s.vp > 1 && s.pp == 1) add("interleaving (vp > 1) needs pp > 1");
  if (s.vp > 1 && micro_batch >= 1 && gb % (micro_batch * s.dp) == 0 && (gb / (micro_batch * s.dp)) % s.pp != 0)
    add(fmt::format("the interleaved schedule needs the micro-batch count per step ({}) to be a multiple of pp ({})",
                    gb / (micro_batch * s.dp), s.pp));
  if (s.ep > 1 && !m.moe.enabled())
    add(fmt::format("expert parallel (ep {}) needs a Mixture-of-Experts model; {} is dense", s.ep, m.name));
  if (s.ep > 1 && m.moe.enabled()) divides(m.moe.experts, s.ep, "experts", "ep");
  if (s.ep > 1 && s.stage_ranks() % s.ep != 0)
    add(
        fmt::format("ep ({}) does not divide the tp·cp·dp = {}·{}·{} = {} ranks of a pipeline stage (its expert grid "
                    "is ep x edp)",
                    s.ep, s.tp, s.cp, s.dp, s.stage_ranks()));
  if (s.ep > 1 && s.tp > 1 && !s.sequence_parallel)
    add("expert parallel with tp > 1 needs sequence parallel: each tp rank routes its own rows (as Megatron-Core "
        "requires for MoE with tensor parallel)");
  return out;
}

void validate_layout(const MeshShape& s, const model::ModelConfig& m, int world, int micro_batch, int global_batch) {
  const std::string p = layout_problems(s, m, world, micro_batch, global_batch);
  if (!p.empty())
  {
    std::string lines = p;
    for (std::size_t i = lines.find('\n'); i != std::string::npos; i = lines.find('\n', i + 1)) lines.insert(i + 1, "  ");
    raise_config(fmt::format("parallel layout {} does not fit {} on {} rank{}:\n  {}", s.str(), m.name, world,
                             world == 1 ? "" : "s", lines));
  }
}

int shared_gpu(const Coord& c, int gpus) { return (c.dp + c.cp + c.pp + c.tp) % gpus; }

std::string shared_gpu_problems(const MeshShape& s, int gpus) {
  std::string out;
  auto add = [&](const std::string& problem) { out += (out.empty() ? "" : "; ") + problem; };
  for (const auto& [name, n] : {std::pair{"dp", s.dp}, {"cp", s.cp}, {"pp", s.pp}, {"tp", s.tp}})
    if (n > gpus) add(fmt::format("{} ({}) is above the GPU count ({})", name, n, gpus));
  if (s.dp > 1 && s.cp > 1) add(fmt::format("dp x cp shares one optimizer group of {} ranks", s.dp * s.cp));
  return out;
}

Mesh::Mesh(comm::Communicator& world, const MeshShape& shape) : shape_(shape) {
  TB_REQUIRE(shape.world() == world.size(),
             fmt::format("mesh {} has {} ranks, the communicator {}", shape.str(), shape.world(), world.size()));
  TB_REQUIRE(shape.ep >= 1 && shape.stage_ranks() % shape.ep == 0,
             fmt::format("mesh {}: ep ({}) must divide the tp·cp·dp = {} ranks of a pipeline stage", shape.str(),
                         shape.ep, shape.stage_ranks()));
  coord_ = coord_of(shape, world.rank());
  const Coord c = coord_;
  // color: the coordinates that stay fixed inside the group; key: the varying one.
  auto color = [&](Coord k) { return rank_of(shape, k); };
  tp_ = world.split(color({c.dp, c.cp, c.pp, 0}), c.tp);
  pp_ = world.split(color({c.dp, c.cp, 0, c.tp}), c.pp);
  cp_ = world.split(color({c.dp, 0, c.pp, c.tp}), c.cp);
  dp_ = world.split(color({0, c.cp, c.pp, c.tp}), c.dp);
  dp_cp_ = world.split(color({0, 0, c.pp, c.tp}), c.dp * shape.cp + c.cp);
  // The expert grid of the stage: color (edp rank, pp) for the ep group, (ep rank, pp) for the edp group.
  expert_coord_ = expert_coord_of(shape, c);
  const int stages = shape.pp, e = expert_coord_.ep, edp = expert_coord_.edp;
  ep_ = world.split(edp * stages + c.pp, e);
  edp_ = world.split(e * stages + c.pp, edp);
}

}  // namespace tb::parallel
