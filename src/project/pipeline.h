// project/pipeline.h: how a layout's layers sit on its pipeline ranks, and the pipeline bubble.
// Bubble of 1F1B with m micro-batches per pipeline (m = global_batch / (micro_batch · dp), the gradient
// accumulation) over pp stages, each rank holding vp interleaved chunks (vp = 1: plain 1F1B):
//   bubble time = (pp − 1)/vp · t_mb        bubble fraction = (pp − 1)/(vp · m)   (of the m·t_mb of compute)
// t_mb = one micro-batch's forward + backward through all of a rank's chunks (Narayanan et al. 2021, the
// Megatron-LM interleaved schedule). Layers per rank: layers/pp each; with pp_counts_embedding (NeMo's
// account_for_embedding/loss_in_pipeline_split) the split is (layers + 2)/pp slots and the first rank's first
// slot is the embedding, the last rank's last slot the loss head, so those two ranks hold one layer fewer.
#pragma once

namespace tb::project {

double bubble_fraction(int pp, int vp, int micro_batches);
// Chunk passes (each 1/vp of a micro-batch) the first pipeline rank runs before its first backward (warmup),
// and, symmetrically, after the last forward (cooldown): Megatron's schedules, (pp−1)·2 + (vp−1)·pp interleaved,
// pp − 1 for plain 1F1B, 0 without a pipeline.
double pipeline_ramp_chunks(int pp, int vp);
double bubble_time_s(int pp, int vp, double microbatch_s);

struct StageLayers {
  double first = 0, middle = 0, last = 0;  // layers on the first, a middle, the last pipeline rank (pp = 1: all)
  double most() const;                     // the most any rank holds
};
StageLayers stage_layers(int layers, int pp, bool pp_counts_embedding);

}  // namespace tb::project
