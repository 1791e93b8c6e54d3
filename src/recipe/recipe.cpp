// recipe/recipe.cpp: loads recipes/*.toml into Recipe: top-level keys, [model] (preset + overrides),
// [lora], and [[layout]] tables (with their `runs`) flattened to one Layout per run. Layout checks and
// lookup are in layout.cpp.
#include "recipe/recipe.h"
#include "recipe/system.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "core/suggest.h"
#include "recipe/toml_util.h"

namespace tb::recipe {
namespace {

constexpr std::string_view kRecipeKeys[] = {
    "schema", "name",   "summary", "default", "task",    "framework", "dataset", "data",
    "release", "precisions", "needs", "scaling", "reference_parallelism", "sources", "model", "lora", "layout"};
// The MoE keys are model/config_override.cpp's --set names (router_normalize, routed_scale: the MoeConfig fields
// normalize, scale).
constexpr std::string_view kModelKeys[] = {
    "preset",       "seq",          "layers",     "d_model",          "ffn",          "heads",
    "kv_heads",     "head_dim",     "vocab",      "experts",          "top_k",        "expert_ffn",
    "shared_ffn",   "dense_first",  "moe_every",  "routing",          "router_score", "router_normalize",
    "routed_scale", "aux_loss",     "seq_aux_loss", "z_loss",         "capacity_factor", "pad_to_capacity",
    "bias_update_rate"};
// Keys a [[layout]] table and each of its runs share; the table adds its filters and `runs`.
constexpr std::string_view kRunKeys[] = {"gpus", "global_batch", "tp",     "pp",   "cp",   "vp",
                                         "ep",   "etp",          "dp",     "micro_batch", "sequence_parallel",
                                         "pp_counts_embedding", "pp_uneven", "layers", "seq", "note"};
constexpr std::string_view kFilterKeys[] = {"release", "precision", "gpu", "variant", "scaling", "source", "runs"};

const std::vector<std::string> kPrecisions = {"bf16", "fp8", "fp32"};
const std::vector<std::string> kNeeds = {"mamba"};
const std::vector<std::string> kTasks = {"pretrain", "sft", "lora"};
// The synthetic data a recipe may name (train/data.h); `run --data` also takes files.
const std::vector<std::string> kData = {"markov", "copy", "random", "packed-squad", "packed-govreport"};
const std::vector<std::string> kScalings = {"weak", "strong"};

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// value must be one of `allowed`; the error names the key's line and the nearest allowed value.
void require_one_of(const std::string& at, std::string_view what, const std::string& value,
                    const std::vector<std::string>& allowed) {
  if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) return;
  raise_config(fmt::format("{}: {} '{}' is not one of {}{}", at, what, value, join(allowed), did_you_mean(value, allowed)));
}

int positive(const std::string& path, const toml::table& t, std::string_view key, int fallback) {
  const auto v = get_int(path, t, key);
  if (!v) return fallback;
  TB_REQUIRE(*v >= 1 && *v <= (1 << 30), fmt::format("{}: '{}' must be a positive integer", where_key(path, t, key), key));
  return int(*v);
}

Scaling parse_scaling(const std::string& at, const std::string& s) {
  require_one_of(at, "scaling", s, kScalings);
  return s == "weak" ? Scaling::weak : Scaling::strong;
}

// The [model] table's MoE keys over the preset's (model/config.h MoeConfig).
void read_moe(const std::string& path, const toml::table& m, model::MoeConfig& moe) {
  moe.experts = positive(path, m, "experts", moe.experts);
  moe.top_k = positive(path, m, "top_k", moe.top_k);
  TB_REQUIRE((moe.experts == 0) == (moe.top_k == 0),
             fmt::format("{}: a mixture of experts needs both experts and top_k", where(path, m)));
  TB_REQUIRE(moe.top_k <= moe.experts,
             fmt::format("{}: top_k={} exceeds experts={}", where_key(path, m, "top_k"), moe.top_k, moe.experts));
  moe.expert_ffn = positive(path, m, "expert_ffn", moe.expert_ffn);
  if (const auto v = get_int(path, m, "shared_ffn")) {
    TB_REQUIRE(*v >= 0 && *v < (1 << 30),
               fmt::format("{}: 'shared_ffn' must be an integer >= 0 (0: no shared expert)", where_key(path, m, "shared_ffn")));
    moe.shared_ffn = int(*v);
  }
  if (const auto v = get_int(path, m, "dense_first")) {
    TB_REQUIRE(*v >= 0 && *v < (1 << 20),
               fmt::format("{}: 'dense_first' must be an integer >= 0", where_key(path, m, "dense_first")));
    moe.dense_first = int(*v);
  }
  moe.every = positive(path, m, "moe_every", moe.every);
  if (const auto s = get_string(path, m, "routing")) {
    require_one_of(where_key(path, m, "routing"), "routing", *s, {"learned", "balanced"});
    moe.routing = *s == "learned" ? model::Routing::learned : model::Routing::balanced;
  }
  if (const auto s = get_string(path, m, "router_score")) {
    require_one_of(where_key(path, m, "router_score"), "router_score", *s, {"softmax", "sigmoid"});
    moe.score = *s == "softmax" ? model::RouterScore::softmax : model::RouterScore::sigmoid;
  }
  moe.normalize = get_bool(path, m, "router_normalize").value_or(moe.normalize);
  for (auto [key, field] : {std::pair{"aux_loss", &moe.aux_loss}, {"seq_aux_loss", &moe.seq_aux_loss},
                            {"z_loss", &moe.z_loss}, {"capacity_factor", &moe.capacity_factor},
                            {"routed_scale", &moe.scale}, {"bias_update_rate", &moe.bias_update_rate}}) {
    const auto v = get_number(path, m, key);
    if (!v) continue;
    TB_REQUIRE(*v >= 0, fmt::format("{}: '{}' must be >= 0", where_key(path, m, key), key));
    *field = *v;
  }
  moe.pad_to_capacity = get_bool(path, m, "pad_to_capacity").value_or(moe.pad_to_capacity);
}

void read_model(const std::string& path, const toml::table& root, Recipe& r) {
  const auto* m = root.get_as<toml::table>("model");
  TB_REQUIRE(m, fmt::format("{}: missing table [model] (preset = \"...\", seq = ...)", path));
  reject_unknown_keys(path, *m, "[model]", kModelKeys);
  const auto preset = get_string(path, *m, "preset");
  TB_REQUIRE(preset, fmt::format("{}: [model] needs preset = \"<name>\" (a preset of src/model/config.cpp)", where(path, *m)));
  try {
    r.model = model::preset(*preset);
  } catch (const Error& e) {
    raise_config(fmt::format("{}: {}", where_key(path, *m, "preset"), e.what()));
  }
  r.preset = *preset;
  auto& c = r.model;
  c.seq = positive(path, *m, "seq", c.seq);
  const int heads_before = c.heads, d_before = c.d_model;
  for (auto [key, field] : {std::pair{"layers", &c.layers}, {"d_model", &c.d_model}, {"ffn", &c.ffn}, {"heads", &c.heads},
                            {"kv_heads", &c.kv_heads}, {"head_dim", &c.head_dim}, {"vocab", &c.vocab}}) {
    if (!m->contains(key)) continue;
    *field = positive(path, *m, key, *field);
    r.shape_overridden = true;
  }
  if (!m->contains("head_dim") && (c.heads != heads_before || c.d_model != d_before)) {
    TB_REQUIRE(c.d_model % c.heads == 0,
               fmt::format("{}: d_model={} is not a multiple of heads={}: give head_dim", where(path, *m), c.d_model, c.heads));
    c.head_dim = c.d_model / c.heads;
  }
  if (r.shape_overridden) c.name = r.name;
  read_moe(path, *m, c.moe);
  try {
    c.validate();
  } catch (const Error& e) {
    raise_config(fmt::format("{}: {}", where(path, *m), e.what()));
  }
}

// The keys a [[layout]] table and its runs share, applied over `l`. sp: sequence_parallel if given.
void read_run_keys(const std::string& path, const toml::table& t, Layout& l, std::optional<bool>& sp) {
  l.where = where(path, t);
  l.gpus = positive(path, t, "gpus", l.gpus);
  l.global_batch = positive(path, t, "global_batch", l.global_batch);
  l.tp = positive(path, t, "tp", l.tp);
  l.pp = positive(path, t, "pp", l.pp);
  l.cp = positive(path, t, "cp", l.cp);
  l.vp = positive(path, t, "vp", l.vp);
  l.ep = positive(path, t, "ep", l.ep);
  l.etp = positive(path, t, "etp", l.etp);
  l.dp = positive(path, t, "dp", l.dp);
  l.micro_batch = positive(path, t, "micro_batch", l.micro_batch);
  l.layers = positive(path, t, "layers", l.layers);
  l.seq = positive(path, t, "seq", l.seq);
  if (auto v = get_bool(path, t, "sequence_parallel")) sp = v;
  if (auto v = get_bool(path, t, "pp_counts_embedding")) l.pp_counts_embedding = *v;
  if (auto v = get_bool(path, t, "pp_uneven")) l.pp_uneven = *v;
  if (auto v = get_string(path, t, "note")) l.note = *v;
}

void finish_run(const std::string& path, const toml::table& t, const Recipe& r, Layout& l, std::optional<bool> sp) {
  TB_REQUIRE(l.gpus > 0, fmt::format("{}: missing key 'gpus' (in the [[layout]] or in each of its runs)", where(path, t)));
  TB_REQUIRE(l.global_batch > 0, fmt::format("{}: missing key 'global_batch' (in the [[layout]] or in each of its runs)",
                                             where(path, t)));
  l.sequence_parallel = sp.value_or(l.tp > 1);
  if (l.layers == 0) l.layers = r.model.layers;
  if (l.seq == 0) l.seq = r.model.seq;
  l.proxy = l.layers < r.model.layers || l.seq < r.model.seq;
  validate_layout(r, l);
}

void read_layouts(const std::string& path, const toml::table& root, Recipe& r) {
  const toml::node* node = root.get("layout");
  TB_REQUIRE(node, fmt::format("{}: no [[layout]]: a recipe lists at least one parallel layout", path));
  const auto* arr = node->as_array();
  TB_REQUIRE(arr, fmt::format("{}: 'layout' must be an array of tables ([[layout]])", where(path, *node)));
  std::vector<std::string_view> table_keys(std::begin(kRunKeys), std::end(kRunKeys));
  table_keys.insert(table_keys.end(), std::begin(kFilterKeys), std::end(kFilterKeys));
  for (const auto& e : *arr) {
    const auto* t = e.as_table();
    TB_REQUIRE(t, fmt::format("{}: each [[layout]] entry must be a table", where(path, e)));
    reject_unknown_keys(path, *t, "[[layout]]", table_keys);
    Layout proto;
    proto.scaling = r.scaling;
    if (auto v = get_string(path, *t, "precision")) {
      require_one_of(where_key(path, *t, "precision"), "precision", *v, r.precisions);
      proto.precision = *v;
    }
    if (auto v = get_strings(path, *t, "release")) proto.releases = *v;
    if (auto v = get_string(path, *t, "gpu")) proto.gpu = *v;
    if (auto v = get_string(path, *t, "variant")) proto.variant = *v;
    if (auto v = get_string(path, *t, "scaling")) proto.scaling = parse_scaling(where_key(path, *t, "scaling"), *v);
    if (auto v = get_string(path, *t, "source")) proto.source = *v;
    std::optional<bool> sp;
    read_run_keys(path, *t, proto, sp);
    const size_t first = r.layouts.size();
    if (const toml::node* runs = t->get("runs")) {
      TB_REQUIRE(!t->contains("gpus") && !t->contains("global_batch"),
                 fmt::format("{}: give gpus and global_batch either in the [[layout]] or in each of its runs", where(path, *t)));
      const auto* ra = runs->as_array();
      TB_REQUIRE(ra, fmt::format("{}: 'runs' must be a list of tables: runs = [ {{ gpus = 8, global_batch = 128 }}, ... ]",
                                 where(path, *runs)));
      for (const auto& re : *ra) {
        const auto* rt = re.as_table();
        TB_REQUIRE(rt, fmt::format("{}: each run must be a table {{ gpus = ..., global_batch = ... }}", where(path, re)));
        reject_unknown_keys(path, *rt, "the run", kRunKeys);
        Layout l = proto;
        std::optional<bool> run_sp = sp;
        read_run_keys(path, *rt, l, run_sp);
        finish_run(path, *rt, r, l, run_sp);
        r.layouts.push_back(std::move(l));
      }
    } else {
      finish_run(path, *t, r, proto, sp);
      r.layouts.push_back(std::move(proto));
    }
    // The table's full-size runs must follow its scaling rule (catches a mistyped global batch).
    const Layout* anchor = nullptr;
    for (size_t i = first; i < r.layouts.size(); ++i) {
      const Layout& l = r.layouts[i];
      if (l.proxy) continue;
      if (!anchor) {
        anchor = &l;
        continue;
      }
      const long want = l.scaling == Scaling::weak ? long(anchor->global_batch) * l.gpus / anchor->gpus : anchor->global_batch;
      const bool ok = l.scaling == Scaling::weak ? long(l.global_batch) * anchor->gpus == long(anchor->global_batch) * l.gpus
                                                 : l.global_batch == anchor->global_batch;
      TB_REQUIRE(ok, fmt::format("{}: global_batch {} at {} GPUs breaks {} scaling (global_batch {} at {} GPUs gives {} here)",
                                 l.where, l.global_batch, l.gpus, scaling_name(l.scaling), anchor->global_batch,
                                 anchor->gpus, want));
    }
  }
}

bool releases_overlap(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  if (a.empty() || b.empty()) return a.empty() && b.empty();
  for (const auto& x : a)
    for (const auto& y : b)
      if (release_matches(x, y)) return true;
  return false;
}

// [lora]: the keys of train's --lora-* flags, checked against the model (a rank above a target's min(in, out) names
// the table's line). The task's FLOP convention (2/3 for LoRA) must describe what runs: adapters exactly when the
// task is LoRA.
void read_lora(const std::string& path, const toml::table& root, Recipe& r) {
  const auto* lora = root.get_as<toml::table>("lora");
  TB_REQUIRE(lora || r.task != "lora",
             fmt::format("{}: task = \"lora\" trains adapters: add a [lora] table with their rank (and alpha, dropout "
                         "and targets as the reference ran them)",
                         where_key(path, root, "task")));
  if (!lora) return;
  TB_REQUIRE(r.task == "lora", fmt::format("{}: [lora] trains adapters, a LoRA fine-tune: set task = \"lora\" (its "
                                           "FLOPs count 2/3 of full training) or drop [lora]",
                                           where(path, *lora)));
  reject_unknown_keys(path, *lora, "[lora]", {"rank", "alpha", "dropout", "targets"});
  r.lora.rank = positive(path, *lora, "rank", 0);
  TB_REQUIRE(r.lora.rank > 0, fmt::format("{}: [lora] needs rank = <a positive integer>", where(path, *lora)));
  r.lora.alpha = get_number(path, *lora, "alpha").value_or(0);
  r.lora.dropout = get_number(path, *lora, "dropout").value_or(0);
  TB_REQUIRE(r.lora.alpha >= 0 && r.lora.dropout >= 0 && r.lora.dropout < 1,
             fmt::format("{}: [lora] alpha must be >= 0 (0: 2 x rank) and dropout in [0, 1)", where(path, *lora)));
  if (const auto targets = get_string(path, *lora, "targets")) {
    try {
      r.lora.targets = model::parse_lora_targets(*targets);
    } catch (const Error& e) {
      raise_config(fmt::format("{}: {}", where_key(path, *lora, "targets"), e.what()));
    }
  }
  model::ModelConfig with = r.model;
  with.lora = r.lora;
  try {
    model::validate_lora(with);
  } catch (const Error& e) {
    raise_config(fmt::format("{}: {}", where(path, *lora), e.what()));
  }
}

}  // namespace

