// project/train_check.cpp: see train_check.h.
#include "project/train_check.h"

#include <fmt/format.h>

namespace tb::project {
namespace {

bool is_collective(const std::string& op) {
  for (const char* c : {"all-gather", "reduce-scatter", "all-reduce", "send/recv"})
    if (op.find(c) != std::string::npos) return true;
  return false;
}

// The recipe that starts from this model preset (the one of that name first).
const recipe::Recipe* recipe_of_model(const std::vector<recipe::Recipe>& recipes, const std::string& model) {
  if (const recipe::Recipe* r = recipe::lookup_recipe(recipes, model); r && r->preset == model) return r;
  for (const recipe::Recipe& r : recipes)
    if (r.preset == model && !r.shape_overridden) return &r;
  return nullptr;
}

}  // namespace

std::vector<TrainCheck> check_trains(const std::vector<TrainRun>& runs, const Context& source) {
  Context ctx = source;
  ctx.software = Software::trainbench;
  ctx.cal.reference_efficiency = 1;
  ctx.cal.straggler_sigma_s = 0;  // fitted to the reference's multi-second steps on thousands of GPUs, not to these
  std::vector<TrainCheck> out;
  for (const TrainRun& t : runs) {
    TrainCheck c;
    c.run = &t;
    const recipe::Recipe* r = recipe_of_model(*ctx.recipes, t.model);
    if (!r) {
      c.skipped = fmt::format("no recipe starts from model '{}'", t.model);
    } else if (!ctx.cost.contains(t.precision) || !choose_anchor(*r, t.precision, t.layout, ctx)) {
      c.skipped = fmt::format("no {} proxy of {} or its family in --from", t.precision, r->name);
    } else {
      c.recipe = r->name;
      c.p = project(*r, t.layout, t.precision, ctx, recipe::Convention::full);
      c.error = c.p.step_s / t.step_s - 1;
      c.comm_modelled_s =
        c.p.tp_exposed_s + c.p.cp_exposed_s + c.p.ep_exposed_s + c.p.pp_exposed_s + c.p.dp_exposed_s + c.p.bubble_s;
      for (const auto& [op, s] : t.ops_s)
        if (is_collective(op)) c.comm_measured_s += s;
      c.profiled = !t.ops_s.empty();
    }
    out.push_back(std::move(c));
  }
  return out;
}

std::string render_train_checks(const std::vector<TrainCheck>& checks) {
  if (checks.empty()) return "";
  std::string s = fmt::format(
      "measured vs modelled, trainbench's own multi-GPU steps (efficiency 1):\n"
      "  {:<13} {:<5} {:<28} {:>9} {:>9} {:>7}  {:>12} {:>12}  {:>18}\n",
      "model", "prec", "layout", "step ms", "model ms", "error", "tokens/s/GPU", "model", "comm ms meas/model");
  for (const TrainCheck& c : checks) {
    const TrainRun& t = *c.run;
    const auto& l = t.layout;
    const std::string layout =
        fmt::format("dp{} cp{} pp{} tp{} L{} s{} gb{}", l.dp, l.cp, l.pp, l.tp, l.layers, l.seq, l.global_batch);
    if (!c.skipped.empty()) {
      s += fmt::format("  {:<13} {:<5} {:<28} {:>9.1f}  skipped: {}\n", t.model, t.precision, layout, 1e3 * t.step_s,
                       c.skipped);
      continue;
    }
    const std::string comm = c.profiled
                                 ? fmt::format("{:.1f} / {:.1f}", 1e3 * c.comm_measured_s, 1e3 * c.comm_modelled_s)
                                 : fmt::format("- / {:.1f}", 1e3 * c.comm_modelled_s);
    s += fmt::format("  {:<13} {:<5} {:<28} {:>9.1f} {:>9.1f} {:>+6.1f}%  {:>12.0f} {:>12.0f}  {:>18}  {}{}\n", t.model,
                     t.precision, layout, 1e3 * t.step_s, 1e3 * c.p.step_s, 100 * c.error, t.tokens_per_s_per_gpu,
                     c.p.tokens_per_s_per_gpu, comm, t.where,
                     t.recompute == "none" ? "" : fmt::format(" ({} recompute, not modelled)", t.recompute));
  }
  return s;
}

}  // namespace tb::project
