// project/measurement.cpp: see measurement.h.
#include "project/measurement.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/jsonl.h"
#include "core/record.h"
#include "core/record_keys.h"

namespace tb::project {
namespace {

std::vector<std::filesystem::path> files_of(const std::filesystem::path& p) {
  namespace fs = std::filesystem;
  TB_REQUIRE(fs::exists(p), fmt::format("--from {}: no such file or folder (give the results folder of `trainbench run "
                                        "<recipe>`, or its results.jsonl)",
                                        p.string()));
  if (!fs::is_directory(p)) return {p};
  if (fs::exists(p / "results.jsonl")) return {p / "results.jsonl"};  // one run's folder
  std::vector<fs::path> out = result_files_below(p);  // a folder of results (records of other benches are skipped)
  TB_REQUIRE(!out.empty(), fmt::format("--from {}: no results.jsonl and no *.jsonl in the folder or below it",
                                       p.string()));
  return out;
}

// extrapolated.fit.<key>_ms in seconds (older records: <key>_s in seconds).
double fit_value(const nlohmann::json& fit, const char* key, const std::string& where) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), v = ms_value(fit, key, nan);
  TB_REQUIRE(!std::isnan(v),
             fmt::format("{}: run record without extrapolated.fit.{}_ms (made by an older trainbench?)", where, key));
  return v / 1e3;
}

Measurement run_of(const nlohmann::json& j, const std::string& where) {
  Measurement m;
  m.where = where;
  m.recipe = j.value("recipe", "");
  m.precision = j.value("precision", "");
  m.release = j.value("release", "");
  m.gpu = j.value("gpu", "");
  TB_REQUIRE(!m.recipe.empty() && !m.precision.empty(),
             fmt::format("{}: run record without recipe or precision", where));
  TB_REQUIRE(j.contains("layout") && j["layout"].is_object(), fmt::format("{}: run record without its layout", where));
  const auto& l = j["layout"];
  recipe::Layout& L = m.layout;
  L.where = l.value("where", "");
  L.gpus = l.value("gpus", 1), L.tp = l.value("tp", 1), L.pp = l.value("pp", 1), L.cp = l.value("cp", 1);
  L.vp = l.value("vp", 1), L.dp = l.value("dp", 1), L.micro_batch = l.value("micro_batch", 1);
  L.ep = l.value("ep", 1), L.etp = l.value("etp", 0);
  L.global_batch = l.value("global_batch", 1), L.layers = l.value("layers", 0), L.seq = l.value("seq", 0);
  TB_REQUIRE(L.tp >= 1 && L.cp >= 1 && L.ep >= 1 && L.etp >= 0 && L.micro_batch >= 1 && L.layers >= 1 && L.seq >= 1,
             fmt::format("{}: run record with an incomplete layout", where));
  TB_REQUIRE(!j.contains("measured"),
             fmt::format("{}: a distributed run measures the whole job, with no per-layer fit to project from; give a "
                         "one-GPU proxy run (`trainbench run RECIPE --proxy`)",
                         where));
  TB_REQUIRE(j.contains("extrapolated") && j["extrapolated"].contains("fit"),
             fmt::format("{}: run record without extrapolated.fit (made by an older trainbench?)", where));
  const auto& fit = j["extrapolated"]["fit"];
  m.f0_s = fit_value(fit, "f0", where), m.f1_s = fit_value(fit, "f1", where);
  m.o0_s = fit_value(fit, "o0", where), m.o1_s = fit_value(fit, "o1", where);
  TB_REQUIRE(m.f1_s > 0, fmt::format("{}: the fit's per-layer time f1_ms is not positive: measure two layer counts "
                                     "(`trainbench run` does by default)",
                                     where));
  return m;
}

