// mlperf/ttt.cpp: the formula of ttt.h, and the report `trainbench project --ttt` prints.
#include "mlperf/ttt.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace tb::mlperf {

std::optional<TttProjection> project_ttt(const Benchmark& b, int global_batch, double samples_per_s) {
  TB_REQUIRE(global_batch > 0 && samples_per_s > 0,
             fmt::format("time to train: global batch {} and {} samples/s must be positive", global_batch,
                         samples_per_s));
  const auto point = b.convergence_at(global_batch);
  if (!point) return std::nullopt;
  TttProjection p;
  p.point = *point;
  const double interval = double(b.eval_every_steps(global_batch)) * global_batch;
  const double intervals = std::ceil(point->samples / interval);
  p.samples = intervals * interval;
  p.evals = std::max(0, int(intervals) - b.eval_skipped(global_batch));
  p.train_s = p.samples / samples_per_s;
  p.eval_s = p.evals * double(b.eval_samples) / (3 * samples_per_s);
  p.minutes = (p.train_s + p.eval_s) / 60;
  return p;
}

const Benchmark& benchmark_of_recipe(std::string_view recipe_name) {
  std::vector<std::string> names;
  for (const Benchmark& b : benchmarks()) {
    if (b.recipe == recipe_name) return b;
    names.push_back(b.recipe);
  }
  raise_config(fmt::format("--ttt: recipe '{}' is no MLPerf benchmark; the MLPerf recipes: {}", recipe_name,
                           fmt::join(names, ", ")));
}

TttReport ttt_report(std::string_view recipe_name, int gpus, int global_batch, int seq, double tokens_per_s_per_gpu,
                     const std::vector<recipe::ReferenceRow>& rows, std::string_view gpu_name,
                     std::string_view precision) {
  TB_REQUIRE(gpus > 0 && seq > 0 && tokens_per_s_per_gpu > 0,
             fmt::format("time to train: {} GPUs, seq {}, {} tokens/s per GPU must be positive", gpus, seq,
                         tokens_per_s_per_gpu));
  TttReport r;
  r.benchmark = &benchmark_of_recipe(recipe_name);
  r.gpus = gpus, r.global_batch = global_batch, r.seq = seq, r.tokens_per_s_per_gpu = tokens_per_s_per_gpu;
  r.samples_per_s = tokens_per_s_per_gpu * gpus / seq;
  const auto t = project_ttt(*r.benchmark, global_batch, r.samples_per_s);
  TB_REQUIRE(t.has_value(), fmt::format("MLPerf {}: no reference convergence point", r.benchmark->name));
  r.ttt = *t;
  for (const auto& row : rows)
    if (row.recipe == recipe_name && row.time_to_train_min > 0 && row.gpus == gpus && row.precision == precision &&
        gpu_name.find(row.gpu) != std::string_view::npos &&
        (!r.published || recipe::compare_releases(row.release(), r.published->release()) > 0))
      r.published = &row;
  if (r.published) r.error = r.ttt.minutes / r.published->time_to_train_min - 1;
  return r;
}

std::string render_ttt(const TttReport& r) {
  const Benchmark& b = *r.benchmark;
  const TttProjection& t = r.ttt;
  const double interval = double(b.eval_every_steps(r.global_batch)) * r.global_batch;
  std::string out = fmt::format("time to train (MLPerf {}, target {} {}, GBS {} at {} GPUs):\n", b.name,
                                b.name == "gpt3" ? "log perplexity" : "eval loss", b.target, r.global_batch, r.gpus);
  out += fmt::format("  samples to target {:>10.0f}  the reference convergence point at GBS {} ({:.1f} samples), "
                     "rounded up to {:.0f} evaluation intervals of {:.0f}\n",
                     t.samples, t.point.global_batch, t.point.samples, t.samples / interval, interval);
  out += fmt::format("  throughput        {:>10.3f}  samples/s = {:.1f} tokens/s/GPU x {} GPUs / {} tokens per sample\n",
                     r.samples_per_s, r.tokens_per_s_per_gpu, r.gpus, r.seq);
  out += fmt::format("  training          {:>10.1f}  s = samples / throughput\n", t.train_s);
  out += fmt::format("  evaluations       {:>10.1f}  s = {} x {} samples / (3 x throughput) ({:.1f} s each)\n",
                     t.eval_s, t.evals, b.eval_samples, t.evals > 0 ? t.eval_s / t.evals : 0.0);
  out += fmt::format("  time to train     {:>10.2f}  min\n", t.minutes);
  if (const auto* p = r.published)
    out += fmt::format("  published         {:>10.2f}  min: {} {} x {} (MLPerf v{}, {}; {:.1f} samples, {:.1f} "
                       "evaluations of {:.1f} s, GBS {}); the projection is {:+.1f}%\n",
                       p->time_to_train_min, p->gpus, p->gpu, p->precision, p->release(), p->where,
                       p->samples_to_target, p->evals, p->eval_s, p->global_batch, 100 * r.error);
  else
    out += "  published         no MLPerf row of this recipe at this GPU count, GPU model and precision\n";
  return out;
}

nlohmann::json to_json(const TttReport& r) {
  nlohmann::json j = {{"benchmark", r.benchmark->name},
                      {"gpus", r.gpus},
                      {"global_batch", r.global_batch},
                      {"samples_per_s", r.samples_per_s},
                      {"samples", r.ttt.samples},
                      {"evals", r.ttt.evals},
                      {"train_s", r.ttt.train_s},
                      {"eval_s", r.ttt.eval_s},
                      {"minutes", r.ttt.minutes}};
  if (r.published)
    j["published"] = {{"minutes", r.published->time_to_train_min},
                      {"release", r.published->release()},
                      {"where", r.published->where},
                      {"error", r.error}};
  return j;
}

}  // namespace tb::mlperf
