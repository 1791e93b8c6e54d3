// report/compare.cpp: see compare.h.
#include "report/compare.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/record_keys.h"
#include "report/plus_minus.h"

namespace tb::report {

std::string_view ref_verdict_name(RefVerdict v) {
  switch (v) {
    case RefVerdict::meets: return "meets";
    case RefVerdict::below: return "below";
    case RefVerdict::above: return "above";
    case RefVerdict::none: return "no reference";
  }
  return "?";
}

RefVerdict ref_verdict_for(double ratio, double tolerance) {
  if (ratio < 1 - tolerance) return RefVerdict::below;
  if (ratio > 1 + tolerance) return RefVerdict::above;
  return RefVerdict::meets;
}

Comparison compare_run(const nlohmann::json& rec, const std::vector<recipe::ReferenceRow>& rows,
                       const std::string& ref_gpu) {
  TB_REQUIRE(rec.value("bench", "") == "run", "not a `run` record (bench '" + rec.value("bench", "") + "')");
  Comparison c;
  c.recipe = rec.at("recipe").get<std::string>();
  c.precision = rec.at("precision").get<std::string>();
  c.gpu = rec.value("gpu", "");
  c.release = rec.value("release", "");
  c.gpus = rec.at("layout").at("gpus").get<int>();
  c.proxy = rec.value("proxy", false);
  c.distributed = rec.value("mode", "") == "distributed";
  if (c.proxy && c.distributed)
    c.caveat =
        fmt::format("not the reference run: {}", fmt::join(rec.value("differences", std::vector<std::string>{}), "; "));
  else if (c.proxy)
    c.caveat = "proxy: extrapolated per-GPU compute, no communication or pipeline bubble";
  TB_REQUIRE(rec.contains("measured") || rec.contains("extrapolated"),
             "a `run` record without its figures (measured or extrapolated)");
  const auto& x = run_figures(rec);
  c.tokens_per_gpu = x.at("tokens_per_s_per_gpu").get<double>();
  c.step_s = ms_value(x, "step") / 1e3;  // step_ms; step_s in older records
  if (x.contains("se") && x["se"].is_object()) c.tokens_per_gpu_se = x["se"].value("tokens_per_s_per_gpu", 0.0);
  c.ref_gpu = ref_gpu;
  const recipe::ReferenceRow* row = recipe::find_reference(rows, {c.recipe, c.gpus, c.precision, ref_gpu, c.release});
  if (!row) row = recipe::find_reference(rows, {c.recipe, c.gpus, c.precision, ref_gpu});  // the newest release
  if (!row) {
    const auto& fpt = rec.value("flops_per_token", nlohmann::json::object());
    if (fpt.contains("full")) {
      c.convention = "full";
      c.tflops = c.tokens_per_gpu * fpt["full"].get<double>() / 1e12;
      const double peak = rec.value("peak_tflops", 0.0);
      if (peak > 0) c.mfu = c.tflops / peak;
    }
    const auto counts = recipe::reference_gpu_counts(rows, {c.recipe, 0, c.precision, ref_gpu});
    c.why_none = counts.empty() ? fmt::format("no {} {} reference for {}", ref_gpu, c.precision, c.recipe)
                                : fmt::format("{} {} references exist for {} GPUs", ref_gpu, c.precision,
                                              fmt::join(counts, ", "));
    return c;
  }
  c.ref_release = row->release();
  c.ref_where = row->where;
  c.ref_step_s = row->step_s;
  c.ref_tokens_per_gpu = row->tokens_per_s_per_gpu();
  c.ref_tflops = row->published_tflops_per_gpu();
  c.ref_mfu = row->mfu_pct / 100;
  c.convention = row->convention ? std::string(recipe::convention_name(*row->convention)) : "full";
  const auto& fpt = rec.value("flops_per_token", nlohmann::json::object());
  if (fpt.contains(c.convention)) c.tflops = c.tokens_per_gpu * fpt[c.convention].get<double>() / 1e12;
  const double peak = rec.value("peak_tflops", 0.0);
  if (peak > 0) c.mfu = c.tflops / peak;
  if (c.ref_tokens_per_gpu > 0)
    c.ratio = c.tokens_per_gpu / c.ref_tokens_per_gpu;
  else if (c.ref_step_s > 0)
    c.ratio = c.ref_step_s / c.step_s;
  c.tolerance = row->tolerance;
  if (c.ratio > 0) c.verdict = ref_verdict_for(c.ratio, c.tolerance);
  return c;
}

std::string render_comparisons(const std::vector<Comparison>& cs) {
  constexpr auto kRow = "{:<16} {:<5} {:>5}  {:<22} {:>12} {:>9} {:>11} {:>6} {:>6}  {}\n";
  std::string out = fmt::format(kRow, "recipe", "prec", "GPUs", "", "tokens/s/GPU", "step s", "TFLOP/s/GPU", "MFU",
                                "ratio", "verdict");
  auto num = [](double v, const char* f) { return v > 0 ? fmt::format(fmt::runtime(f), v) : std::string("-"); };
  auto tf = [&](double v) { return v >= 1 || v <= 0 ? num(v, "{:.1f}") : num(v, "{:.2g}"); };
  for (const Comparison& c : cs) {
    out += fmt::format(kRow, c.recipe, c.precision, c.gpus, fmt::format("ours, {}", c.gpu),
                       num(c.tokens_per_gpu, "{:.0f}"), num(c.step_s, "{:.3f}"), tf(c.tflops),
                       num(100 * c.mfu, "{:.1f}%"), "",
                       !c.proxy        ? ""
                       : c.distributed ? "[--set]"
                                       : "[proxy]");
    if (c.verdict == RefVerdict::none) {
      out += fmt::format(kRow, "", "", "", "reference", "-", "-", "-", "-", "-", c.why_none);
      continue;
    }
    out += fmt::format(kRow, "", "", "", fmt::format("{} {}", c.ref_gpu, c.ref_release), num(c.ref_tokens_per_gpu, "{:.0f}"),
                       num(c.ref_step_s, "{:.3f}"), tf(c.ref_tflops), num(100 * c.ref_mfu, "{:.1f}%"),
                       num(c.ratio, "{:.2f}"), ref_verdict_name(c.verdict));
  }
  bool proxy = false, changed = false;
  std::string conv;
  double tol = 0;  // the tolerance of the compared rows; 0: none compared yet
  bool mixed = false;
  for (const Comparison& c : cs) {
    proxy = proxy || (c.proxy && !c.distributed), changed = changed || (c.proxy && c.distributed);
    conv = c.convention.empty() ? conv : c.convention;
    if (c.verdict == RefVerdict::none) continue;
    mixed = mixed || (tol > 0 && c.tolerance != tol);
    tol = c.tolerance;
  }
  if (tol == 0) tol = 0.05;
  const std::string band = mixed ? std::string("within each reference's tolerance")
                                 : fmt::format("{:.2f}-{:.2f}", 1 - tol, 1 + tol);
  out += fmt::format(
      "ratio: tokens/s/GPU, ours / reference; meets {}; TFLOP/s in the reference's FLOP "
      "convention{}.\n",
      band, conv.empty() ? "" : " (" + conv + ")");
  for (const Comparison& c : cs)
    if (c.tokens_per_gpu_se > 0)
      out +=
          fmt::format("ours, {} {} {} GPU{}: {} tokens/s/GPU (± one standard error {})\n", c.recipe, c.precision,
                      c.gpus, c.gpus == 1 ? "" : "s", plus_minus(c.tokens_per_gpu, c.tokens_per_gpu_se, 0),
                      c.distributed ? "of the step over the measured steps"
                                    : "of the extrapolation: the points' step-time spread, not the proxy's own error");
  if (proxy)
    out += "[proxy]: one device ran the per-GPU shard; figures extrapolated to the full layout without "
           "communication or pipeline bubble.\n";
  if (changed) out += "[--set]: trained at the layout with the run's --set overrides, not the reference run itself.\n";
  return out;
}

}  // namespace tb::report
