// report/scale.cpp: the scaling series (scale.h).
#include "report/scale.h"

#include <fmt/format.h>

#include "core/interrupt.h"
#include "core/record_keys.h"
#include "report/analysis.h"

namespace tb::report {
namespace fs = std::filesystem;

double projected_comm_share(const nlohmann::json& p) {
  const bool old = !p.contains("breakdown_ms");  // older trainbench: breakdown_s and step_s, in seconds
  const auto b = p.value(old ? "breakdown_s" : "breakdown_ms", nlohmann::json::object());
  const double step = old ? p.value("step_s", 0.0) : p.value("step_ms", 0.0);
  double comm = 0;
  for (const char* k : {"tp_exposed", "cp_exposed", "ep_exposed", "pp_exposed", "dp_exposed"}) comm += b.value(k, 0.0);
  return step > 0 ? comm / step : -1;
}

std::vector<nlohmann::json> run_scale(const ScaleSpec& spec, const ScaleHooks& hooks, JsonlSink& sink) {
  std::vector<nlohmann::json> out;
  auto emit = [&](Record r) {
    sink.write(r);
    out.push_back(to_json(r, ""));
  };
  auto base = [&](int n, const char* source) {
    Record r;
    r.bench = "scale.point";
    r.name = fmt::format("{}/{}gpus/{}", spec.recipe, n, source);
    r.world = n;
    r.data = {{"recipe", spec.recipe}, {"gpus", n}, {"mode", spec.mode}, {"source", source}};
    return r;
  };
  int strong_batch = 0;
  for (int n : spec.gpus) {
    if (interrupted()) break;  // Ctrl-C or SIGTERM: the counts so far are recorded; a rerun resumes after them
    const fs::path dir = spec.out / fmt::format("gpus-{}", n);
    if (hooks.measured) {
      std::string why;
      Record r = base(n, "measured");
      if (auto m = hooks.measured(n, dir / "measured", &why)) {
        r.data.update(*m);
        emit(r);
      } else {
        hooks.say(fmt::format("{} GPUs measured: not run: {}", n, why));  // no record: nothing was measured
      }
    }
    Record p = base(n, "proxy");
    std::optional<nlohmann::json> run = finished_run(dir);
    if (run) {
      hooks.say(fmt::format("{} GPUs proxy: already measured in {}, not run again", n, dir.string()));
    } else {
      hooks.say(fmt::format("{} GPUs proxy: running into {}", n, dir.string()));
      const PointRun pr = hooks.proxy(n, spec.mode == "strong" ? strong_batch : 0, dir);
      run = finished_run(dir);
      if (interrupted()) {
        p.status = Status::interrupted;
        hooks.say(fmt::format("{} GPUs proxy: interrupted", n));
        emit(p);
        break;
      }
      if (!run) {
        if (pr.rc == 2) {
          p.status = Status::skipped, p.reason = pr.message;
        } else {
          p.status = Status::error, p.error_kind = "point", p.error_msg = fmt::format("exit {}: {}", pr.rc, pr.message);
        }
        hooks.say(fmt::format("{} GPUs proxy: {}", n, pr.message));
        emit(p);
        continue;
      }
    }
    const auto lay = run->value("layout", nlohmann::json::object());
    if (strong_batch == 0) strong_batch = lay.value("global_batch", 0);
    p.data.update(point_metrics(*run));
    p.data["layout"] = lay;
    p.data["note"] = "per-GPU shard on one GPU: compute only";
    emit(p);
    if (hooks.project) {
      std::string why;
      Record j = base(n, "projected");
      if (auto proj = hooks.project(n, dir, &why)) {
        j.data["tokens_per_s_per_gpu"] = proj->value("tokens_per_s_per_gpu", 0.0);
        j.data["step_ms"] = ms_value(*proj, "step");
        j.data["comm_share"] = projected_comm_share(*proj);
        j.data["mfu"] = proj->value("mfu", 0.0);
        j.data["system"] = proj->value("system", "");
        if (spec.mode == "strong") j.data["note"] = "projected at the recipe's layout for N (its global batch)";
      } else {
        j.status = Status::skipped, j.reason = why;
      }
      emit(j);
    }
  }
  std::vector<const nlohmann::json*> ptrs;
  for (const auto& j : out) ptrs.push_back(&j);
  for (const auto& s : scale_rows(ptrs))
    if (s.status == "ok")
      hooks.say(fmt::format("{:>5} GPUs {:<9} {:>10.0f} tokens/s/GPU  efficiency {:5.1f}%{}", s.gpus, s.source,
                            s.tokens_per_s_per_gpu, 100 * s.efficiency,
                            s.comm_share >= 0 ? fmt::format("  comm {:.1f}%", 100 * s.comm_share) : ""));
  return out;
}

}  // namespace tb::report
