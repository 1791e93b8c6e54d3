// cli/cmd_slurm.cpp: `trainbench slurm run|sweep|scale|check|status|collect`: flags (over trainbench.toml and
// TRAINBENCH_SLURM_* site defaults) into a launch::SlurmRequest, then launch/ renders, submits, reports and
// collects. Arguments after `--` go to every task's trainbench command. Nothing here prompts.
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "cli/common.h"
#include "core/error.h"
#include "core/suggest.h"
#include "launch/collect.h"
#include "launch/process.h"
#include "launch/site.h"
#include "launch/submission.h"
#include "recipe/recipe.h"

extern char** environ;

namespace tb::cli {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kSubcommands[] = {"run", "sweep", "scale", "check", "status", "collect"};

void usage() {
  std::printf(
      "usage: trainbench slurm <command> [options] [-- trainbench options for every task]\n\n"
      "  run <recipe> --nodes N     one distributed job: a rank per GPU, all of them training the recipe at its\n"
      "                             layout for N x GPUs-per-node GPUs (--proxies: independent one-GPU proxies)\n"
      "  sweep <recipe> --nodes N --set key=v1,v2   a job array of such jobs over the product\n"
      "  scale <recipe> --nodes 1,2,4   one such job per node count, one after the other\n"
      "  check --nodes N            `trainbench check` on every node\n"
      "  status <folder>            the state of every job of a submission\n"
      "  collect <folder>           every job's records into one results.jsonl, and summary.json\n\n"
      "site defaults: trainbench.toml [slurm] or TRAINBENCH_SLURM_* (docs/CLUSTER.md); --dry-run prints the script\n");
}

// This binary when it is trainbench itself, else trainbench on PATH, else "" (the request then needs --trainbench).
std::string this_trainbench() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && self.filename() == "trainbench") return self.string();
  return launch::find_on_path("trainbench");
}

fs::path default_folder(const std::string& command, const std::string& recipe) {
  const auto now = std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::now());
  const std::string name = fmt::format("{}-{}{:%Y%m%dT%H%M%SZ}", command, recipe.empty() ? "" : recipe + "-", now);
  return fs::absolute(fs::path("results") / "slurm" / name);
}

