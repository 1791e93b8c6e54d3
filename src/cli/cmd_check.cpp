// cli/cmd_check.cpp: `trainbench check`: the node acceptance (micro/check.h); exit 1 when any verdict fails.
#include <cstdio>

#include "bench/telemetry.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "micro/check.h"

namespace tb::cli {

int cmd_check(int argc, char** argv) {
  CLI::App app{"system check: GEMM, HBM, links and NCCL against references and sibling GPUs",
               "trainbench check"};
  CommonOptions common;
  common.add_to(app);
  micro::Spec spec;
  app.add_option("--warmup", spec.warmup, "warmup iterations (default: each suite's)")->check(whole_number(0));
  app.add_option("--iters", spec.iters, "timed iterations (default: each suite's)")->check(whole_number(1));
  if (auto rc = parse(app, argc, argv)) return *rc;

  auto devices = select_devices("check", common);
  if (devices.exit) return *devices.exit;
  spec.devices = devices.list;
  auto systems = load_systems_for(common, spec.devices.front());
  auto run = open_run(common, argc, argv);
  std::printf("trainbench check: %zu GPU(s), reference %s\n", spec.devices.size(),
              systems.match ? systems.match->file.c_str() : "none");
  bench::Telemetry telemetry(spec.devices);
  micro::Output out(run.sink.get(), true);
  micro::Context ctx{spec, out, systems.match, &telemetry, std::nullopt};
  const auto result = micro::run_check(ctx);
  std::printf("\n== verdicts ==\n%s", report::render_table(result.rows).c_str());
  std::printf("\ncheck: %s\n", result.failed ? "FAILED (see the rows marked FAIL)" : "passed");
  print_results_location(run);
  return result.failed ? kFailed : kOk;
}

}  // namespace tb::cli
