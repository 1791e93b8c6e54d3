// train/schedule.h: the learning-rate schedule, linear warmup then cosine decay (Megatron / NeMo shape).
// step is 0-based (the step about to be taken); W = warmup_steps, T = total_steps:
//   step <  W:       lr = peak * (step + 1) / W                     (step 0 gives peak / W; step W-1 gives peak)
//   W <= step < T:   lr = min + (peak - min) * (1 + cos(pi * (step - W) / (T - W))) / 2
//                    (step W gives peak; step W + (T - W)/2 gives (peak + min) / 2)
//   step >= T:       lr = min                                      (constant after the end)
// Valid: 0 <= min <= peak (finite; peak 0 is allowed for throughput-only runs), 0 <= W <= T, T >= 1. W = 0 starts at
// peak; W = T is warmup then min.
#pragma once

namespace tb::train {

struct LrSchedule {
  double peak = 0;
  double min = 0;
  int warmup_steps = 0;
  int total_steps = 0;

  void validate() const;      // throws tb::Error{config} naming the bad field
  double lr(int step) const;  // validates first; step >= 0
};

}  // namespace tb::train
