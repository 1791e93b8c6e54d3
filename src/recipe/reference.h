// recipe/reference.h: references/<source>.toml, published (or measured) numbers of recipe runs: one row
// per recipe × GPU model × release × precision × GPU count (× variant), with what was published (step
// time, tokens/s of the whole job or per GPU, MFU %, TFLOP/s per GPU, samples/s; or an MLPerf time to train), the FLOP
// convention the publisher counted in, the peak its MFU divides by, and the source. Files hold [[group]] tables of shared keys
// with `rows = [ {...}, ... ]`; docs/RECIPES.md has the schema. Errors: Error{config} "file:line: ...".
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "recipe/convention.h"
#include "recipe/recipe.h"

namespace tb::recipe {

struct ReferenceRow {
  std::string where;                    // "file:line" of the row
  std::string file;                     // the references file
  std::string recipe, gpu, precision, variant, source, note;
  std::vector<std::string> releases;    // usually one; a table published unchanged in two releases has both
  int gpus = 0;
  // As published; 0 where not published.
  double step_s = 0, tokens_per_s = 0, samples_per_s = 0, mfu_pct = 0, tflops_per_gpu = 0;
  double tokens_per_s_gpu = 0;          // tokens/s per GPU where that is what was printed (NeMo's tables), else 0
  double peak_tflops = 0;               // what mfu_pct divides by (the row's, else the file's peak table)
  double flops_per_sample = 0;          // the publisher's stated model FLOPs per sample (full model), if any
  // MLPerf Training results (references/mlperf-training.toml): the score (olympic mean of the runs' run_stop -
  // run_start), the global batch, the mean samples trained at run_stop, evaluations per run and seconds per evaluation.
  double time_to_train_min = 0, samples_to_target = 0, evals = 0, eval_s = 0;
  int global_batch = 0;
  std::optional<Convention> convention; // how the publisher counted FLOPs (required with mfu or TFLOP/s)
  double tolerance = 0.05;              // relative: a comparison meets within 1 ± tolerance (the group's `tolerance`)

  const std::string& release() const { return releases.back(); }  // the newest
  bool publishes_tokens() const { return tokens_per_s > 0 || tokens_per_s_gpu > 0; }
  double tokens_per_s_per_gpu() const { return tokens_per_s > 0 ? tokens_per_s / gpus : tokens_per_s_gpu; }
  // TFLOP/s per GPU as published, or as the published MFU implies (mfu_pct / 100 × peak); 0 if neither.
  double published_tflops_per_gpu() const;
};

std::vector<ReferenceRow> load_references(const std::filesystem::path& file);
// Every *.toml directly in dir (references/systems/ is the GPU peak tables, not rows), sorted; duplicate
// rows (same recipe, GPU model, precision, variant, GPU count and release) are an error.
std::vector<ReferenceRow> load_reference_dir(const std::filesystem::path& dir);
// Every row names a known recipe and one of its precisions (Error{config} with file:line, nearest name).
void check_references(const std::vector<ReferenceRow>& rows, const std::vector<Recipe>& recipes);

struct ReferenceQuery {
  std::string recipe;
  int gpus = 0;
  std::string precision;
  std::string gpu = "H100";
  std::string release;   // "": the newest release published; "25.04" matches "25.04.02"
  std::string variant;
  ReferenceQuery(std::string name, int n, std::string prec, std::string gpu_model = "H100", std::string rel = {},
                 std::string var = {})
      : recipe(std::move(name)), gpus(n), precision(std::move(prec)), gpu(std::move(gpu_model)), release(std::move(rel)),
        variant(std::move(var)) {}
};
// The row for exactly this recipe × GPUs × precision × GPU model (× release, variant), or null.
const ReferenceRow* find_reference(const std::vector<ReferenceRow>& rows, const ReferenceQuery& q);
// The GPU counts published for q (q.gpus ignored), ascending: what a lookup could find.
std::vector<int> reference_gpu_counts(const std::vector<ReferenceRow>& rows, const ReferenceQuery& q);

}  // namespace tb::recipe
