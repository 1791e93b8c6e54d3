// cli/train_progress.cpp: see train_progress.h.
#include "cli/train_progress.h"

#include <span>

#include "core/interrupt.h"

namespace tb::cli {

TrainProgress::TrainProgress(JsonlSink* sink, std::string case_name, int world, int warmup_steps,
                             std::unique_ptr<comm::Communicator> stop_group)
    : sink_(sink), case_(std::move(case_name)), world_(world), warmup_(warmup_steps),
      stop_group_(std::move(stop_group)) {
  // A signal between the agreement below and the trainer's look at interrupted() must not stop this rank alone.
  if (stop_group_) defer_interrupts_to_agreement();
}

void TrainProgress::after_step(const train::StepStats& s) {
  if (first_ == 0) first_ = s.step;  // a resumed run starts after its checkpoint's step
  if (sink_) {
    Record r;
    r.bench = "train.step";
    r.name = case_;
    r.world = world_;
    r.data = {{"step", s.step},
              {"loss", s.loss},
              {"lr", s.lr},
              {"grad_norm", s.grad_norm},
              {"step_ms", 1e3 * s.step_s},
              {"tokens_per_s", s.tokens_per_s},
              {"mem_gib", s.mem_gib},
              {"measured", s.step - first_ >= warmup_}};
    sink_->write(r);
  }
  if (stop_group_) {  // one rank's signal stops every rank after this step (the trainer polls interrupted())
    int stop = interrupt_requested() ? 1 : 0;
    stop_group_->all_reduce(std::span<int>(&stop, 1), comm::ReduceOp::max);
    if (stop) request_interrupt();
  }
}

}  // namespace tb::cli