int submit_command(const std::string& command, int argc, char** argv, const std::vector<std::string>& passthrough) {
  CLI::App app{fmt::format("trainbench slurm {}: render an sbatch script and submit it (--dry-run: print it)", command),
               fmt::format("trainbench slurm {}", command)};
  launch::SlurmRequest req;
  req.command = command;
  std::optional<fs::path> out, site_file, recipes_dir;
  std::optional<int> gpn, tpn;
  std::optional<std::string> partition, account, time, image, mpi, trainbench;
  bool gres = false, no_gres = false, no_exclusive = false, dry_run = false;
  std::vector<int> nodes;
  if (command != "check") app.add_option("recipe", req.recipe, "a recipe of `trainbench list recipes`")->required();
  auto* n = app.add_option("-N,--nodes", nodes, command == "scale" ? "node counts, e.g. 1,2,4,8" : "nodes")->required();
  if (command == "scale")
    n->delimiter(',');
  else
    n->expected(1);
  app.add_option("--gpus-per-node", gpn, "GPUs per node (site default, else 8)")->check(whole_number(1));
  app.add_option("--tasks-per-node", tpn, "tasks per node (default: one per GPU; 1 with --device cpu)")
      ->check(whole_number(1));
  app.add_option("--device", req.device, "cuda, or cpu: no GPU request, tasks run `trainbench run --device cpu`")
      ->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("-p,--partition", partition, "Slurm partition");
  app.add_option("-A,--account", account, "Slurm account");
  app.add_option("-t,--time", time, "time limit, e.g. 00:30:00");
  app.add_option("--container,--container-image", image, "pyxis/enroot image: srun --container-image");
  app.add_option("--mount", req.mounts, "container mount SRC:DST[:FLAGS] (repeatable)");
  app.add_flag("--gres", gres, "request GPUs as --gres=gpu:N");
  app.add_flag("--no-gres", no_gres, "no GPU request (sites without GPU GRES: exclusive nodes bring their GPUs)");
  app.add_flag("--no-exclusive", no_exclusive, "share nodes (default: --exclusive)");
  app.add_option("--mpi", mpi, "srun --mpi type (default pmix; none: the cluster's MpiDefault)");
  app.add_option("--sbatch", req.sbatch, "an extra sbatch option, e.g. --sbatch=--qos=high (repeatable)");
  app.add_option("--trainbench", trainbench, "the trainbench binary as the compute nodes see it (default: this one)");
  app.add_option("-o,--out", out,
                 "the submission folder, on a file system the nodes share (default: results/slurm/...)");
  app.add_option("--site", site_file,
                 "site defaults file (default: ./trainbench.toml, ~/.config/trainbench/, /etc/trainbench/)");
  app.add_option("--recipes", recipes_dir, "recipes folder (default: next to the binary, or $TRAINBENCH_RECIPES)");
  if (command != "check")
    app.add_flag("--proxies", req.proxies,
                 "independent tasks instead of one distributed job: each measures the one-GPU proxy of the layout "
                 "(`trainbench run --proxy`; a per-GPU health spread, not a distributed run)");
  if (command == "sweep") {
    app.add_option("--set", req.sets,
                   "an axis: key=v1,v2,... (layers, seq, micro_batch, global_batch, tp, pp, cp, vp)");
    app.add_option("--ref-gpus", req.ref_gpus, "with --proxies, an axis: reference GPU counts to stand for")
        ->delimiter(',');
  }
  app.add_flag("--dry-run", dry_run, "print the script(s); submit nothing");
  if (auto rc = parse(app, argc, argv)) return *rc;
  TB_REQUIRE(!(gres && no_gres), "--gres and --no-gres: choose one");

  const launch::Site site = launch::load_site(site_file, [](const char* k) { return std::getenv(k); });
  req.nodes = nodes;
  req.gpus_per_node = gpn, req.tasks_per_node = tpn;
  req.partition = partition, req.account = account, req.time = time, req.container_image = image, req.mpi = mpi;
  if (gres) req.gres = true;
  if (no_gres) req.gres = false;
  if (no_exclusive) req.exclusive = false;
  if (trainbench)
    req.trainbench = *trainbench;
  else if (site.slurm.trainbench.empty())
    req.trainbench = !image.value_or(site.slurm.container_image).empty() ? "trainbench" : this_trainbench();
  req.passthrough = passthrough;
  req.dir = out ? fs::absolute(*out) : default_folder(command, req.recipe);
  req.env = launch::env_passthrough(site.slurm.env, site.slurm.env_set, environ);
  std::vector<recipe::Recipe> recipes;
  if (command != "check") recipes = recipe::load_recipes(recipe::find_recipes_dir(recipes_dir));

  launch::Submission sub = launch::plan_slurm(req, site, recipes);
  if (dry_run) {
    for (const auto& p : sub.jobs) {
      if (sub.jobs.size() > 1)
        std::printf("# ---- %s%s ----\n", p.script.c_str(),
                    p.after_previous ? " (sbatch --dependency=afterany:<previous>)" : "");
      std::printf("%s", launch::render_sbatch(p.job).c_str());
    }
    return kOk;
  }
  auto scheduler = launch::slurm_commands();
  const launch::Manifest m = launch::submit(std::move(sub), *scheduler);
  for (const auto& note : m.notes) std::printf("note: %s\n", note.c_str());
  for (const auto& j : m.jobs)
    std::printf("submitted job %s: %s%s\n", j.id.c_str(), j.label.c_str(),
                j.array_labels.empty() ? "" : fmt::format(" ({} array tasks)", j.array_labels.size()).c_str());
  std::printf("folder: %s\n  trainbench slurm status %s\n  trainbench slurm collect %s\n", m.dir.c_str(), m.dir.c_str(),
              m.dir.c_str());
  return kOk;
}

