// parallel/mesh.h: the device mesh dp x cp x pp x tp of a parallel run (tp innermost, so a tensor-parallel group
// is consecutive ranks: the GPUs of one NVLink domain), its checks against the model, and each rank's groups.
//   rank = ((dp_i * cp + cp_i) * pp + pp_i) * tp + tp_i
//   groups of a rank: the ranks that differ from it in one coordinate only (tp, cp, pp, dp), and dp x cp (the
//   ranks holding the same parameter shard: gradients are reduced over them).
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
  int world() const { return dp * cp * pp * tp; }
  std::string str() const;          // "dp2 cp1 pp2 tp2 vp1 sp"
};

struct Coord {
  int dp = 0, cp = 0, pp = 0, tp = 0;
};
Coord coord_of(const MeshShape& s, int rank);
int rank_of(const MeshShape& s, const Coord& c);

// Every problem of the layout at once, one per line ("" when it is runnable): world = dp·cp·pp·tp, heads,
// kv_heads, ffn and vocab divisible by tp, layers by pp·vp, seq by 2·cp (cp > 1: load-balanced causal chunks),
// seq by tp with sequence parallel, global batch by micro_batch·dp, interleaving (vp > 1) with pp > 1 and the
// micro-batch count a multiple of pp.
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

 private:
  MeshShape shape_;
  Coord coord_;
  std::unique_ptr<comm::Communicator> tp_, cp_, pp_, dp_, dp_cp_;
};

}  // namespace tb::parallel
