// micro/check.h: `trainbench check`, the node acceptance: every micro suite at its quick size set on
// the chosen GPUs, then verdicts (report/verdict.h) against the GPU model's references and across
// sibling GPUs. Order: gemm (bf16, e4m3 at 8192^3), membw (copy 1 GiB), links (h2d, d2h, peer at
// 256 MiB), nccl (all six collectives at 64 MiB, 256 MiB, 1 GiB, f32) when 2+ GPUs.
#pragma once

#include <vector>

#include "micro/suite.h"
#include "report/verdict.h"

namespace tb::micro {

struct CheckResult {
  std::vector<report::VerdictRow> rows;
  bool failed = false;
};

// Runs the suites into ctx.out, judges every record, appends one "check" record per verdict row.
CheckResult run_check(Context& ctx);

}  // namespace tb::micro
