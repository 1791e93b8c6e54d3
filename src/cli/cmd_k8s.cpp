// cli/cmd_k8s.cpp: `trainbench k8s render <recipe> --nodes N`: flags (over trainbench.toml [k8s] and
// TRAINBENCH_K8S_* site defaults) into a launch::K8sRequest; writes the manifest (launch/k8s.h) to a file or
// stdout. Arguments after `--` go to every rank's trainbench command.
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "cli/common.h"
#include "core/error.h"
#include "core/output_path.h"
#include "launch/k8s.h"
#include "launch/site.h"
#include "recipe/recipe.h"

extern char** environ;

namespace tb::cli {
namespace fs = std::filesystem;

int cmd_k8s(int argc, char** argv) {
  if (argc < 2 || std::string_view(argv[1]) == "-h" || std::string_view(argv[1]) == "--help") {
    std::printf(
        "usage: trainbench k8s render <recipe> --nodes N [--image IMAGE] [--proxies] [-o FILE] "
        "[-- trainbench options]\n\n  render   a Kubernetes manifest: an MPIJob whose ranks train the recipe at its "
        "layout as one distributed job (default), or with --proxies an indexed Job of independent one-GPU proxies\n");
    return argc < 2 ? kUsage : kOk;
  }
  TB_REQUIRE(std::string_view(argv[1]) == "render",
             fmt::format("unknown command '{}'; the one command is `render`", argv[1]));
  std::string prog = "trainbench k8s render";
  std::vector<char*> args{prog.data()};
  launch::K8sRequest req;
  bool after = false;
  for (int i = 2; i < argc; ++i) {
    if (!after && std::string_view(argv[i]) == "--")
      after = true;
    else if (after)
      req.passthrough.emplace_back(argv[i]);
    else
      args.push_back(argv[i]);
  }
  CLI::App app{"trainbench k8s render: a Kubernetes manifest that runs a recipe on N nodes", prog};
  std::optional<fs::path> out, site_file, recipes_dir;
  app.add_option("recipe", req.recipe, "a recipe of `trainbench list recipes`")->required();
  app.add_option("-N,--nodes", req.nodes, "nodes (pods)")->required()->check(whole_number(1));
  app.add_option("--gpus-per-node", req.gpus_per_node, "GPUs per pod (site default, else 8)")
      ->check(whole_number(1));
  app.add_option("--tasks-per-node", req.tasks_per_node,
                 "processes per pod (default: one per GPU; 1 with --device cpu)")
      ->check(whole_number(1));
  app.add_option("--device", req.device, "cuda, or cpu (no GPU resource)")->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--image", req.image, "container image with trainbench on its PATH");
  app.add_option("-n,--namespace", req.namespace_, "namespace (default: default)");
  app.add_option("--name", req.name, "name of the Job and Service (default: tb-<recipe>)");
  app.add_option("--results-pvc", req.results_pvc, "PersistentVolumeClaim mounted at /results (default: an emptyDir)");
  app.add_option("--trainbench", req.trainbench, "the trainbench binary inside the image (default: trainbench)");
  app.add_flag("--mpi-operator", req.mpi_operator,
               "an MPIJob (kubeflow.org/v2beta1, the MPI operator): the default; with --proxies, its ranks are the "
               "independent proxies");
  app.add_flag("--proxies", req.proxies,
               "independent processes instead of one distributed job, each measuring the one-GPU proxy "
               "(`trainbench run --proxy`), in an indexed Job with a headless Service (no MPI operator needed)");
  app.add_option("-o,--out", out, "write the manifest here (default: stdout)");
  app.add_option("--site", site_file,
                 "site defaults file (default: ./trainbench.toml, ~/.config/trainbench/, /etc/trainbench/)");
  app.add_option("--recipes", recipes_dir, "recipes folder (default: next to the binary, or $TRAINBENCH_RECIPES)");
  if (auto rc = parse(app, int(args.size()), args.data())) return *rc;

  if (out) require_output_file(*out, "-o");
  const launch::Site site = launch::load_site(site_file, [](const char* k) { return std::getenv(k); });
  req.env = launch::env_passthrough(site.k8s.env, site.k8s.env_set, environ);
  const auto recipes = recipe::load_recipes(recipe::find_recipes_dir(recipes_dir));
  const std::string yaml = launch::render_k8s(launch::plan_k8s(req, site, recipes));
  if (!out) {
    std::printf("%s", yaml.c_str());
    return kOk;
  }
  std::ofstream f(*out);
  f << yaml;
  f.close();
  if (!f) raise_error(Error::Kind::io, fmt::format("cannot write {}", out->string()));
  std::fprintf(stderr, "wrote %s: kubectl apply -f %s\n", out->c_str(), out->c_str());
  return kOk;
}

}  // namespace tb::cli
