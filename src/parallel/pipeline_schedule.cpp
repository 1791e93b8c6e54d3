// parallel/pipeline_schedule.cpp: the 1F1B and interleaved schedules (parallel/pipeline_schedule.h), written as
// Megatron-LM's forward_backward_pipelining_{without,with}_interleaving loops, with each p2p call recorded as one
// exchange action instead of being issued.
#include "parallel/pipeline_schedule.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace tb::parallel {
namespace {

using Dir = PipeTransfer::Dir;
using What = PipeTransfer::What;

// Collects one rank's actions. The transfer calls skip what the stage does not exchange (no input activation on
// the first global stage, no output gradient on the last) and gather into the pending exchange; flush() closes it.
class Builder {
 public:
  Builder(const PipelineShape& s, int rank) : s_(s), r_(rank) {}

  void forward(int mb, int chunk) { out_.push_back({PipeAction::Kind::forward, mb, chunk, {}}); }
  void backward(int mb, int chunk) { out_.push_back({PipeAction::Kind::backward, mb, chunk, {}}); }
  void send_activation(int mb, int chunk) {
    if (!s_.last_stage(r_, chunk)) pending_.push_back({Dir::send, What::activation, mb, chunk, next()});
  }
  void recv_activation(int mb, int chunk) {
    if (!s_.first_stage(r_, chunk)) pending_.push_back({Dir::recv, What::activation, mb, chunk, prev()});
  }
  void send_gradient(int mb, int chunk) {
    if (!s_.first_stage(r_, chunk)) pending_.push_back({Dir::send, What::gradient, mb, chunk, prev()});
  }
  void recv_gradient(int mb, int chunk) {
    if (!s_.last_stage(r_, chunk)) pending_.push_back({Dir::recv, What::gradient, mb, chunk, next()});
  }
  void flush() {
    if (pending_.empty()) return;
    std::stable_partition(pending_.begin(), pending_.end(),
                          [](const PipeTransfer& t) { return t.what == What::activation; });
    out_.push_back({PipeAction::Kind::exchange, -1, -1, std::move(pending_)});
    pending_.clear();
  }
  std::vector<PipeAction> take() {
    flush();
    return std::move(out_);
  }

 private:
  int prev() const { return (r_ - 1 + s_.pp) % s_.pp; }
  int next() const { return (r_ + 1) % s_.pp; }
  const PipelineShape& s_;
  int r_;
  std::vector<PipeTransfer> pending_;
  std::vector<PipeAction> out_;
};

// Megatron's forward_backward_pipelining_without_interleaving.
std::vector<PipeAction> one_f_one_b(const PipelineShape& s, int r) {
  const int m = s.micro_batches, warmup = warmup_forwards(s, r), steady = m - warmup;
  Builder b(s, r);
  for (int i = 0; i < warmup; ++i) {
    b.recv_activation(i, 0);  // recv_forward
    b.flush();
    b.forward(i, 0);
    b.send_activation(i, 0);  // send_forward
    b.flush();
  }
  if (steady > 0) {
    b.recv_activation(warmup, 0);  // recv_forward
    b.flush();
  }
  for (int i = 0; i < steady; ++i) {
    const int fwd = warmup + i;
    b.forward(fwd, 0);
    b.send_activation(fwd, 0);  // send_forward_recv_backward
    b.recv_gradient(i, 0);
    b.flush();
    b.backward(i, 0);
    b.send_gradient(i, 0);  // send_backward_recv_forward (send_backward on the last iteration)
    if (i + 1 < steady) b.recv_activation(fwd + 1, 0);
    b.flush();
  }
  for (int i = steady; i < m; ++i) {
    b.recv_gradient(i, 0);  // recv_backward
    b.flush();
    b.backward(i, 0);
    b.send_gradient(i, 0);  // send_backward
    b.flush();
  }
  return b.take();
}

// Megatron's forward_backward_pipelining_with_interleaving: virtual pass k of m·vp.
std::vector<PipeAction> interleaved(const PipelineShape& s, int r) {
  const int group = s.pp * s.vp, total = s.micro_batches * s.vp;
  auto chunk_f = [&](int k) { return (k % group) / s.pp; };
  auto chunk_b = [&](int k) { return s.vp - 1 - chunk_f(k); };
  auto mb = [&](int k) { return (k / group) * s.pp + k % s.pp; };
  const int warmup = warmup_forwards(s, r), steady = total - warmup;
  const bool all_warmup = warmup == total;

  Builder b(s, r);
  b.recv_activation(mb(0), chunk_f(0));  // recv_forward
  b.flush();
  for (int k = 0; k < warmup; ++k) {
    b.forward(mb(k), chunk_f(k));
    b.send_activation(mb(k), chunk_f(k));  // send_forward_recv_forward, or on the last warmup pass
    if (k + 1 < total) b.recv_activation(mb(k + 1), chunk_f(k + 1));  // send_forward_backward_recv_forward_backward
    if (k == warmup - 1 && !all_warmup) b.recv_gradient(mb(0), chunk_b(0));
    b.flush();
  }
  if (all_warmup) {
    b.recv_gradient(mb(0), chunk_b(0));  // recv_backward
    b.flush();
  }
  for (int k = 0; k < steady; ++k) {
    const int fk = warmup + k;
    b.forward(mb(fk), chunk_f(fk));
    b.backward(mb(k), chunk_b(k));
    b.send_activation(mb(fk), chunk_f(fk));  // send_forward_backward_recv_forward_backward
    b.send_gradient(mb(k), chunk_b(k));
    if (k + 1 < steady) b.recv_activation(mb(fk + 1), chunk_f(fk + 1));
    if (k + 1 < total) b.recv_gradient(mb(k + 1), chunk_b(k + 1));
    b.flush();
  }
  for (int k = steady; k < total; ++k) {
    b.backward(mb(k), chunk_b(k));
    b.send_gradient(mb(k), chunk_b(k));  // send_backward_recv_backward
    if (k + 1 < total) b.recv_gradient(mb(k + 1), chunk_b(k + 1));
    b.flush();
  }
  return b.take();
}

}  // namespace

