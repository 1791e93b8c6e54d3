// recipe/recipe.h: recipes/<name>.toml, one training workload as a reference ran it: the model (a preset
// of model/config.h plus shape overrides, MoE experts), sequence, precisions, task (pretrain, sft, lora), the data it
// trains on (synthetic: pretraining tokens, or packed fine-tuning documents with their loss masks),
// what trainbench still lacks to run it (`needs`), and its parallel layouts per GPU count, tagged by
// release, precision and GPU model, including the reference's proxies (fewer layers). docs/RECIPES.md
// has the schema. Per run: dp = gpus / (tp·pp·cp), grad accumulation = global_batch / (micro_batch·dp).
// Every key and every layout is validated; errors are Error{config} "file:line: message".
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"

namespace tb::recipe {

// How the global batch follows the GPU count: weak (proportional, as the DGXC recipes scale) or strong (fixed).
enum class Scaling { weak, strong };
std::string_view scaling_name(Scaling s);

struct Layout {
  std::string where;  // "file:line" of its run (or [[layout]] table)
  int gpus = 0;
  int tp = 1, pp = 1, cp = 1, vp = 1;  // tensor, pipeline, context parallel; virtual pipeline stages per rank
  int ep = 1, etp = 0;                 // expert parallel; expert tensor parallel (0: tp, Megatron's default)
  int dp = 0;                          // derived: gpus / (tp·pp·cp)
  int micro_batch = 1, global_batch = 0;
  bool sequence_parallel = false;      // default: tp > 1
  bool pp_counts_embedding = false;    // the pipeline split counts embedding and loss as a layer each (NeMo)
  bool pp_uneven = false;              // stages hold unequal layer counts (first/last stage set apart)
  int layers = 0, seq = 0;             // this run's (a proxy's may be smaller than the recipe's)
  bool proxy = false;                  // fewer layers or a shorter sequence than the recipe's model
  // Which runs it describes; empty: any.
  std::string precision;
  std::vector<std::string> releases;
  std::string gpu;                     // GPU model, e.g. "GB200"
  std::string variant;                 // e.g. "strong"; "" is the default variant
  Scaling scaling = Scaling::weak;
  std::string source, note;
  bool derived = false;                // made by layout_for() from a listed run with the scaling rule

  int expert_tp() const { return etp > 0 ? etp : tp; }
  int grad_accum() const { return global_batch / (micro_batch * dp); }
};

struct Recipe {
  std::string file, name, summary;
  bool is_default = false;
  std::string task = "pretrain";                // pretrain | sft | lora
  std::string framework, dataset, reference_parallelism;
  std::string data;                             // what `run` trains on (train/data.h DataSource names): the key
                                                // `data`, else packed-squad for fine-tuning tasks, markov otherwise
  std::string release;                          // the release whose layouts are the default
  std::vector<std::string> precisions, needs, sources;
  Scaling scaling = Scaling::weak;
  std::string preset;                           // model/config.h preset it starts from
  model::ModelConfig model;                     // preset + overrides; model.seq is the recipe's sequence
  bool shape_overridden = false;
  model::LoraConfig lora;                       // [lora]: rank, alpha, dropout, targets (rank 0: none); apart from
                                                // `model`, whose FLOPs the task's convention scales (convention.h)
  std::vector<Layout> layouts;                  // every run of every [[layout]], file order

  bool runnable() const { return needs.empty(); }
  bool needs_feature(std::string_view f) const;
};

struct LayoutQuery {
  int gpus = 0;
  std::string precision;  // "": the recipe's first precision
  std::string release;    // "": the recipe's release ("25.04" also matches "25.04.02")
  std::string gpu;        // GPU model; "" matches only layouts that name none
  std::string variant;    // "": the default variant
  LayoutQuery(int n = 0, std::string prec = {}, std::string rel = {}, std::string gpu_model = {}, std::string var = {})
      : gpus(n), precision(std::move(prec)), release(std::move(rel)), gpu(std::move(gpu_model)), variant(std::move(var)) {}
};

Recipe load_recipe(const std::filesystem::path& file);
// Every *.toml in dir, sorted by name; at most one may be the default.
std::vector<Recipe> load_recipes(const std::filesystem::path& dir);
const Recipe& find_recipe(const std::vector<Recipe>& recipes, std::string_view name);  // "did you mean"
const Recipe* lookup_recipe(const std::vector<Recipe>& recipes, std::string_view name);  // null when unknown
const Recipe& default_recipe(const std::vector<Recipe>& recipes);

// The recipes folder: `explicit_dir` if given, else $TRAINBENCH_RECIPES, else the first of
// recipe::data_dir_candidates("recipes") (recipe/system.h: next to the binary, <exe dir>/../share/trainbench, the
// source tree) that exists.
std::filesystem::path find_recipes_dir(const std::optional<std::filesystem::path>& explicit_dir);

// Checks one run against the model: world = dp·cp·pp·tp, heads and kv_heads divisible by tp, layers
// by pp·vp, seq by 2·cp, global batch by micro_batch·dp, experts by ep. Error{config} "<where>: ...".
void validate_layout(const Recipe& r, Layout& l);  // also fills dp

// The listed run for q.gpus (the most specific match), or one derived from the nearest listed full-size
// run by the scaling rule (weak: global batch × gpus / its gpus); Error{config} when none fits.
Layout layout_for(const Recipe& r, const LayoutQuery& q);
// The GPU counts listed for q (q.gpus ignored), ascending.
std::vector<int> layout_gpu_counts(const Recipe& r, const LayoutQuery& q);

// Release tags match when one is a dotted prefix of the other: "25.04" ~ "25.04.02", "24.11" ~ "24.11.1".
bool release_matches(std::string_view a, std::string_view b);
int compare_releases(std::string_view a, std::string_view b);  // <0, 0, >0 by numeric components

}  // namespace tb::recipe