std::string_view scaling_name(Scaling s) { return s == Scaling::weak ? "weak" : "strong"; }

bool Recipe::needs_feature(std::string_view f) const {
  return std::find(needs.begin(), needs.end(), f) != needs.end();
}

Recipe load_recipe(const std::filesystem::path& file) {
  const std::string path = file.string();
  const toml::table root = parse_toml_file(path);
  reject_unknown_keys(path, root, "the recipe", kRecipeKeys);
  TB_REQUIRE(root["schema"].value<int64_t>() == 1, fmt::format("{}: 'schema = 1' is required", path));

  Recipe r;
  r.file = path;
  const auto name = get_string(path, root, "name");
  TB_REQUIRE(name, fmt::format("{}: missing key 'name'", path));
  TB_REQUIRE(*name == file.stem().string(), fmt::format("{}: name '{}' differs from the file name '{}'",
                                                        where_key(path, root, "name"), *name, file.filename().string()));
  r.name = *name;
  const auto summary = get_string(path, root, "summary");
  TB_REQUIRE(summary, fmt::format("{}: missing key 'summary' (one line: what this workload is)", path));
  r.summary = *summary;
  r.is_default = get_bool(path, root, "default").value_or(false);
  r.task = get_string(path, root, "task").value_or("pretrain");
  require_one_of(where_key(path, root, "task"), "task", r.task, kTasks);
  r.framework = get_string(path, root, "framework").value_or("");
  r.dataset = get_string(path, root, "dataset").value_or("");
  r.data = get_string(path, root, "data").value_or(r.task == "pretrain" ? "markov" : "packed-squad");
  require_one_of(where_key(path, root, "data"), "data", r.data, kData);
  r.reference_parallelism = get_string(path, root, "reference_parallelism").value_or("");
  r.release = get_string(path, root, "release").value_or("");
  r.precisions = get_strings(path, root, "precisions").value_or(std::vector<std::string>{});
  TB_REQUIRE(!r.precisions.empty(), fmt::format("{}: missing key 'precisions' (e.g. [\"bf16\", \"fp8\"])", path));
  for (const auto& p : r.precisions) require_one_of(where_key(path, root, "precisions"), "precision", p, kPrecisions);
  r.needs = get_strings(path, root, "needs").value_or(std::vector<std::string>{});
  for (const auto& n : r.needs) require_one_of(where_key(path, root, "needs"), "need", n, kNeeds);
  if (auto s = get_string(path, root, "scaling")) r.scaling = parse_scaling(where_key(path, root, "scaling"), *s);
  r.sources = get_strings(path, root, "sources").value_or(std::vector<std::string>{});
  TB_REQUIRE(!r.sources.empty(), fmt::format("{}: missing key 'sources' (where the shapes and layouts come from)", path));
  TB_REQUIRE(!r.is_default || r.runnable(), fmt::format("{}: the default recipe must be runnable (it needs {})",
                                                        where_key(path, root, "default"), join(r.needs)));

  read_model(path, root, r);
  read_lora(path, root, r);
  read_layouts(path, root, r);

  bool tagged = false, default_matches = false;
  for (const auto& l : r.layouts) {
    tagged = tagged || !l.releases.empty();
    for (const auto& rel : l.releases) default_matches = default_matches || release_matches(rel, r.release);
  }
  TB_REQUIRE(!tagged || !r.release.empty(),
             fmt::format("{}: layouts name releases, so the recipe needs release = \"<the default one>\"", path));
  TB_REQUIRE(!tagged || default_matches, fmt::format("{}: release '{}' is not a release of any [[layout]]",
                                                     where_key(path, root, "release"), r.release));
  for (size_t i = 0; i < r.layouts.size(); ++i)
    for (size_t j = 0; j < i; ++j) {
      const Layout &a = r.layouts[i], &b = r.layouts[j];
      TB_REQUIRE(!(a.gpus == b.gpus && a.precision == b.precision && a.gpu == b.gpu && a.variant == b.variant &&
                   releases_overlap(a.releases, b.releases)),
                 fmt::format("{}: a second layout for {} GPUs with the same precision, release, gpu and variant "
                             "(the first is at {})", a.where, a.gpus, b.where));
    }
  return r;
}