// The train record's layout object {dp, cp, pp, tp, vp, sequence_parallel} (older records: the string
// "dp1 cp1 pp1 tp2 vp1 sp"); data parallel over every GPU when absent.
recipe::Layout train_layout(const nlohmann::json& j, const std::string& where) {
  recipe::Layout L;
  L.where = where;
  L.gpus = j.value("gpus", 1), L.dp = L.gpus;
  L.micro_batch = j.value("micro_batch", 1), L.global_batch = j.value("global_batch", 1);
  L.layers = j.value("layers", 0), L.seq = j.value("seq", 0);
  const nlohmann::json lay = layout_object(j.value("layout", nlohmann::json()), where);
  if (!lay.empty()) {
    L.dp = lay.value("dp", 1), L.cp = lay.value("cp", 1), L.pp = lay.value("pp", 1), L.tp = lay.value("tp", 1);
    L.vp = lay.value("vp", 1), L.sequence_parallel = lay.value("sequence_parallel", false);
  }
  TB_REQUIRE(L.dp * L.cp * L.pp * L.tp == L.gpus && L.layers >= 1 && L.seq >= 1,
             fmt::format("{}: train record's layout does not multiply out to its {} GPUs, or has no layers/seq", where,
                         L.gpus));
  return L;
}

TrainRun train_of(const nlohmann::json& j, const std::string& where) {
  TrainRun t;
  t.where = where;
  t.model = j.value("model", ""), t.precision = j.value("precision", ""), t.gpu = j.value("gpu", "");
  t.recompute = j.value("recompute", "none");
  t.layout = train_layout(j, where);
  TB_REQUIRE(j.contains("step_ms") && j["step_ms"].contains("median"),
             fmt::format("{}: train record without step_ms.median", where));
  t.step_s = j["step_ms"]["median"].get<double>() / 1e3;
  t.tokens_per_s_per_gpu = j.value("tokens_per_s_per_gpu", 0.0);
  if (j.contains("ops"))
    for (const auto& op : j["ops"]) t.ops_s.emplace_back(op.value("op", ""), op.value("ms", 0.0) / 1e3);
  return t;
}

}  // namespace

Inputs load_inputs(std::span<const std::filesystem::path> paths) {
  Inputs in;
  std::map<std::string, std::pair<double, double>> nccl;  // op -> (bytes, busbw) at the largest size
  for (const auto& p : paths)
    for (const auto& file : files_of(p)) {
      in.files.push_back(file.string());
      for (const auto& l : read_jsonl(file).lines) {
        const nlohmann::json& j = l.value;
        const std::string where = fmt::format("{}:{}", file.string(), l.line);
        if (j.value("status", "") != "ok") continue;
        try {  // a field of the wrong type: this record's file and line, not the JSON library's words
          const std::string bench = j.value("bench", "");
          if (bench == "run") {
            in.runs.push_back(run_of(j, where));
          } else if (bench == "train" && j.value("gpus", 1) >= 2) {
            in.trains.push_back(train_of(j, where));
          } else if (bench.starts_with("micro.nccl.") && j.value("world", 1) >= 2 && j.contains("busbw_gbps")) {
            const std::string op = bench.substr(std::string("micro.nccl.").size());
            const double bytes = j.value("bytes", 0.0), bw = j["busbw_gbps"].get<double>();
            auto& best = nccl[op];
            if (bytes >= best.first) best = {bytes, bw};
            in.nvlink.gpus = std::max(in.nvlink.gpus, j.value("world", 1));
            in.nvlink.where = file.string();
          }
        } catch (const nlohmann::json::exception& e) {
          raise_config(fmt::format("{}: a field of the wrong type: {}", where, e.what()));
        } catch (const std::logic_error& e) {  // std::stoi on a layout word such as "tp99999999999"
          raise_config(fmt::format("{}: a value out of range: {}", where, e.what()));
        }
      }
    }
  auto take = [&](const char* op, double& dst) {
    if (auto it = nccl.find(op); it != nccl.end()) dst = it->second.second;
  };
  take("all_reduce", in.nvlink.all_reduce);
  take("all_gather", in.nvlink.all_gather);
  take("reduce_scatter", in.nvlink.reduce_scatter);
  take("sendrecv", in.nvlink.sendrecv);
  take("alltoall", in.nvlink.all_to_all);
  return in;
}

}  // namespace tb::project
