// recipe/layout.cpp: checks a parallel layout against its model (the mesh multiplies out to the world,
// heads, layers, sequence and batch divide as Megatron requires) and picks or derives the layout of a run.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "core/error.h"
#include "recipe/recipe.h"

namespace tb::recipe {
namespace {

std::vector<std::string_view> components(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == '.') {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  return out;
}

// Numeric when both parse ("04" == "4"), else textual.
int compare_component(std::string_view a, std::string_view b) {
  long x = 0, y = 0;
  const auto ra = std::from_chars(a.data(), a.data() + a.size(), x);
  const auto rb = std::from_chars(b.data(), b.data() + b.size(), y);
  if (ra.ec == std::errc() && ra.ptr == a.data() + a.size() && rb.ec == std::errc() && rb.ptr == b.data() + b.size())
    return x < y ? -1 : x > y ? 1 : 0;
  return a.compare(b) < 0 ? -1 : a.compare(b) > 0 ? 1 : 0;
}

std::string list(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s.empty() ? "none" : s;
}

struct Resolved {
  LayoutQuery q;
  bool admits(const Layout& l) const {
    if (!l.precision.empty() && l.precision != q.precision) return false;
    if (!l.gpu.empty() && l.gpu != q.gpu) return false;
    if (l.variant != q.variant) return false;
    if (l.releases.empty() || q.release.empty()) return true;
    return std::any_of(l.releases.begin(), l.releases.end(), [&](const auto& r) { return release_matches(r, q.release); });
  }
};

int specificity(const Layout& l) { return !l.precision.empty() + !l.releases.empty() + !l.gpu.empty(); }

Resolved resolve(const Recipe& r, const LayoutQuery& q) {
  Resolved out{q};
  if (out.q.precision.empty()) out.q.precision = r.precisions.front();
  if (std::find(r.precisions.begin(), r.precisions.end(), out.q.precision) == r.precisions.end()) {
    std::string all;
    for (const auto& p : r.precisions) all += (all.empty() ? "" : ", ") + p;
    raise_config(fmt::format("recipe '{}' has no precision '{}' (it has {})", r.name, out.q.precision, all));
  }
  if (out.q.release.empty()) out.q.release = r.release;
  return out;
}

std::string describe(const LayoutQuery& q) {
  std::string s = q.precision;
  if (!q.release.empty()) s += ", release " + q.release;
  if (!q.gpu.empty()) s += ", " + q.gpu;
  if (!q.variant.empty()) s += ", variant " + q.variant;
  return s;
}

}  // namespace

bool release_matches(std::string_view a, std::string_view b) {
  const auto x = components(a), y = components(b);
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i)
    if (compare_component(x[i], y[i]) != 0) return false;
  return !a.empty() && !b.empty();
}

int compare_releases(std::string_view a, std::string_view b) {
  const auto x = components(a), y = components(b);
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i)
    if (int c = compare_component(x[i], y[i])) return c;
  return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
}

