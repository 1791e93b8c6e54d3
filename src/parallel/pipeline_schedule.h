// parallel/pipeline_schedule.h: the pipeline-parallel schedules, as the ordered actions of each pipeline rank
// (pure: no communication here; parallel/pipeline.h runs them).
// pp ranks, vp model chunks per rank, m micro-batches. The layers are split into pp·vp chunks (global stages);
// chunk c of rank r is global stage c·pp + r (Megatron's interleaving), so activations always go to the next
// rank (r+1)%pp and gradients to the previous one (r-1+pp)%pp; the last rank's chunk c feeds rank 0's chunk c+1.
//   1F1B (vp = 1, Megatron's non-interleaved schedule):
//     warmup   w = min(pp − r − 1, m) forwards;  steady: m − w times (forward mb w+i, backward mb i);
//     cooldown: the w remaining backwards. Peak in-flight micro-batches on rank r: min(pp − r, m) ≤ pp.
//   Interleaved (vp > 1, m a multiple of pp): the m·vp chunk passes are ordered in groups of pp micro-batches
//     per chunk (virtual pass k: chunk (k mod pp·vp)/pp, micro-batch (k / (pp·vp))·pp + k mod pp; backwards take
//     the chunks in reverse), warmup w = min((pp − r − 1)·2 + (vp − 1)·pp, m·vp), then steady 1F1B, then cooldown.
//   Bubble (idle share of the compute time, ideal): (pp − 1)/(vp·m).
// Communication: every transfer of a rank is in an exchange action whose sends and receives are issued together
// (one Communicator::exchange), paired as Megatron pairs them: recv_forward, send_forward, send_forward_recv_backward,
// send_backward_recv_forward, send_backward (1F1B); send_forward_recv_forward, send_backward_recv_backward,
// send_forward_backward_recv_forward_backward (interleaved). Inside an exchange, activations come before
// gradients, so two ranks exchanging both (pp = 2) list them in the same order: messages between two ranks
// match in the order they are posted (MPI and NCCL alike).
#pragma once

#include <string>
#include <vector>

namespace tb::parallel {

struct PipelineShape {
  int pp = 1;             // pipeline ranks
  int vp = 1;             // model chunks (virtual stages) per rank
  int micro_batches = 1;  // m
  int stages() const { return pp * vp; }
  int stage_of(int rank, int chunk) const { return chunk * pp + rank; }
  bool first_stage(int rank, int chunk) const { return rank == 0 && chunk == 0; }
  bool last_stage(int rank, int chunk) const { return rank == pp - 1 && chunk == vp - 1; }
  std::string str() const;  // "pp4 vp2 m8"
};

// Every problem of the shape, one per line ("" when it is schedulable): positive pp, vp, m; vp > 1 needs pp > 1
// and m a multiple of pp.
std::string pipeline_problems(const PipelineShape& s);
// Raises Error{config} "pipeline <shape>: <problems>".
void validate_pipeline(const PipelineShape& s);

// One activation (forward) or gradient (backward) crossing a stage boundary, seen from one side. mb and chunk
// name this rank's pass it belongs to: send activation = output of Forward(mb, chunk), recv activation = input
// of Forward(mb, chunk), send gradient = input gradient of Backward(mb, chunk), recv gradient = output gradient
// of Backward(mb, chunk). Activations go to the next rank, gradients to the previous one.
struct PipeTransfer {
  enum class Dir { send, recv };
  enum class What { activation, gradient };
  Dir dir;
  What what;
  int mb, chunk;
  int peer;  // rank in the pipeline group
  bool operator==(const PipeTransfer&) const = default;
};

struct PipeAction {
  enum class Kind { forward, backward, exchange };
  Kind kind;
  int mb = -1, chunk = -1;              // forward, backward
  std::vector<PipeTransfer> transfers;  // exchange: issued together, activations first
};

// Forwards rank `rank` runs before its steady 1F1B phase (Megatron's num_warmup_microbatches, in chunk passes).
int warmup_forwards(const PipelineShape& s, int rank);
// The ordered actions of one rank; Error{config} for a bad shape or rank.
std::vector<PipeAction> pipeline_schedule(const PipelineShape& s, int rank);

struct PipelineStats {
  double bubble_fraction = 0;       // ideal (pp − 1)/(vp·m)
  std::vector<int> peak_in_flight;  // per rank: most chunk passes forwarded and not yet backwarded (stashed
                                    // activations, each 1/vp of the rank's layers)
  std::vector<double> peak_in_flight_microbatches;  // the same in micro-batches of the rank's layers: / vp
};
PipelineStats pipeline_stats(const PipelineShape& s);

// "F3.1" (forward of micro-batch 3, chunk 1), "B3.1", "X[sa3.1>2 rg0.1<2]" (send activation to rank 2, receive
// gradient from rank 2); a schedule as one line of these, for messages and tests.
std::string to_string(const PipeAction& a);
std::string to_string(const std::vector<PipeAction>& schedule);

}  // namespace tb::parallel
