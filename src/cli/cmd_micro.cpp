// cli/cmd_micro.cpp: `trainbench micro <suite> [options]`: one suite, records to results.jsonl.
#include <fmt/format.h>

#include "bench/telemetry.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "core/log.h"
#include "micro/suite.h"

namespace tb::cli {

int cmd_micro(int argc, char** argv) {
  CLI::App app{"run one microbenchmark suite", "trainbench micro"};
  micro::Spec spec;
  CommonOptions common;
  std::string suite;
  std::vector<std::string> names;
  for (const auto& s : micro::suites()) names.emplace_back(s.name);
  app.add_option("suite", suite, "gemm | membw | nccl | links")->required()->check(CLI::IsMember(names));
  common.add_to(app);
  app.add_option("--dtype", spec.dtypes,
                 "gemm: bf16 f16 tf32 f32 e4m3 e4m3xe5m2 (default all but f32); nccl: f32 bf16 f16 f64 i32 (default f32)")
      ->delimiter(',');
  app.add_option("-s,--sizes", spec.sizes,
                 "gemm: 8192 (cube) or MxNxK; others: bytes like 64M, 1G, or a x2 range 1M:1G")->delimiter(',');
  app.add_option("--shapes", spec.shapes, "gemm: named shape sets: llama3.1-8b, llama3.1-70b")->delimiter(',');
  app.add_option("--tp", spec.tp, "gemm shape sets: tensor-parallel sizes, e.g. 1,2,4,8")->delimiter(',');
  app.add_option("--ops", spec.ops,
                 "nccl: all_reduce all_gather reduce_scatter alltoall broadcast sendrecv; membw: copy read write "
                 "triad; links: h2d d2h peer")->delimiter(',');
  app.add_option("--op", spec.reduce_op, "nccl reduction: sum prod max min avg")
      ->check(CLI::IsMember({"sum", "prod", "max", "min", "avg"}));
  app.add_option("--warmup", spec.warmup, "warmup iterations (default: the suite's)")->check(whole_number(0));
  app.add_option("--iters", spec.iters, "timed iterations (default: the suite's)")->check(whole_number(1));
  app.add_flag("--quick", spec.quick, "the reduced size set `check` uses");
  bool no_verify = false, no_tune = false;
  app.add_flag("--no-verify", no_verify, "skip result verification");
  app.add_flag("--no-tune", no_tune, "gemm: use the cuBLASLt heuristic's first algorithm, do not time the others");
  if (auto rc = parse(app, argc, argv)) return *rc;
  spec.verify = !no_verify;
  spec.tune = !no_tune;

  const micro::Suite* s = micro::find_suite(suite);
  auto devices = select_devices("micro " + suite, common, s->min_gpus);
  if (devices.exit) return *devices.exit;
  spec.devices = devices.list;

  auto systems = load_systems_for(common, spec.devices.front());
  auto run = open_run(common, argc, argv);
  bench::Telemetry telemetry(spec.devices);
  if (!telemetry.available()) log::warn("telemetry off: {}", telemetry.reason());
  micro::Output out(run.sink.get(), true);
  micro::Context ctx{spec, out, systems.match, &telemetry, std::nullopt};
  s->run(ctx);
  print_results_location(run);
  return out.any_error() ? kFailed : kOk;
}

}  // namespace tb::cli
