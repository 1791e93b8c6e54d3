// bench/gemm_tune.cpp: see gemm_tune.h.
#include "bench/gemm_tune.h"

#include <algorithm>
#include <limits>

#include "bench/loop.h"
#include "core/error.h"
#include "ops/cuda/fill.h"

namespace tb::bench {

void tune_plan(ops::DeviceContext& dc, ops::GemmPlan& plan, const std::function<void(int)>& body) {
  if (plan.candidates() < 2) return;
  LoopSpec probe;  // sustained: each candidate warms until the clocks have settled (a power-limited GPU slows within
  probe.warmup = 3;  // tens of ms), so it is timed at the clock a training step runs it at, not at the idle boost
  probe.min_warmup_ms = kTuneSustainMs;
  probe.iters = 20;
  double best = std::numeric_limits<double>::infinity();
  int best_rank = 0;
  for (int rank = 0; rank < plan.candidates(); ++rank) {
    plan.select(rank);
    try {
      const double ms = time_stream(probe, dc.device(), dc.stream(), body).summary().median;
      if (ms < best) best = ms, best_rank = rank;
    } catch (const Error& e) {
      if (e.fatal()) throw;
    }
  }
  plan.select(best_rank);
}

int tune_all_plans(ops::DeviceContext& dc) {
  // Operand sizes in bytes: A is [m,k] (atb: [k,m]), B is [n,k] or [k,n], D is [m,n]; the same element counts in
  // every layout.
  std::size_t a_bytes = 0, b_bytes = 0, d_bytes = 0;
  dc.for_each_plan([&](ops::GemmPlan& p) {
    const ops::GemmShape& s = p.shape();
    a_bytes = std::max(a_bytes, std::size_t(s.m * s.k) * dtype_size(s.a));
    b_bytes = std::max(b_bytes, std::size_t(s.n * s.k) * dtype_size(s.b));
    d_bytes = std::max(d_bytes, std::size_t(s.m * s.n) * dtype_size(s.d));
  });
  if (a_bytes == 0) return 0;
  ops::DeviceBuffer a(dc.device(), a_bytes), b(dc.device(), b_bytes), d(dc.device(), d_bytes);
  int changed = 0;
  dc.for_each_plan([&](ops::GemmPlan& p) {
    const ops::GemmShape& s = p.shape();
    if (p.candidates() < 2 || is_fp8(s.a)) return;  // fp8 plans: tuned by their owners (scales, fast accumulation)
    ops::fill_uniform(a.get(), s.a, std::size_t(s.m * s.k), 1, -1.0f, 1.0f, dc.stream());
    ops::fill_uniform(b.get(), s.b, std::size_t(s.n * s.k), 2, -1.0f, 1.0f, dc.stream());
    ops::fill_uniform(d.get(), s.d, std::size_t(s.m * s.n), 3, -1.0f, 1.0f, dc.stream());
    const int before = p.algo().rank;
    tune_plan(dc, p, [&](int) { p.run(d.get(), a.get(), b.get(), dc.workspace(), dc.stream()); });
    changed += p.algo().rank != before;
  });
  dc.synchronize();
  return changed;
}

}  // namespace tb::bench