int report_command(const std::string& command, int argc, char** argv) {
  CLI::App app{command == "status" ? "trainbench slurm status: the state of every job of a submission"
                                   : "trainbench slurm collect: every job's records into one folder, and a summary",
               fmt::format("trainbench slurm {}", command)};
  fs::path dir;
  std::optional<fs::path> out;
  double wait_s = 0;
  bool json = false;
  app.add_option("folder", dir, "the submission folder (printed by trainbench slurm run|sweep|scale|check)")
      ->required();
  app.add_option("--wait", wait_s, "wait up to this many seconds for every job to end")->check(CLI::NonNegativeNumber);
  if (command == "collect")
    app.add_option("-o,--out", out, "where to write results.jsonl and summary.json (default: the folder)");
  else
    app.add_flag("--json", json, "print the summary as JSON");
  if (auto rc = parse(app, argc, argv)) return *rc;

  const launch::Manifest m = launch::read_manifest(dir);
  auto scheduler = launch::slurm_commands();
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  std::vector<launch::JobReport> reports = launch::job_reports(m, *scheduler);
  auto all_done = [&] {
    return std::all_of(reports.begin(), reports.end(), [](const launch::JobReport& r) { return r.finished(); });
  };
  while (!all_done() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    reports = launch::job_reports(m, *scheduler);
  }
  const bool any_failed = std::any_of(reports.begin(), reports.end(), [](const auto& r) { return r.failed(); });
  if (command == "status") {
    if (json)
      std::printf("%s\n", launch::summary_json(m, reports).dump(2).c_str());
    else
      std::printf("%s", launch::render_reports(reports).c_str());
    return any_failed ? kFailed : kOk;
  }
  const launch::Collection c = launch::collect(m, *scheduler, out ? *out : dir);
  std::printf("%s", launch::render_reports(c.jobs).c_str());
  std::printf(
      "\nresults: %s (%d records%s), summary: %s\n", c.results.c_str(), c.records,
      c.failures ? fmt::format(" and {} failed-job record{}", c.failures, c.failures > 1 ? "s" : "").c_str() : "",
      c.summary.c_str());
  const bool done = std::all_of(c.jobs.begin(), c.jobs.end(), [](const auto& r) { return r.finished(); });
  const bool failed = std::any_of(c.jobs.begin(), c.jobs.end(), [](const auto& r) { return r.failed(); });
  return failed || !done ? kFailed : kOk;
}

}  // namespace

int cmd_slurm(int argc, char** argv) {
  if (argc < 2 || std::string_view(argv[1]) == "-h" || std::string_view(argv[1]) == "--help") {
    usage();
    return argc < 2 ? kUsage : kOk;
  }
  const std::string sub = argv[1];
  if (std::find(std::begin(kSubcommands), std::end(kSubcommands), sub) == std::end(kSubcommands)) {
    const std::vector<std::string> names(std::begin(kSubcommands), std::end(kSubcommands));
    std::fprintf(stderr, "trainbench slurm: unknown command '%s'%s; run 'trainbench slurm --help'\n", sub.c_str(),
                 did_you_mean(sub, names).c_str());
    return kUsage;
  }
  // argv[0] becomes "trainbench slurm <sub>"; everything after `--` is for the tasks' trainbench.
  std::string prog = fmt::format("trainbench slurm {}", sub);
  std::vector<char*> args{prog.data()};
  std::vector<std::string> passthrough;
  bool after = false;
  for (int i = 2; i < argc; ++i) {
    if (!after && std::string_view(argv[i]) == "--")
      after = true;
    else if (after)
      passthrough.emplace_back(argv[i]);
    else
      args.push_back(argv[i]);
  }
  if (sub == "status" || sub == "collect") {
    TB_REQUIRE(passthrough.empty(), fmt::format("trainbench slurm {} takes no `--` arguments", sub));
    return report_command(sub, int(args.size()), args.data());
  }
  return submit_command(sub, int(args.size()), args.data(), passthrough);
}

}  // namespace tb::cli
