// recipe/plan.cpp: see plan.h.
#include "recipe/plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/error.h"
#include "core/suggest.h"
#include "recipe/moe_proxy.h"

namespace tb::recipe {
namespace {

int parse_int(const std::string& key, const std::string& v) {
  int x = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  TB_REQUIRE(ec == std::errc() && p == v.data() + v.size() && x > 0,
             fmt::format("--set {}={}: needs a positive integer", key, v));
  return x;
}

void apply_sets(Layout& l, const std::map<std::string, std::string>& sets) {
  static const std::vector<std::string> keys = {"layers", "seq", "micro_batch", "global_batch", "tp", "pp",
                                                "cp",     "vp",  "ep",          "etp"};
  for (const auto& [k, v] : sets) {
    if (std::find(keys.begin(), keys.end(), k) == keys.end())
      raise_config(fmt::format("--set {}: unknown key{}; keys: {}", k, did_you_mean(k, keys), fmt::join(keys, ", ")));
    const int x = parse_int(k, v);
    if (k == "layers") l.layers = x;
    if (k == "seq") l.seq = x;
    if (k == "micro_batch") l.micro_batch = x;
    if (k == "global_batch") l.global_batch = x;
    if (k == "tp") l.tp = x;
    if (k == "pp") l.pp = x;
    if (k == "cp") l.cp = x;
    if (k == "vp") l.vp = x;
    if (k == "ep") l.ep = x;
    if (k == "etp") l.etp = x;
  }
  if (l.tp == 1) l.sequence_parallel = false;  // sequence parallel splits over tp ranks: none at tp 1
}

}  // namespace

Layout resolve_layout(const Recipe& r, const LayoutQuery& q, const std::map<std::string, std::string>& sets) {
  Layout l;
  try {
    l = layout_for(r, q);
  } catch (const Error&) {
    // An unlisted GPU count that only fits with the overrides (e.g. 1 GPU with --set cp=1): derive it from the
    // smallest listed run by the recipe's scaling rule, then apply the overrides below and validate.
    if (sets.empty()) throw;
    const std::vector<int> counts = layout_gpu_counts(r, q);
    if (counts.empty()) throw;
    LayoutQuery base_q = q;
    base_q.gpus = counts.front();
    const Layout base = layout_for(r, base_q);
    l = base;
    l.gpus = q.gpus;
    l.derived = true;
    if (base.scaling == Scaling::weak)
      l.global_batch = std::max(base.micro_batch, int(std::int64_t(base.global_batch) * q.gpus / base.gpus));
    l.note = fmt::format("derived from the {}-GPU layout at {} with the --set overrides", base.gpus, base.where);
  }
  if (l.layers <= 0) l.layers = r.model.layers;
  if (l.seq <= 0) l.seq = r.model.seq;
  if (!sets.empty()) {
    apply_sets(l, sets);
    l.dp = 0;
    l.where = "--set on " + l.where;
    validate_layout(r, l);
  }
  return l;
}

RunPlan plan_run(const Recipe& r, const RunOptions& opt) {
  TB_REQUIRE(r.runnable(), fmt::format("recipe '{}' needs {} (not built yet); `trainbench list recipes` shows what runs",
                                       r.name, fmt::join(r.needs, ", ")));
  RunPlan p;
  p.recipe = r.name;
  p.precision = opt.precision.empty() ? r.precisions.front() : opt.precision;
  TB_REQUIRE(std::find(r.precisions.begin(), r.precisions.end(), p.precision) != r.precisions.end(),
             fmt::format("recipe '{}' has no {} runs; its precisions: {}", r.name, p.precision,
                         fmt::join(r.precisions, ", ")));
  TB_REQUIRE(opt.ranks >= 0, fmt::format("{} ranks: the rank count must be positive", opt.ranks));
  TB_REQUIRE(opt.ranks == 0 || opt.ref_gpus == 0 || opt.ref_gpus == opt.ranks,
             fmt::format("--ref-gpus {} but the job has {} ranks: a distributed run stands for its own GPU count "
                         "(leave --ref-gpus out, or run the one-GPU proxy with --proxy)",
                         opt.ref_gpus, opt.ranks));
  TB_REQUIRE(opt.ranks == 0 || opt.points.empty(), "--points: a distributed run measures the whole model, no points");
  LayoutQuery q(opt.ranks > 0 ? opt.ranks : opt.ref_gpus, p.precision, opt.release, opt.gpu_model);
  if (q.gpus == 0) {
    const std::vector<int> counts = layout_gpu_counts(r, q);
    TB_REQUIRE(!counts.empty(), fmt::format("recipe '{}' lists no layout for {}", r.name, p.precision));
    q.gpus = counts.front();
  }
  p.layout = resolve_layout(r, q, opt.sets);
  p.reference = p.layout;
  if (!opt.sets.empty()) {
    try {
      p.reference = resolve_layout(r, q, {});
    } catch (const Error&) {
      p.reference.gpus = 0;
    }
  }
  model::ModelConfig m = r.model;
  m.lora = r.lora;  // a LoRA fine-tune trains the recipe's adapters (on a proxy: the shard's, as a tp rank holds them)
  const bool set_layers = opt.sets.count("layers") > 0;
  if (!opt.sets.empty()) {
    std::string sets;
    for (const auto& [k, v] : opt.sets) sets += fmt::format("{}{}={}", sets.empty() ? "" : " ", k, v);
    p.differences.push_back("--set " + sets);
  }
  p.data = opt.data.empty() ? r.data : opt.data;
  if (p.data != r.data) p.differences.push_back(fmt::format("data {} instead of the recipe's {}", p.data, r.data));
  m.layers = p.layout.layers;
  m.seq = p.layout.seq;
  p.layers = p.layout.layers;
  p.model = m;
  if (set_layers || p.layout.proxy)
    p.differences.push_back(fmt::format("{} of the model's {} layers{}", p.layers, r.model.layers,
                                        set_layers ? "" : " (the reference's own proxy)"));

  const Layout& l = p.layout;
  p.shard = m;
  p.shard.heads = m.heads / l.tp;
  p.shard.kv_heads = std::max(1, m.kv_heads / l.tp);
  p.shard.ffn = m.ffn / l.tp;
  p.shard.vocab = (m.vocab + l.tp - 1) / l.tp;
  const int stage_layers = std::max(1, p.layers / l.pp);
  p.shard.layers = stage_layers;
  MoeProxy moe;
  if (m.moe.enabled() && opt.ranks == 0) {  // a distributed run trains the real MoE layers
    moe = moe_proxy(m, l);
    apply_moe_proxy(moe, p.shard);
    p.expert_share = expert_param_share(p.shard);
    p.edp = std::max(1, l.dp * l.tp * l.cp / (l.ep * l.expert_tp()));
  }
  p.shard.validate();
  if (opt.ranks > 0) {  // the whole model on the job's ranks, measured as it runs
    p.distributed = true;
    p.proxy = !opt.sets.empty();  // the reference run itself unless overridden (the differences say how)
    return p;
  }
  const bool one_device = l.gpus == 1 && l.tp == 1 && l.pp == 1 && l.cp == 1;
  if (opt.points.empty()) {
    if (one_device && p.layers <= 4)  // small enough to measure as it is (tiny), and at 1 layer for the fit
      p.points = {1, std::max(2, p.layers)};
    else
      p.points = stage_layers >= 4 ? std::vector<int>{2, 4} : std::vector<int>{1, 2};
    if (m.moe.enabled())  // whole periods of the MoE layer pattern, so the slope is a period's mean layer
      for (std::size_t i = 0; i < p.points.size(); ++i)
        p.points[i] = moe_point(m, std::max(p.points[i], i > 0 ? p.points[i - 1] + 1 : 0));
  } else {
    p.points = opt.points;
    std::sort(p.points.begin(), p.points.end());
    p.points.erase(std::unique(p.points.begin(), p.points.end()), p.points.end());
    for (int n : p.points)
      TB_REQUIRE(!m.moe.enabled() || is_moe_point(m, n),
                 fmt::format("--points {}: a point of '{}' holds its {} dense first layers and then whole periods of "
                             "moe_every = {} layers (e.g. {}), so that the fit's slope is a period's mean layer",
                             n, r.name, m.moe.dense_first, m.moe.every, moe_point(m, n)));
  }
  p.proxy = !one_device || p.points.back() != stage_layers;
  if (p.proxy && one_device) {
    p.differences.push_back(fmt::format("layers measured at {} and extrapolated to the model's {}",
                                        fmt::join(p.points, ", "), stage_layers));
  } else if (p.proxy) {
    p.differences.push_back(fmt::format("one device runs the per-GPU shard of {} GPUs (tp {}, pp {}, cp {}, dp {}): "
                                        "heads {}/{}, ffn {}, vocab {}",
                                        l.gpus, l.tp, l.pp, l.cp, l.dp, p.shard.heads, p.shard.kv_heads, p.shard.ffn,
                                        p.shard.vocab));
    if (m.moe.enabled())
      for (std::string& d : moe_proxy_differences(m, l, moe)) p.differences.push_back(std::move(d));
    p.differences.push_back(fmt::format("layers measured at {} and extrapolated to the stage's {}",
                                        fmt::join(p.points, ", "), stage_layers));
    p.differences.push_back("no communication, no pipeline bubble (trainbench project adds them)");
  }
  return p;
}

double fit_standard_error(std::span<const PointTiming> pts, double L) {
  if (pts.size() == 1) return pts[0].se_s;  // the point is the run itself
  double mean = 0;
  for (const PointTiming& t : pts) mean += t.layers;
  mean /= double(pts.size());
  double sxx = 0;
  for (const PointTiming& t : pts) sxx += (t.layers - mean) * (t.layers - mean);
  if (sxx <= 0) return 0;
  double var = 0;
  for (const PointTiming& t : pts) {
    const double c = 1.0 / double(pts.size()) + (t.layers - mean) * (L - mean) / sxx;
    var += c * c * t.se_s * t.se_s;
  }
  return std::sqrt(var);
}

Extrapolation extrapolate(const RunPlan& plan, std::span<const PointTiming> pts) {
  TB_REQUIRE(!pts.empty(), "extrapolate: no measured points");
  Extrapolation e;
  const Layout& l = plan.layout;
  if (pts.size() == 1) {
    TB_REQUIRE(pts[0].layers == plan.shard.layers,
               fmt::format("extrapolate: one point at {} layers cannot be extrapolated to {}; measure two layer counts",
                           pts[0].layers, plan.shard.layers));
    e.f0 = pts[0].fb_s, e.o0 = pts[0].opt_s;
  } else {  // least squares of fb and opt against layers
    double n = 0, sx = 0, sxx = 0, sf = 0, sxf = 0, so = 0, sxo = 0;
    for (const PointTiming& t : pts) {
      n += 1, sx += t.layers, sxx += double(t.layers) * t.layers;
      sf += t.fb_s, sxf += t.layers * t.fb_s, so += t.opt_s, sxo += t.layers * t.opt_s;
    }
    const double den = n * sxx - sx * sx;
    TB_REQUIRE(den > 0, "extrapolate: the points need at least two different layer counts");
    e.f1 = (n * sxf - sx * sf) / den, e.f0 = (sf - e.f1 * sx) / n;
    e.o1 = (n * sxo - sx * so) / den, e.o0 = (so - e.o1 * sx) / n;
  }
  const double L = double(plan.layers);
  e.microbatch_se_s = fit_standard_error(pts, L) / double(l.pp * l.cp);
  const int dp = l.dp > 0 ? l.dp : l.gpus / (l.tp * l.pp * l.cp);
  e.grad_accum = l.global_batch / (l.micro_batch * dp);
  e.microbatch_s = (e.f0 + e.f1 * L) / double(l.pp * l.cp);
  const double experts = plan.expert_share * e.o1 * L;  // the routed experts' state, sharded over edp
  e.optimizer_s = (e.o0 + e.o1 * L - experts) / double(l.pp * dp * l.cp) + experts / double(l.pp * plan.edp);
  e.step_s = e.grad_accum * e.microbatch_s + e.optimizer_s;
  e.tokens_per_s_per_gpu = double(l.global_batch) * l.seq / (e.step_s * l.gpus);
  e.step_se_s = e.grad_accum * e.microbatch_se_s;
  e.tokens_per_s_per_gpu_se = e.step_s > 0 ? e.tokens_per_s_per_gpu * e.step_se_s / e.step_s : 0;
  return e;
}

}  // namespace tb::recipe
