// project/validate.cpp: see validate.h.
#include "project/validate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "core/error.h"
#include "core/stats.h"

namespace tb::project {
namespace {

std::string layout_text(const recipe::Layout& l, int ga) {
  std::string s = fmt::format("tp{} pp{} cp{}", l.tp, l.pp, l.cp);
  if (l.vp > 1) s += fmt::format(" vp{}", l.vp);
  s += fmt::format(" dp{} mb{} GA{}", l.dp, l.micro_batch, ga);
  if (l.proxy) s += fmt::format(" ({}L proxy)", l.layers);
  return s;
}

std::vector<Point> run_cases(const std::vector<Case>& cases, const Context& ctx) {
  std::vector<Point> out;
  out.reserve(cases.size());
  for (const Case& c : cases) {
    Point p{c, project(*c.recipe, c.layout, c.row->precision, ctx, c.convention), 0};
    p.error = p.p.tokens_per_s_per_gpu / c.published - 1;
    out.push_back(std::move(p));
  }
  return out;
}

// Weak-scaling groups: the indices of the full-size (non-proxy) cases of one recipe, release and precision, by GPU
// count; groups of one are left out.
std::vector<std::vector<std::size_t>> scaling_groups(const std::vector<Case>& cases) {
  std::map<std::tuple<std::string, std::string, std::string>, std::vector<std::size_t>> by;
  for (std::size_t i = 0; i < cases.size(); ++i)
    if (!cases[i].layout.proxy) by[{cases[i].recipe->name, cases[i].release, cases[i].row->precision}].push_back(i);
  std::vector<std::vector<std::size_t>> out;
  for (auto& [key, g] : by) {
    if (g.size() < 2) continue;
    std::stable_sort(g.begin(), g.end(),
                     [&](std::size_t a, std::size_t b) { return cases[a].row->gpus < cases[b].row->gpus; });
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace

ErrorStats error_stats(const std::vector<double>& errors) {
  ErrorStats s;
  s.n = int(errors.size());
  if (errors.empty()) return s;
  std::vector<double> a;
  for (double e : errors) a.push_back(std::abs(e));
  s.median = quantile(a, 0.5);
  s.max = *std::max_element(a.begin(), a.end());
  double sum = 0;
  for (double e : a) sum += e;
  s.mean = sum / a.size();
  return s;
}

std::vector<Case> reference_cases(const std::vector<recipe::Recipe>& recipes,
                                  const std::vector<recipe::ReferenceRow>& rows, const Context& ctx,
                                  std::vector<Skip>* skipped) {
  std::vector<Case> out;
  auto skip = [&](const recipe::ReferenceRow& row, std::string why) {
    if (skipped) skipped->push_back({&row, std::move(why)});
  };
  for (const recipe::ReferenceRow& row : rows) {
    if (row.gpu.empty() || ctx.target_name.find(row.gpu) == std::string::npos) continue;  // another GPU model
    const recipe::Recipe* r = recipe::lookup_recipe(recipes, row.recipe);
    if (!r) {
      skip(row, "unknown recipe");
      continue;
    }
    if (!recipe::can_count_flops(*r)) {
      skip(row, "the model's FLOPs cannot be counted yet (mamba)");
      continue;
    }
    if (!r->reference_parallelism.empty()) {
      skip(row, "the reference shards with FSDP (reference_parallelism), not a Megatron layout");
      continue;
    }
    if (r->task != "pretrain") {
      skip(row, "fine-tuning (" + r->task + ")");
      continue;
    }
    Case c;
    c.row = &row, c.recipe = r, c.release = row.release();
    try {
      c.layout = recipe::layout_for(*r, recipe::LayoutQuery(row.gpus, row.precision, c.release));
    } catch (const Error& e) {
      skip(row, std::string("no layout: ") + e.what());
      continue;
    }
    if (c.layout.layers <= 0) c.layout.layers = r->model.layers;
    if (c.layout.seq <= 0) c.layout.seq = r->model.seq;
    if (row.publishes_tokens())
      c.published = row.tokens_per_s_per_gpu();
    else if (row.step_s > 0)
      c.published = double(c.layout.global_batch) * c.layout.seq / row.step_s / row.gpus;
    if (c.published <= 0) {
      skip(row, "neither tokens/s nor step time published");
      continue;
    }
    AnchorKind kind;
    const Measurement* a = choose_anchor(*r, row.precision, c.layout, ctx, &kind);
    if (!a) {
      skip(row, fmt::format("no {} measurement", row.precision));
      continue;
    }
    if (kind == AnchorKind::other) {
      skip(row, fmt::format("no {} measurement of this model or its family", row.precision));
      continue;
    }
    if (r->model.moe.enabled() && kind == AnchorKind::same_family) {  // its MoE layers would be dense proxies' rates
      skip(row, fmt::format("no {} measurement of this mixture of experts", row.precision));
      continue;
    }
    c.primary = a->release.empty() || recipe::compare_releases(c.release, a->release) >= 0;
    c.convention = row.convention.value_or(recipe::Convention::full);
    out.push_back(std::move(c));
  }
  std::stable_sort(out.begin(), out.end(), [](const Case& x, const Case& y) {
    if (x.recipe->name != y.recipe->name) return x.recipe->name < y.recipe->name;
    if (x.row->precision != y.row->precision) return x.row->precision < y.row->precision;
    if (x.release != y.release) return recipe::compare_releases(x.release, y.release) < 0;
    return x.row->gpus < y.row->gpus;
  });
  return out;
}

Validation validate(const std::vector<Case>& cases, const Context& ctx) {
  Validation v;
  v.points = run_cases(cases, ctx);
  std::vector<double> prim, old, all;
  std::map<std::string, std::vector<double>> by_precision;
  for (const Point& p : v.points) {
    (p.c.primary ? prim : old).push_back(p.error);
    if (p.c.primary) by_precision[p.c.row->precision].push_back(p.error);
    all.push_back(p.error);
  }
  v.primary = error_stats(prim), v.older = error_stats(old), v.all = error_stats(all);
  for (const auto& [precision, e] : by_precision) v.primary_by_precision[precision] = error_stats(e);
  // Weak scaling per recipe × release × precision over the full-size runs.
  for (const auto& g : scaling_groups(cases)) {
    const Point& lo = v.points[g.front()];
    const Point& hi = v.points[g.back()];
    ScalingCheck s;
    s.recipe = lo.c.recipe->name, s.release = lo.c.release, s.precision = lo.c.row->precision, s.primary = lo.c.primary;
    s.from_gpus = lo.c.row->gpus, s.to_gpus = hi.c.row->gpus;
    s.published = hi.c.published / lo.c.published;
    s.predicted = hi.p.tokens_per_s_per_gpu / lo.p.tokens_per_s_per_gpu;
    v.scaling.push_back(s);
  }
  return v;
}

std::string render_validation(const Validation& v) {
  std::string s = fmt::format("{:<15} {:<5} {:<9} {:>5}  {:<34} {:>10} {:>10} {:>7}  {}\n", "recipe", "prec", "release",
                              "GPUs", "layout", "published", "predicted", "error", "anchor (same shard unless said)");
  for (const Point& p : v.points)
    s += fmt::format(
        "{:<15} {:<5} {:<9} {:>5}  {:<34} {:>10.1f} {:>10.1f} {:>+6.1f}%  {}{}\n", p.c.recipe->name, p.c.row->precision,
        p.c.release, p.c.row->gpus, layout_text(p.c.layout, p.p.grad_accum), p.c.published, p.p.tokens_per_s_per_gpu,
        100 * p.error, p.p.anchor->recipe,
        p.p.anchor_kind == AnchorKind::same_shard ? "" : fmt::format(" ({})", anchor_kind_name(p.p.anchor_kind)));
  s += "(tokens/s/GPU; error = predicted / published - 1)\n\nper recipe, precision and release:\n";
  std::map<std::tuple<std::string, std::string, std::string>, std::vector<const Point*>> by;
  for (const Point& p : v.points) by[{p.c.recipe->name, p.c.row->precision, p.c.release}].push_back(&p);
  for (const auto& [key, pts] : by) {
    std::vector<double> e;
    std::string list;
    for (const Point* p : pts) {
      e.push_back(p->error);
      list += fmt::format("{}{} {:+.1f}%", list.empty() ? "" : ", ", p->c.row->gpus, 100 * p->error);
    }
    const ErrorStats st = error_stats(e);
    s += fmt::format("  {:<15} {:<5} {:<9} {}: median |error| {:.1f}%, max {:.1f}%{}\n", std::get<0>(key),
                     std::get<1>(key), std::get<2>(key), list, 100 * st.median, 100 * st.max,
                     pts.front()->c.primary ? "" : " (older release)");
  }
  s += "\nweak scaling, tokens/s/GPU at the largest / at the smallest full-size GPU count:\n";
  for (const ScalingCheck& c : v.scaling)
    s += fmt::format(
        "  {:<15} {:<5} {:<9} {:>4} -> {:>4} GPUs: published {:5.1f}%, predicted {:5.1f}%, {:+.1f} points{}\n",
        c.recipe, c.precision, c.release, c.from_gpus, c.to_gpus, 100 * c.published, 100 * c.predicted, c.points(),
        c.primary ? "" : " (older release)");
  s += fmt::format(
      "\nprimary rows (the measured layouts' release and newer): {} rows, median |error| {:.1f}%, max {:.1f}%\n",
      v.primary.n, 100 * v.primary.median, 100 * v.primary.max);
  for (const auto& [precision, st] : v.primary_by_precision)
    s += fmt::format("  {:<5} {} rows, median |error| {:.1f}%, max {:.1f}%\n", precision, st.n, 100 * st.median,
                     100 * st.max);
  if (v.older.n > 0)
    s += fmt::format(
        "older releases (other software, some other layouts):  {} rows, median |error| {:.1f}%, max {:.1f}%\n",
        v.older.n, 100 * v.older.median, 100 * v.older.max);
  s += fmt::format("all rows: {}, median |error| {:.1f}%, max {:.1f}%\n", v.all.n, 100 * v.all.median, 100 * v.all.max);
  if (!v.skipped.empty()) {
    std::map<std::string, int> why;
    for (const Skip& k : v.skipped) {
      std::string reason = k.reason;
      if (reason.starts_with("no layout")) reason = "no layout for the row";
      ++why[reason];
    }
    s += fmt::format("skipped {} rows of this GPU model:", v.skipped.size());
    for (const auto& [reason, n] : why) s += fmt::format(" {} ({}),", reason, n);
    s.back() = '\n';
  }
  return s;
}

Fit fit_calibration(const std::vector<Case>& cases, const Context& base) {
  TB_REQUIRE(!cases.empty(), "calibration: no rows to fit to");
  Fit best;
  best.stats.mean = 1e9;
  Context ctx = base;
  const auto groups = scaling_groups(cases);
  std::vector<double> step(cases.size()), per_sigma(cases.size()), errors(cases.size()), shape;
  // The predicted tokens/s per GPU of case n with straggler constant σ (the delay adds to the step).
  auto tokens = [&](const std::vector<Point>& pts, std::size_t n, double sigma) {
    return pts[n].p.tokens_per_s_per_gpu * step[n] / (step[n] + sigma * per_sigma[n]);
  };
  for (int i = 0; i <= 80; ++i)
    for (int j = 0; j <= 20; ++j) {
      // Each (e, c) is projected once without stragglers, and every σ applied after. σ is the one term that
      // changes with the data-parallel size, so it is fitted to the weak-scaling shape: each full-size row's predicted
      // efficiency against the smallest count of its group, over the published one. Then e and c to the level.
      ctx.cal = {0.70 + 0.005 * i, 0.05 * j, 0};
      const std::vector<Point> pts = run_cases(cases, ctx);
      for (std::size_t n = 0; n < pts.size(); ++n)
        step[n] = pts[n].p.step_s, per_sigma[n] = straggler_delay_s(1, step[n], pts[n].p.layout.dp);
      Fit at{ctx.cal, {}, {.mean = 1e9}};
      for (int k = 0; k <= 40; ++k) {
        const double sigma = 0.005 * k;
        shape.clear();
        for (const auto& g : groups)
          for (std::size_t m = 1; m < g.size(); ++m)
            shape.push_back(tokens(pts, g[m], sigma) / tokens(pts, g[0], sigma) /
                                (cases[g[m]].published / cases[g[0]].published) - 1);
        const ErrorStats st = error_stats(shape);
        if (st.mean < at.shape.mean - 1e-12) at.cal.straggler_sigma_s = sigma, at.shape = st;
        if (groups.empty()) break;  // no shape to fit: no straggler term
      }
      for (std::size_t n = 0; n < pts.size(); ++n)
        errors[n] = tokens(pts, n, at.cal.straggler_sigma_s) / cases[n].published - 1;
      at.stats = error_stats(errors);
      if (at.stats.mean < best.stats.mean - 1e-12) best = at;
    }
  return best;
}

CrossValidation cross_validate(const std::vector<Case>& cases, const Context& ctx) {
  std::vector<Case> prim;
  std::vector<std::string> recipes, precisions;
  auto add = [](std::vector<std::string>& v, const std::string& x) {
    if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
  };
  for (const Case& c : cases)
    if (c.primary) prim.push_back(c), add(recipes, c.recipe->name), add(precisions, c.row->precision);
  TB_REQUIRE(prim.size() >= 4 && recipes.size() >= 2, "cross-validation needs primary rows of two recipes or more");
  CrossValidation cv;
  cv.all = fit_calibration(prim, ctx);
  auto split = [&](std::string name, const std::vector<Case>& train, const std::vector<Case>& test) {
    if (train.empty() || test.empty()) return;
    Split sp;
    sp.trained_on = std::move(name);
    sp.fit = fit_calibration(train, ctx);
    Context c = ctx;
    c.cal = sp.fit.cal;
    const Validation v = validate(test, c);
    sp.held_out = v.all;
    for (const ScalingCheck& k : v.scaling) sp.held_out_points = std::max(sp.held_out_points, std::abs(k.points()));
    cv.splits.push_back(std::move(sp));
  };
  const int n = int(recipes.size()), half = n / 2;
  for (unsigned mask = 0; mask < (1u << n); ++mask) {
    if (__builtin_popcount(mask) != half) continue;  // every half (and, for an even count, its complement)
    std::vector<Case> train, test;
    std::string names;
    for (const Case& c : prim) {
      const int i = int(std::find(recipes.begin(), recipes.end(), c.recipe->name) - recipes.begin());
      ((mask >> i) & 1u ? train : test).push_back(c);
    }
    for (int i = 0; i < n; ++i)
      if ((mask >> i) & 1u) names += (names.empty() ? "" : ", ") + recipes[i];
    split(names, train, test);
  }
  for (int parity = 0; parity < 2; ++parity) {
    std::vector<Case> train, test;
    for (std::size_t i = 0; i < prim.size(); ++i) (int(i % 2) == parity ? train : test).push_back(prim[i]);
    split(parity == 0 ? "even rows" : "odd rows", train, test);
  }
  if (precisions.size() > 1)
    for (const std::string& p : precisions) {
      std::vector<Case> train, test;
      for (const Case& c : prim) (c.row->precision == p ? train : test).push_back(c);
      split(p + " rows", train, test);
    }
  std::vector<double> medians;
  for (const Split& sp : cv.splits) {
    medians.push_back(sp.held_out.median);
    cv.worst_median = std::max(cv.worst_median, sp.held_out.median);
    cv.worst_max = std::max(cv.worst_max, sp.held_out.max);
    cv.worst_points = std::max(cv.worst_points, sp.held_out_points);
  }
  cv.median_of_medians = quantile(medians, 0.5);
  return cv;
}

std::string render_cross_validation(const CrossValidation& cv) {
  std::string s = fmt::format(
      "fit on all {} primary rows: reference_efficiency {:.3f}, overlap_cost {:.2f}, straggler_sigma_ms {:.0f} (mean "
      "|error| {:.1f}%, median {:.1f}%, max {:.1f}%; weak-scaling shape: mean |error| {:.1f}%, max {:.1f}% over {} "
      "rows)\n",
      cv.all.stats.n, cv.all.cal.reference_efficiency, cv.all.cal.overlap_cost, 1e3 * cv.all.cal.straggler_sigma_s,
      100 * cv.all.stats.mean, 100 * cv.all.stats.median, 100 * cv.all.stats.max, 100 * cv.all.shape.mean,
      100 * cv.all.shape.max, cv.all.shape.n);
  s += "cross-validation, fit on the recipes (or rows) listed, error on the primary rows left out:\n";
  for (const Split& sp : cv.splits)
    s += fmt::format(
        "  {:<50} e {:.3f} c {:.2f} sigma {:3.0f} ms -> held out: median {:.1f}%, max {:.1f}%, weak scaling within "
        "{:.1f} points\n",
        sp.trained_on, sp.fit.cal.reference_efficiency, sp.fit.cal.overlap_cost, 1e3 * sp.fit.cal.straggler_sigma_s,
        100 * sp.held_out.median, 100 * sp.held_out.max, sp.held_out_points);
  s += fmt::format(
      "held-out error over the {} splits: median of medians {:.1f}%, worst median {:.1f}%, worst max {:.1f}%, worst "
      "weak-scaling gap {:.1f} points\n",
      cv.splits.size(), 100 * cv.median_of_medians, 100 * cv.worst_median, 100 * cv.worst_max, cv.worst_points);
  return s;
}

}  // namespace tb::project
