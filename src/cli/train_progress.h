// cli/train_progress.h: what `train` does after every step besides its log line, so that a long run survives a
// crash and stops as one job:
//  - rank 0 appends a "train.step" record per step (step, loss, lr, grad_norm, step_s, tokens_per_s, mem_gib,
//    measured: past the warmup) as soon as the step is done: a run killed with SIGKILL keeps every finished step;
//    the "train" record at the end summarizes them as before;
//  - CPU ranks under mpirun agree after each step whether any of them was asked to stop (Ctrl-C or SIGTERM sent to
//    one rank only): then every rank stops after that same step and writes its records marked interrupted. A signal
//    is then only a request until the ranks agreed (core/interrupt.h defer_interrupts_to_agreement), so no rank
//    can stop a step before the others.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "core/record.h"
#include "train/trainer.h"

namespace tb::cli {

class TrainProgress {
 public:
  // sink: rank 0's results (nullptr on the other ranks); stop_group: the job's ranks when the steps of every rank
  // end together (the CPU backend), else nullptr.
  TrainProgress(JsonlSink* sink, std::string case_name, int world, int warmup_steps,
                std::unique_ptr<comm::Communicator> stop_group);
  void after_step(const train::StepStats& s);

 private:
  JsonlSink* sink_;
  std::string case_;
  int world_, warmup_;
  int first_ = 0;  // the run's first step
  std::unique_ptr<comm::Communicator> stop_group_;
};

}  // namespace tb::cli
