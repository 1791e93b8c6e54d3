// parallel/mesh.h: the device mesh dp x cp x pp x tp of a parallel run (tp innermost, so a tensor-parallel group
// is consecutive ranks: the GPUs of one NVLink domain), its checks against the model, and each rank's groups.
//   rank = ((dp_i * cp + cp_i) * pp + pp_i) * tp + tp_i
//   groups of a rank: the ranks that differ from it in one coordinate only (tp, cp, pp, dp), and dp x cp (the
//   ranks holding the same parameter shard: gradients are reduced over them).
// Expert parallel (ep > 1, expert tensor parallel 1; Megatron-Core's expert rank generator, order tp-cp-ep-dp-pp
// with cp folded into the expert grid): the tp·cp·dp ranks of a pipeline stage, numbered by their stage index
//   l = (dp_i * cp + cp_i) * tp + tp_i,
// are re-split as ep x edp with ep inner: ep rank l mod ep, expert data-parallel rank l / ep. The ep group (the
// ranks exchanging tokens) is ep consecutive stage indices, so it is the tp group first (tp = ep: each tp rank
// routes its own sequence-parallel rows); the edp group (the ranks holding the same experts: their gradients are
// reduced over it) is the stage indices equal mod ep. E.g. dp2 tp2 ep2: ep groups {0,1} {2,3}, edp {0,2} {1,3}.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "model/config.h"

namespace tb::parallel {

struct MeshShape {
  int dp = 1, cp = 1, pp = 1, tp = 1;
  int vp = 1;                       // virtual pipeline stages (model chunks) per pipeline rank
  bool sequence_parallel = false;   // tp > 1: norms and residuals on seq / tp tokens (all-gather / reduce-scatter)
  int ep = 1;                       // expert parallel: each ep rank holds experts / ep of every MoE layer
  int world() const { return dp * cp * pp * tp; }
  int stage_ranks() const { return dp * cp * tp; }  // the ranks of one pipeline stage: ep x edp
  int edp() const { return stage_ranks() / ep; }    // expert data parallel: the ranks holding the same experts
  std::string str() const;                          // "dp2 cp1 pp2 tp2 vp1 sp" (+ " ep2" when ep > 1)
};

struct Coord {
  int dp = 0, cp = 0, pp = 0, tp = 0;
};
Coord coord_of(const MeshShape& s, int rank);
int rank_of(const MeshShape& s, const Coord& c);
// The place of the rank at `c` in its stage's expert grid (the header comment): ep rank and edp rank.
struct ExpertCoord {
  int ep = 0, edp = 0;
};
ExpertCoord expert_coord_of(const MeshShape& s, const Coord& c);

// Every problem of the layout at once, one per line ("" when it is runnable): world = dp·cp·pp·tp, heads,
// kv_heads, ffn and vocab divisible by tp, layers by pp·vp, seq by 2·cp (cp > 1: load-balanced causal chunks),
// seq by tp with sequence parallel, global batch by micro_batch·dp, interleaving (vp > 1) with pp > 1 and the
// micro-batch count a multiple of pp; ep > 1: a MoE model, experts divisible by ep, ep dividing tp·cp·dp, and
// sequence parallel when tp > 1 (Megatron-Core's rule for MoE with tp: each tp rank routes its own rows).
std::string layout_problems(const MeshShape& s, const model::ModelConfig& m, int world, int micro_batch,
                            int global_batch);
// Raises Error{config} "parallel layout <shape> does not fit <model> on <world> ranks: <problems>".
void validate_layout(const MeshShape& s, const model::ModelConfig& m, int world, int micro_batch, int global_batch);

// More ranks than GPUs (train --share-gpus, a layout checked on a smaller node): the GPU of the rank at `c`,
// (dp + cp + pp + tp) mod gpus. The ranks of a one-coordinate group (tp, cp, pp or dp) then sit on distinct GPUs when
// the group has at most `gpus` ranks, as NCCL needs; dp x cp (ZeRO-1 with cp) is not such a group.
int shared_gpu(const Coord& c, int gpus);
// "" when every one-coordinate group of `s` fits on `gpus` distinct GPUs, else what does not.
std::string shared_gpu_problems(const MeshShape& s, int gpus);

// This rank's groups, split from the world communicator (collective over it: every rank constructs one).
class Mesh {
 public:
  Mesh(comm::Communicator& world, const MeshShape& shape);
  const MeshShape& shape() const { return shape_; }
  const Coord& coord() const { return coord_; }
  comm::Communicator& tp() const { return *tp_; }
  comm::Communicator& cp() const { return *cp_; }
  comm::Communicator& pp() const { return *pp_; }
  comm::Communicator& dp() const { return *dp_; }
  comm::Communicator& dp_cp() const { return *dp_cp_; }
  comm::Communicator& ep() const { return *ep_; }    // the stage's ranks exchanging tokens with this one
  comm::Communicator& edp() const { return *edp_; }  // the stage's ranks holding this rank's experts
  const ExpertCoord& expert_coord() const { return expert_coord_; }

 private:
  MeshShape shape_;
  Coord coord_;
  ExpertCoord expert_coord_;
  std::unique_ptr<comm::Communicator> tp_, cp_, pp_, dp_, dp_cp_, ep_, edp_;
};

}  // namespace tb::parallel