std::string PipelineShape::str() const { return fmt::format("pp{} vp{} m{}", pp, vp, micro_batches); }

std::string pipeline_problems(const PipelineShape& s) {
  std::string out;
  auto add = [&](const std::string& p) { out += (out.empty() ? "" : "\n") + p; };
  if (s.pp < 1 || s.vp < 1 || s.micro_batches < 1) {
    add("pp, vp and the micro-batch count must be at least 1");
    return out;
  }
  if (s.vp > 1 && s.pp == 1) add("interleaving (vp > 1) needs pp > 1");
  if (s.vp > 1 && s.micro_batches % s.pp != 0)
    add(fmt::format("the interleaved schedule (vp > 1) needs the micro-batch count ({}) to be a multiple of pp ({})",
                    s.micro_batches, s.pp));
  return out;
}

void validate_pipeline(const PipelineShape& s) {
  const std::string p = pipeline_problems(s);
  if (!p.empty()) raise_config(fmt::format("pipeline {}: {}", s.str(), p));
}

int warmup_forwards(const PipelineShape& s, int rank) {
  validate_pipeline(s);
  TB_REQUIRE(rank >= 0 && rank < s.pp, fmt::format("pipeline {}: rank {} is not in [0, {})", s.str(), rank, s.pp));
  if (s.vp == 1) return std::min(s.pp - rank - 1, s.micro_batches);
  return std::min((s.pp - rank - 1) * 2 + (s.vp - 1) * s.pp, s.micro_batches * s.vp);
}

std::vector<PipeAction> pipeline_schedule(const PipelineShape& s, int rank) {
  warmup_forwards(s, rank);  // validates
  return s.vp == 1 ? one_f_one_b(s, rank) : interleaved(s, rank);
}

PipelineStats pipeline_stats(const PipelineShape& s) {
  validate_pipeline(s);
  PipelineStats st;
  st.bubble_fraction = double(s.pp - 1) / (double(s.vp) * s.micro_batches);
  for (int r = 0; r < s.pp; ++r) {
    int now = 0, peak = 0;
    for (const PipeAction& a : pipeline_schedule(s, r)) {
      if (a.kind == PipeAction::Kind::forward) peak = std::max(peak, ++now);
      if (a.kind == PipeAction::Kind::backward) --now;
    }
    st.peak_in_flight.push_back(peak);
    st.peak_in_flight_microbatches.push_back(double(peak) / s.vp);
  }
  return st;
}

std::string to_string(const PipeAction& a) {
  switch (a.kind) {
    case PipeAction::Kind::forward: return fmt::format("F{}.{}", a.mb, a.chunk);
    case PipeAction::Kind::backward: return fmt::format("B{}.{}", a.mb, a.chunk);
    case PipeAction::Kind::exchange: break;
  }
  std::string s = "X[";
  for (const PipeTransfer& t : a.transfers) {
    const bool send = t.dir == Dir::send;
    s += fmt::format("{}{}{}{}.{}{}{}", s.size() > 2 ? " " : "", send ? 's' : 'r',
                     t.what == What::activation ? 'a' : 'g', t.mb, t.chunk, send ? '>' : '<', t.peer);
  }
  return s + "]";
}

std::string to_string(const std::vector<PipeAction>& schedule) {
  std::string s;
  for (const PipeAction& a : schedule) {
    if (!s.empty()) s += ' ';
    s += to_string(a);
  }
  return s;
}

}  // namespace tb::parallel
