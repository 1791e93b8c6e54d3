// recipe/reference.cpp: loads references/*.toml rows ([[group]] keys + rows), checks them, looks them up.
#include "recipe/reference.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "core/error.h"
#include "core/suggest.h"
#include "recipe/toml_util.h"

namespace tb::recipe {
namespace {

constexpr std::string_view kFileKeys[] = {"schema", "summary", "source", "peak_tflops", "group"};
constexpr std::string_view kGroupKeys[] = {"recipe", "gpu",  "release", "precision", "variant", "flop_convention",
                                           "flops_per_sample", "source", "note", "tolerance", "rows"};
const std::vector<std::string> kPrecisions = {"bf16", "fp8", "fp32"};
constexpr std::string_view kRowKeys[] = {"gpus",          "precision", "step_s",         "tokens_per_s",
                                         "tokens_per_s_per_gpu", "samples_per_s", "mfu_pct", "tflops_per_gpu",
                                         "peak_tflops",   "note",      "time_to_train_min", "global_batch",
                                         "samples_to_target", "evals", "eval_s"};

double positive_number(const std::string& path, const toml::table& t, std::string_view key) {
  const auto v = get_number(path, t, key);
  TB_REQUIRE(!v || *v > 0, fmt::format("{}: '{}' must be positive", where_key(path, t, key), key));
  return v.value_or(0);
}

bool releases_overlap(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  for (const auto& x : a)
    for (const auto& y : b)
      if (release_matches(x, y)) return true;
  return false;
}

}  // namespace

double ReferenceRow::published_tflops_per_gpu() const {
  if (tflops_per_gpu > 0) return tflops_per_gpu;
  return mfu_pct > 0 ? mfu_pct / 100.0 * peak_tflops : 0;
}

std::vector<ReferenceRow> load_references(const std::filesystem::path& file) {
  const std::string path = file.string();
  const toml::table root = parse_toml_file(path);
  reject_unknown_keys(path, root, "the references file", kFileKeys);
  TB_REQUIRE(root["schema"].value<int64_t>() == 1, fmt::format("{}: 'schema = 1' is required", path));

  std::map<std::string, std::map<std::string, double>, std::less<>> peaks;  // GPU model -> precision -> TFLOP/s
  if (const auto* pt = root.get_as<toml::table>("peak_tflops")) {
    for (const auto& [gpu, node] : *pt) {
      const auto* t = node.as_table();
      TB_REQUIRE(t, fmt::format("{}: [peak_tflops] entries are GPU = {{ bf16 = ..., fp8 = ... }}", where(path, node)));
      reject_unknown_keys(path, *t, "[peak_tflops]", {"bf16", "fp8", "fp32"});
      for (const auto& [prec, v] : *t) peaks[std::string(gpu.str())][std::string(prec.str())] = positive_number(path, *t, prec.str());
    }
  }
  std::vector<ReferenceRow> out;
  const toml::node* groups = root.get("group");
  TB_REQUIRE(groups && groups->is_array(), fmt::format("{}: no [[group]] of rows", path));
  for (const auto& ge : *groups->as_array()) {
    const auto* g = ge.as_table();
    TB_REQUIRE(g, fmt::format("{}: each [[group]] entry must be a table", where(path, ge)));
    reject_unknown_keys(path, *g, "[[group]]", kGroupKeys);
    ReferenceRow base;
    base.file = path;
    for (auto [key, field] : {std::pair{"recipe", &base.recipe}, {"gpu", &base.gpu}, {"source", &base.source}}) {
      const auto v = get_string(path, *g, key);
      TB_REQUIRE(v && !v->empty(), fmt::format("{}: [[group]] needs {} = \"...\"", where(path, *g), key));
      *field = *v;
    }
    base.releases = get_strings(path, *g, "release").value_or(std::vector<std::string>{});
    TB_REQUIRE(!base.releases.empty(), fmt::format("{}: [[group]] needs release = \"...\"", where(path, *g)));
    std::sort(base.releases.begin(), base.releases.end(), [](auto& a, auto& b) { return compare_releases(a, b) < 0; });
    base.precision = get_string(path, *g, "precision").value_or("");
    base.variant = get_string(path, *g, "variant").value_or("");
    base.note = get_string(path, *g, "note").value_or("");
    base.flops_per_sample = positive_number(path, *g, "flops_per_sample");
    if (const double tol = positive_number(path, *g, "tolerance"); tol > 0) {
      TB_REQUIRE(tol < 1, fmt::format("{}: tolerance = {} must be a fraction below 1 (0.05: meets within ±5%)",
                                      where_key(path, *g, "tolerance"), tol));
      base.tolerance = tol;
    }
    if (auto c = get_string(path, *g, "flop_convention")) {
      try {
        base.convention = parse_convention(*c);
      } catch (const Error& e) {
        raise_config(fmt::format("{}: {}", where_key(path, *g, "flop_convention"), e.what()));
      }
    }
    const auto* rows = g->get_as<toml::array>("rows");
    TB_REQUIRE(rows && !rows->empty(), fmt::format("{}: [[group]] needs rows = [ {{ gpus = ..., ... }}, ... ]", where(path, *g)));
    for (const auto& re : *rows) {
      const auto* t = re.as_table();
      TB_REQUIRE(t, fmt::format("{}: each row must be a table {{ gpus = ..., ... }}", where(path, re)));
      reject_unknown_keys(path, *t, "the row", kRowKeys);
      ReferenceRow r = base;
      r.where = where(path, *t);
      const auto gpus = get_int(path, *t, "gpus");
      TB_REQUIRE(gpus && *gpus > 0, fmt::format("{}: the row needs gpus = <a positive count>", r.where));
      r.gpus = int(*gpus);
      if (auto p = get_string(path, *t, "precision")) r.precision = *p;
      TB_REQUIRE(!r.precision.empty(), fmt::format("{}: the row needs a precision (in the row or its [[group]])", r.where));
      TB_REQUIRE(std::find(kPrecisions.begin(), kPrecisions.end(), r.precision) != kPrecisions.end(),
                 fmt::format("{}: precision '{}' is not one of bf16, fp8, fp32{}", r.where, r.precision,
                             did_you_mean(r.precision, kPrecisions)));
      r.step_s = positive_number(path, *t, "step_s");
      r.tokens_per_s = positive_number(path, *t, "tokens_per_s");
      r.tokens_per_s_gpu = positive_number(path, *t, "tokens_per_s_per_gpu");
      TB_REQUIRE(r.tokens_per_s == 0 || r.tokens_per_s_gpu == 0,
                 fmt::format("{}: give tokens_per_s (the job) or tokens_per_s_per_gpu, as published, not both", r.where));
      r.samples_per_s = positive_number(path, *t, "samples_per_s");
      r.mfu_pct = positive_number(path, *t, "mfu_pct");
      r.tflops_per_gpu = positive_number(path, *t, "tflops_per_gpu");
      if (auto n = get_string(path, *t, "note")) r.note = *n;
      r.time_to_train_min = positive_number(path, *t, "time_to_train_min");
      r.global_batch = int(positive_number(path, *t, "global_batch"));
      r.samples_to_target = positive_number(path, *t, "samples_to_target");
      r.evals = positive_number(path, *t, "evals");
      r.eval_s = positive_number(path, *t, "eval_s");
      TB_REQUIRE(r.time_to_train_min == 0 || (r.global_batch > 0 && r.samples_to_target > 0),
                 fmt::format("{}: a time-to-train row needs its global_batch and samples_to_target", r.where));
      TB_REQUIRE(r.mfu_pct < 100, fmt::format("{}: mfu_pct = {} is not a percentage below 100", where_key(path, *t, "mfu_pct"), r.mfu_pct));
      TB_REQUIRE(r.step_s > 0 || r.publishes_tokens() || r.samples_per_s > 0 || r.time_to_train_min > 0,
                 fmt::format("{}: the row publishes no throughput (step_s, tokens_per_s, tokens_per_s_per_gpu or "
                             "samples_per_s) and no time_to_train_min", r.where));
      r.peak_tflops = positive_number(path, *t, "peak_tflops");
      if (r.peak_tflops == 0 && (r.mfu_pct > 0 || r.tflops_per_gpu > 0)) {
        const auto gi = peaks.find(r.gpu);
        TB_REQUIRE(gi != peaks.end() && gi->second.contains(r.precision),
                   fmt::format("{}: MFU needs a peak: add [peak_tflops] {} = {{ {} = ... }}", r.where, r.gpu, r.precision));
        r.peak_tflops = gi->second.at(r.precision);
      }
      TB_REQUIRE(r.convention || (r.mfu_pct == 0 && r.tflops_per_gpu == 0),
                 fmt::format("{}: MFU or TFLOP/s needs the group's flop_convention (full, causal, full-mha, linear)", r.where));
      out.push_back(std::move(r));
    }
  }
  return out;
}

std::vector<ReferenceRow> load_reference_dir(const std::filesystem::path& dir) {
  std::vector<ReferenceRow> out;
  for (const auto& f : toml_files(dir)) {
    auto rows = load_references(f);
    out.insert(out.end(), rows.begin(), rows.end());
  }
  for (size_t i = 0; i < out.size(); ++i)
    for (size_t j = 0; j < i; ++j) {
      const auto &a = out[i], &b = out[j];
      TB_REQUIRE(!(a.recipe == b.recipe && a.gpu == b.gpu && a.precision == b.precision && a.variant == b.variant &&
                   a.gpus == b.gpus && releases_overlap(a.releases, b.releases)),
                 fmt::format("{}: a second row for {} {} {} GPUs {} release {} (the first is at {})", a.where, a.recipe,
                             a.gpu, a.gpus, a.precision, a.release(), b.where));
    }
  return out;
}

void check_references(const std::vector<ReferenceRow>& rows, const std::vector<Recipe>& recipes) {
  std::vector<std::string> names;
  for (const auto& r : recipes) names.push_back(r.name);
  for (const auto& row : rows) {
    const auto it = std::find_if(recipes.begin(), recipes.end(), [&](const Recipe& r) { return r.name == row.recipe; });
    TB_REQUIRE(it != recipes.end(),
               fmt::format("{}: unknown recipe '{}'{}", row.where, row.recipe, did_you_mean(row.recipe, names)));
    TB_REQUIRE(std::find(it->precisions.begin(), it->precisions.end(), row.precision) != it->precisions.end(),
               fmt::format("{}: recipe '{}' has no precision '{}'{}", row.where, row.recipe, row.precision,
                           did_you_mean(row.precision, it->precisions)));
  }
}

namespace {
bool admits(const ReferenceRow& r, const ReferenceQuery& q) {
  if (r.recipe != q.recipe || r.precision != q.precision || r.gpu != q.gpu || r.variant != q.variant) return false;
  return q.release.empty() ||
         std::any_of(r.releases.begin(), r.releases.end(), [&](const auto& x) { return release_matches(x, q.release); });
}
}  // namespace

const ReferenceRow* find_reference(const std::vector<ReferenceRow>& rows, const ReferenceQuery& q) {
  const ReferenceRow* best = nullptr;
  for (const auto& r : rows)
    if (admits(r, q) && r.gpus == q.gpus && (!best || compare_releases(r.release(), best->release()) > 0)) best = &r;
  return best;
}

std::vector<int> reference_gpu_counts(const std::vector<ReferenceRow>& rows, const ReferenceQuery& q) {
  std::vector<int> out;
  for (const auto& r : rows)
    if (admits(r, q)) out.push_back(r.gpus);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace tb::recipe
