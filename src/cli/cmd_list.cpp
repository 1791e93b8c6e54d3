// cli/cmd_list.cpp: `trainbench list [all|micro|recipes|references]`: the micro suites, one line per
// recipe (name, model, sequence, GPU counts, precisions, task, needs) and one per group of reference rows
// (file, recipe, GPU model, release, variant, precisions, FLOP convention, GPU counts).
#include <fmt/format.h>

#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "cli/commands.h"
#include "cli/common.h"
#include "micro/suite.h"
#include "recipe/recipe.h"
#include "recipe/reference.h"

namespace tb::cli {
namespace {

std::string join(const auto& items, std::string_view sep = ",") {
  std::string s;
  for (const auto& x : items) s += (s.empty() ? "" : std::string(sep)) + fmt::format("{}", x);
  return s;
}

// "8,16,32" up to six counts, else "32..2304 (12 sizes)".
std::string counts(const std::set<int>& gpus) {
  if (gpus.size() <= 6) return join(gpus);
  return fmt::format("{}..{} ({} sizes)", *gpus.begin(), *gpus.rbegin(), gpus.size());
}

std::string model_of(const recipe::Recipe& r) {
  std::string m = r.shape_overridden ? fmt::format("{} L{} d{}", r.model.family, r.model.layers, r.model.d_model) : r.preset;
  if (r.model.moe.enabled()) m += fmt::format(" MoE {}/top{}", r.model.moe.experts, r.model.moe.top_k);
  return m;
}

void list_micro() {
  std::printf("micro suites (trainbench micro <suite>):\n");
  for (const auto& s : micro::suites())
    std::printf("  %-8.*s %.*s (needs %d+ GPU%s)\n", int(s.name.size()), s.name.data(), int(s.summary.size()),
                s.summary.data(), s.min_gpus, s.min_gpus > 1 ? "s" : "");
}

void list_recipes(const std::filesystem::path& dir, const std::vector<recipe::Recipe>& recipes) {
  std::printf("recipes (%s; * the default):\n", dir.c_str());
  std::printf("  %-22s %-28s %5s  %-26s %-9s %-8s %s\n", "name", "model", "seq", "GPUs", "precision", "task", "needs");
  for (const auto& r : recipes) {
    std::set<int> gpus;
    for (const auto& l : r.layouts) gpus.insert(l.gpus);
    const std::string name = r.name + (r.is_default ? " *" : "");
    std::printf("  %-22s %-28s %5d  %-26s %-9s %-8s %s\n", name.c_str(), model_of(r).c_str(), r.model.seq,
                counts(gpus).c_str(), join(r.precisions).c_str(), r.task.c_str(),
                r.needs.empty() ? "-" : join(r.needs).c_str());
  }
}

void list_references(const std::filesystem::path& dir, const std::vector<recipe::ReferenceRow>& rows) {
  using Key = std::tuple<std::string, std::string, std::string, std::string, std::string>;  // file recipe gpu release variant
  struct Group {
    std::set<std::string> precisions, conventions;
    std::set<int> gpus;
    int rows = 0;
  };
  std::map<Key, Group> groups;
  std::vector<Key> order;  // file order
  for (const auto& r : rows) {
    const Key k{std::filesystem::path(r.file).filename().string(), r.recipe, r.gpu, join(r.releases, "+"), r.variant};
    if (!groups.contains(k)) order.push_back(k);
    auto& g = groups[k];
    g.precisions.insert(r.precision);
    g.conventions.insert(r.convention ? std::string(recipe::convention_name(*r.convention)) : "-");
    g.gpus.insert(r.gpus);
    ++g.rows;
  }
  std::printf("references (%s; %zu rows):\n", dir.c_str(), rows.size());
  std::printf("  %-16s %-22s %-5s %-17s %-9s %-8s %4s  %s\n", "file", "recipe", "gpu", "release", "precision", "flops",
              "rows", "GPUs");
  for (const auto& k : order) {
    const auto& [file, name, gpu, release, variant] = k;
    const auto& g = groups[k];
    const std::string rel = variant.empty() ? release : release + " " + variant;
    std::printf("  %-16s %-22s %-5s %-17s %-9s %-8s %4d  %s\n", file.c_str(), name.c_str(), gpu.c_str(), rel.c_str(),
                join(g.precisions).c_str(), join(g.conventions).c_str(), g.rows, counts(g.gpus).c_str());
  }
}

}  // namespace

int cmd_list(int argc, char** argv) {
  std::string what = "all";
  std::optional<std::filesystem::path> recipes_dir, references_dir;
  CLI::App app{"the micro suites, recipes and reference numbers this build knows", "trainbench list"};
  app.add_option("what", what, "all | micro | recipes | references")
      ->check(CLI::IsMember({"all", "micro", "recipes", "references"}));
  app.add_option("--recipes", recipes_dir, "recipes folder (default: the one next to the binary)");
  app.add_option("--references", references_dir, "references folder (default: the one next to the binary)");
  if (auto rc = parse(app, argc, argv)) return *rc;
  const bool all = what == "all";
  if (all || what == "micro") list_micro();
  std::vector<recipe::Recipe> recipes;
  std::filesystem::path rdir;
  if (all || what == "recipes" || what == "references") {
    rdir = recipe::find_recipes_dir(recipes_dir);
    recipes = recipe::load_recipes(rdir);
  }
  if (all || what == "recipes") list_recipes(rdir, recipes);
  if (all || what == "references") {
    const auto dir = recipe::find_references_dir(references_dir);
    const auto rows = recipe::load_reference_dir(dir);
    recipe::check_references(rows, recipes);
    list_references(dir, rows);
  }
  return kOk;
}

}  // namespace tb::cli