void validate_layout(const Recipe& r, Layout& l) {
  const auto fail = [&](const std::string& msg) { raise_config(fmt::format("{}: {}", l.where, msg)); };
  const auto& m = r.model;
  const int mesh = l.tp * l.pp * l.cp;
  if (l.dp > 0) {
    if (l.dp * mesh != l.gpus)
      fail(fmt::format("world {} != dp·cp·pp·tp = {}·{}·{}·{} = {}", l.gpus, l.dp, l.cp, l.pp, l.tp, l.dp * mesh));
  } else {
    if (l.gpus % mesh != 0)
      fail(fmt::format("{} GPUs are not a multiple of tp·pp·cp = {}·{}·{} = {} (dp = gpus / (tp·pp·cp) must be whole)",
                       l.gpus, l.tp, l.pp, l.cp, mesh));
    l.dp = l.gpus / mesh;
  }
  if (m.heads % l.tp != 0) fail(fmt::format("heads={} is not divisible by tp={} (a tensor-parallel rank holds whole heads)", m.heads, l.tp));
  if (m.kv_heads % l.tp != 0)
    fail(fmt::format("kv_heads={} is not divisible by tp={} (a tensor-parallel rank holds whole KV heads)", m.kv_heads, l.tp));
  if (l.layers > m.layers) fail(fmt::format("layers={} exceeds the model's {} (a proxy has fewer layers, never more)", l.layers, m.layers));
  if (l.seq > m.seq) fail(fmt::format("seq={} exceeds the recipe's {} (a proxy has a shorter sequence, never longer)", l.seq, m.seq));
  if (l.vp > 1 && l.pp == 1) fail(fmt::format("vp={} needs pipeline parallelism (pp > 1)", l.vp));
  if (l.pp > 1 && !l.pp_uneven) {
    const int units = l.layers + (l.pp_counts_embedding ? 2 : 0);
    if (units % (l.pp * l.vp) != 0)
      fail(fmt::format("{} layers{} do not split evenly over pp·vp = {}·{} = {} stages", l.layers,
                       l.pp_counts_embedding ? " (+2: embedding and loss)" : "", l.pp, l.vp, l.pp * l.vp));
  }
  if (l.cp > 1 && l.seq % (2 * l.cp) != 0)
    fail(fmt::format("seq={} is not divisible by 2·cp = {} (context parallel cuts each sequence into 2·cp chunks)", l.seq, 2 * l.cp));
  if (l.sequence_parallel && l.tp == 1) fail("sequence_parallel needs tp > 1");
  if (l.sequence_parallel && (l.seq / l.cp) % l.tp != 0)
    fail(fmt::format("seq/cp = {} is not divisible by tp={} (sequence parallel splits a rank's tokens over tp)", l.seq / l.cp, l.tp));
  if (l.global_batch % (l.micro_batch * l.dp) != 0)
    fail(fmt::format("global_batch={} is not divisible by micro_batch·dp = {}·{} = {}", l.global_batch, l.micro_batch, l.dp,
                     l.micro_batch * l.dp));
  if ((l.ep > 1 || l.etp > 0) && r.model.moe.experts == 0)
    fail(fmt::format("{} but the model has no experts", l.ep > 1 ? fmt::format("ep={}", l.ep) : fmt::format("etp={}", l.etp)));
  if (r.model.moe.experts > 0) {
    if (r.model.moe.experts % l.ep != 0)
      fail(fmt::format("experts={} is not divisible by ep={}", r.model.moe.experts, l.ep));
    const int stage = l.gpus / l.pp;
    if (stage % (l.ep * l.expert_tp()) != 0)
      fail(fmt::format("ep·etp = {}·{} = {} does not divide the {} GPUs of a pipeline stage (tp·cp·dp)", l.ep, l.expert_tp(),
                       l.ep * l.expert_tp(), stage));
    if (r.model.expert_ffn() % l.expert_tp() != 0)
      fail(fmt::format("expert_ffn={} is not divisible by etp={} (expert tensor parallel splits each expert's width)",
                       r.model.expert_ffn(), l.expert_tp()));
    if (r.model.moe.shared_ffn % l.tp != 0)
      fail(fmt::format("shared_ffn={} is not divisible by tp={} (the shared experts are tensor parallel)",
                       r.model.moe.shared_ffn, l.tp));
    if (l.tp > 1 && !l.sequence_parallel)
      fail(fmt::format("a mixture of experts with tp={} needs sequence_parallel (Megatron-Core routes each tp rank's "
                       "own tokens)",
                       l.tp));
  }
}

Layout layout_for(const Recipe& r, const LayoutQuery& query) {
  TB_REQUIRE(query.gpus > 0, fmt::format("recipe '{}': the GPU count must be positive", r.name));
  const Resolved q = resolve(r, query);
  const Layout* exact = nullptr;
  int best = -1;
  for (const auto& l : r.layouts) {
    if (!q.admits(l)) continue;
    best = std::max(best, specificity(l));
    if (l.gpus == query.gpus && (!exact || specificity(l) > specificity(*exact))) exact = &l;
  }
  if (exact) return *exact;
  TB_REQUIRE(best >= 0, fmt::format("recipe '{}' has no layout for {}", r.name, describe(q.q)));
  // Derive from the nearest listed full-size run of the most specific kind: the largest below, else the smallest.
  const Layout* base = nullptr;
  for (const auto& l : r.layouts) {
    if (!q.admits(l) || l.proxy || specificity(l) != best) continue;
    const bool below = l.gpus < query.gpus;
    if (!base) base = &l;
    else if (below && (base->gpus > query.gpus || l.gpus > base->gpus)) base = &l;
    else if (!below && base->gpus > query.gpus && l.gpus < base->gpus) base = &l;
  }
  const auto counts = layout_gpu_counts(r, query);
  TB_REQUIRE(base, fmt::format("recipe '{}' has no layout for {} GPUs ({}); listed: {}", r.name, query.gpus, describe(q.q),
                               list(counts)));
  Layout d = *base;
  d.gpus = query.gpus;
  d.dp = 0;
  d.derived = true;
  d.note = fmt::format("derived from the {}-GPU layout at {} by {} scaling", base->gpus, base->where, scaling_name(base->scaling));
  const long gbs = long(base->global_batch) * query.gpus;
  if (base->scaling == Scaling::weak) {
    TB_REQUIRE(gbs % base->gpus == 0,
               fmt::format("recipe '{}' has no layout for {} GPUs: weak scaling of global_batch {} at {} GPUs is not whole; listed: {}",
                           r.name, query.gpus, base->global_batch, base->gpus, list(counts)));
    d.global_batch = int(gbs / base->gpus);
  }
  try {
    validate_layout(r, d);
  } catch (const Error& e) {
    std::string why = e.what();
    if (why.starts_with(d.where + ": ")) why = why.substr(d.where.size() + 2);
    raise_config(fmt::format("recipe '{}' has no layout for {} GPUs: the {}-GPU layout ({}) scaled to {} GPUs fails: {}; listed: {}",
                             r.name, query.gpus, base->gpus, base->where, query.gpus, why, list(counts)));
  }
  return d;
}

std::vector<int> layout_gpu_counts(const Recipe& r, const LayoutQuery& query) {
  const Resolved q = resolve(r, query);
  std::vector<int> out;
  for (const auto& l : r.layouts)
    if (q.admits(l)) out.push_back(l.gpus);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace tb::recipe