std::vector<Recipe> load_recipes(const std::filesystem::path& dir) {
  const std::vector<std::filesystem::path> files = toml_files(dir);
  std::vector<Recipe> out;
  std::string first_default;
  for (const auto& f : files) {
    out.push_back(load_recipe(f));
    if (!out.back().is_default) continue;
    TB_REQUIRE(first_default.empty(), fmt::format("{}: a second default recipe ('{}' is the default already)",
                                                  out.back().file, first_default));
    first_default = out.back().name;
  }
  return out;
}

const Recipe* lookup_recipe(const std::vector<Recipe>& recipes, std::string_view name) {
  for (const auto& r : recipes)
    if (r.name == name) return &r;
  return nullptr;
}

const Recipe& find_recipe(const std::vector<Recipe>& recipes, std::string_view name) {
  if (const Recipe* r = lookup_recipe(recipes, name)) return *r;
  std::vector<std::string> names;
  for (const auto& r : recipes) names.push_back(r.name);
  raise_config(fmt::format("unknown recipe '{}'{}; recipes: {}", name, did_you_mean(name, names), join(names)));
}

const Recipe& default_recipe(const std::vector<Recipe>& recipes) {
  for (const auto& r : recipes)
    if (r.is_default) return r;
  raise_config("no recipe is marked 'default = true'");
}

std::filesystem::path find_recipes_dir(const std::optional<std::filesystem::path>& explicit_dir) {
  return find_data_dir("recipes", "TRAINBENCH_RECIPES", "--recipes", explicit_dir, ".");
}

}  // namespace tb::recipe
