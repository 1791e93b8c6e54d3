// launch/submission.cpp: request -> jobs (validated against the recipes), submission, submission.json.
#include "launch/submission.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <chrono>
#include <fstream>

#include "core/error.h"
#include "core/provenance.h"
#include "recipe/plan.h"
#include "recipe/recipe.h"

namespace tb::launch {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kManifestSchema = "trainbench.slurm.submission.v1";

// "layers=2,4" -> {"layers", {"2", "4"}}
std::pair<std::string, std::vector<std::string>> parse_axis(const std::string& s) {
  const auto eq = s.find('=');
  TB_REQUIRE(eq != std::string::npos && eq > 0 && eq + 1 < s.size(),
             fmt::format("--set {}: expected key=v1,v2,..., e.g. --set micro_batch=1,2", s));
  std::pair<std::string, std::vector<std::string>> axis{s.substr(0, eq), {}};
  std::string rest = s.substr(eq + 1);
  for (size_t at = 0; at <= rest.size();) {
    const auto comma = std::min(rest.find(',', at), rest.size());
    TB_REQUIRE(comma > at, fmt::format("--set {}: an empty value", s));
    axis.second.push_back(rest.substr(at, comma - at));
    at = comma + 1;
  }
  return axis;
}

// Checks what `trainbench run` would check first, so a bad request fails here and not in the queue. ranks > 0: a
// distributed run of that many ranks (the layout for that many GPUs); otherwise the proxy standing for ref_gpus.
void validate_run(const std::vector<recipe::Recipe>& recipes, const std::string& name, const std::string& device,
                  int ranks, int ref_gpus, const std::map<std::string, std::string>& sets, const std::string& shape) {
  const recipe::Recipe& r = recipe::find_recipe(recipes, name);
  recipe::RunOptions opt;
  opt.ranks = ranks;
  opt.ref_gpus = ref_gpus;
  opt.precision = device == "cpu" ? "fp32" : "";
  opt.sets = sets;
  if (ranks == 0) {
    (void)recipe::plan_run(r, opt);
    return;
  }
  try {
    (void)recipe::plan_run(r, opt);
  } catch (const Error& e) {
    raise_config(
        fmt::format("{} = {} ranks of one distributed job: {} (a node count whose GPUs the recipe has a "
                    "layout for, or --proxies for independent one-GPU proxies)",
                    shape, ranks, e.what()));
  }
}

std::string plural(int n, std::string_view what) { return fmt::format("{} {}{}", n, what, n == 1 ? "" : "s"); }

}  // namespace

Submission plan_slurm(const SlurmRequest& req, const Site& site, const std::vector<recipe::Recipe>& recipes) {
  const SlurmSite& s = site.slurm;
  const bool cpu = req.device == "cpu";
  const bool check = req.command == "check";
  TB_REQUIRE(req.command == "run" || req.command == "sweep" || req.command == "scale" || check,
             fmt::format("slurm: unknown command '{}'", req.command));
  TB_REQUIRE(req.device == "cuda" || cpu, fmt::format("--device {}: cuda or cpu", req.device));
  TB_REQUIRE(!check || !cpu, "slurm check: the system check needs GPUs (no --device cpu)");
  TB_REQUIRE(!req.nodes.empty(), "slurm: --nodes is required");
  TB_REQUIRE(req.command == "scale" || req.nodes.size() == 1,
             fmt::format("slurm {}: one node count (several are for `trainbench slurm scale`)", req.command));
  for (int n : req.nodes) TB_REQUIRE(n >= 1, fmt::format("--nodes {}: at least 1", n));
  TB_REQUIRE(req.dir.is_absolute(), "slurm: the submission folder must be an absolute path");
  for (const auto& a : req.passthrough)
    TB_REQUIRE(a != "--out" && a != "-o" && !a.starts_with("--out="),
               "slurm: the tasks' --out is the submission folder's jobs/<job>/rank<N>; choose the folder with --out "
               "before `--`");
  TB_REQUIRE(check || !req.recipe.empty(),
             fmt::format("slurm {}: which recipe? (`trainbench list recipes`)", req.command));

  const int gpn = req.gpus_per_node.value_or(s.gpus_per_node);
  TB_REQUIRE(gpn >= 1, "--gpus-per-node: at least 1");
  const int tpn = req.tasks_per_node.value_or(check || cpu ? 1 : gpn);
  TB_REQUIRE(tpn >= 1, "--tasks-per-node: at least 1");

  Submission sub;
  sub.command = req.command;
  sub.recipe = req.recipe;
  sub.dir = req.dir;

  SlurmJob base;
  base.command = req.command;
  base.tasks_per_node = tpn;
  base.gpus_per_node = cpu ? 0 : gpn;
  base.gres = req.gres.value_or(s.gres);
  base.exclusive = req.exclusive.value_or(s.exclusive);
  base.partition = req.partition.value_or(s.partition);
  base.account = req.account.value_or(s.account);
  base.time = req.time.value_or(s.time);
  base.mpi = req.mpi.value_or(s.mpi);
  if (base.mpi == "none") base.mpi.clear();
  base.container_image = req.container_image.value_or(s.container_image);
  base.container_mounts = s.container_mounts;
  base.container_mounts.insert(base.container_mounts.end(), req.mounts.begin(), req.mounts.end());
  base.env = req.env;
  base.sbatch_extra = s.sbatch;
  base.sbatch_extra.insert(base.sbatch_extra.end(), req.sbatch.begin(), req.sbatch.end());
  base.srun_extra = s.srun;
  base.setup = s.setup;
  base.dir = req.dir;
  base.trainbench = req.trainbench.value_or(s.trainbench);
  TB_REQUIRE(!base.trainbench.empty(),
             "slurm: where is trainbench on the compute nodes? (--trainbench PATH or "
             "trainbench = \"...\" in [slurm] of trainbench.toml)");
  const std::string what = cpu ? "CPU task" : "GPU";
  auto shape = [&](int nodes) { return fmt::format("{} x {}", plural(nodes, "node"), plural(cpu ? tpn : gpn, what)); };
  const bool distributed = !check && !req.proxies;
  TB_REQUIRE(!distributed || cpu || tpn == gpn,
             fmt::format("slurm {}: a distributed job runs one rank per GPU: --tasks-per-node {} with {} GPUs per "
                         "node (leave --tasks-per-node out, or --proxies for independent tasks)",
                         req.command, tpn, gpn));
  TB_REQUIRE(req.ref_gpus.empty() || req.proxies,
             "slurm sweep --ref-gpus: a distributed job stands for its own GPU count (nodes x GPUs per node); vary "
             "--nodes with `slurm scale`, or sweep reference counts with --proxies");
  base.distributed = distributed;
  auto ranks = [&](int nodes) { return nodes * (cpu ? tpn : gpn); };
  // What every task runs: the recipe as one job of all the ranks, or (--proxies) each task its own proxy.
  auto run_args = [&](int nodes) {
    std::vector<std::string> a{"run", req.recipe};
    if (cpu) a.insert(a.end(), {"--device", "cpu"});
    if (req.proxies) a.push_back("--proxy");
    if (req.proxies && !cpu) a.insert(a.end(), {"--ref-gpus", std::to_string(nodes * gpn)});
    return a;
  };
  auto validate = [&](int nodes, int ref, const std::map<std::string, std::string>& sets) {
    validate_run(recipes, req.recipe, req.device, distributed ? ranks(nodes) : 0, distributed ? 0 : ref, sets,
                 shape(nodes));
  };
  auto with_passthrough = [&](std::vector<std::string> a) {
    a.insert(a.end(), req.passthrough.begin(), req.passthrough.end());
    return a;
  };
  const std::string mode = req.proxies ? ", independent proxies" : "";
  auto job_label = [&](int nodes) { return fmt::format("{}, {}{}", req.recipe, shape(nodes), mode); };
  auto job_summary = [&](int nodes) { return fmt::format("{} on {}{}", req.recipe, shape(nodes), mode); };

  if (check) {
    PlannedJob p{base, "job.sbatch", fmt::format("check, {}", shape(req.nodes[0])), {}, false};
    p.job.name = "tb-check";
    p.job.nodes = req.nodes[0];
    p.job.tasks_per_node = 1;
    p.job.per_node = true;
    p.job.args = with_passthrough({"check"});
    p.job.summary = fmt::format("system check on {}, one task per node", plural(p.job.nodes, "node"));
    sub.jobs.push_back(std::move(p));
    return sub;
  }

  if (req.command == "run") {
    const int nodes = req.nodes[0];
    validate(nodes, cpu ? 0 : nodes * gpn, {});
    PlannedJob p{base, "job.sbatch", job_label(nodes), {}, false};
    p.job.name = "tb-" + req.recipe;
    p.job.nodes = nodes;
    p.job.args = with_passthrough(run_args(nodes));
    p.job.summary = job_summary(nodes);
    sub.jobs.push_back(std::move(p));
  } else if (req.command == "scale") {
    for (size_t i = 0; i < req.nodes.size(); ++i) {
      const int nodes = req.nodes[i];
      validate(nodes, cpu ? 0 : nodes * gpn, {});
      PlannedJob p{base, fmt::format("job-{}n.sbatch", nodes), job_label(nodes), {}, i > 0};
      p.job.name = fmt::format("tb-{}-{}n", req.recipe, nodes);
      p.job.nodes = nodes;
      p.job.args = with_passthrough(run_args(nodes));
      p.job.summary = fmt::format("{} (scale point {} of {})", job_summary(nodes), i + 1, req.nodes.size());
      sub.jobs.push_back(std::move(p));
    }
  } else {  // sweep: the product of the axes, the last one fastest
    const int nodes = req.nodes[0];
    std::vector<std::pair<std::string, std::vector<std::string>>> axes;
    for (const auto& s2 : req.sets) axes.push_back(parse_axis(s2));
    if (!req.ref_gpus.empty()) {
      axes.push_back({"ref_gpus", {}});
      for (int g : req.ref_gpus) axes.back().second.push_back(std::to_string(g));
    }
    TB_REQUIRE(!axes.empty(),
               "slurm sweep: what to vary? --set key=v1,v2 (layers, seq, micro_batch, global_batch, tp, "
               "pp, cp, vp), and with --proxies --ref-gpus N1,N2");
    size_t total = 1;
    for (const auto& a : axes) total *= a.second.size();
    TB_REQUIRE(total <= 1000, fmt::format("slurm sweep: {} points; at most 1000 in one job array", total));
    PlannedJob p{base, "job.sbatch", "", {}, false};
    p.job.name = "tb-" + req.recipe + "-sweep";
    p.job.nodes = nodes;
    p.job.args = {"run", req.recipe};
    if (cpu) p.job.args.insert(p.job.args.end(), {"--device", "cpu"});
    if (req.proxies) p.job.args.push_back("--proxy");
    p.job.args = with_passthrough(p.job.args);
    for (size_t k = 0; k < total; ++k) {
      std::vector<std::string> args, label;
      std::map<std::string, std::string> sets;
      int ref = cpu ? 0 : nodes * gpn;
      size_t rest = k;
      std::vector<std::string> picked(axes.size());
      for (size_t a = axes.size(); a-- > 0;) {
        picked[a] = axes[a].second[rest % axes[a].second.size()];
        rest /= axes[a].second.size();
      }
      for (size_t a = 0; a < axes.size(); ++a) {
        label.push_back(axes[a].first + "=" + picked[a]);
        if (axes[a].first == "ref_gpus") {
          ref = std::stoi(picked[a]);
          args.insert(args.end(), {"--ref-gpus", picked[a]});
        } else {
          sets[axes[a].first] = picked[a];
          args.insert(args.end(), {"--set", axes[a].first + "=" + picked[a]});
        }
      }
      if (req.proxies && !cpu &&
          std::none_of(axes.begin(), axes.end(), [](const auto& a) { return a.first == "ref_gpus"; }))
        args.insert(args.end(), {"--ref-gpus", std::to_string(ref)});
      validate(nodes, ref, sets);
      p.job.array.push_back(args);
      p.array_labels.push_back(fmt::format("{}", fmt::join(label, " ")));
    }
    p.label = fmt::format("{} sweep, {} points, {}{}", req.recipe, total, shape(nodes), mode);
    p.job.summary = fmt::format("{} sweep over {} points (job array) on {}{}", req.recipe, total, shape(nodes), mode);
    sub.jobs.push_back(std::move(p));
  }
  return sub;
}

std::vector<std::string> SubmittedJob::tags() const {
  if (array_labels.empty()) return {id};
  std::vector<std::string> t;
  for (size_t i = 0; i < array_labels.size(); ++i) t.push_back(fmt::format("{}_{}", id, i));
  return t;
}

Manifest submit(Submission sub, Scheduler& scheduler) {
  Manifest m;
  m.command = sub.command;
  m.recipe = sub.recipe;
  m.dir = sub.dir;
  m.notes = sub.notes;
  m.created =
      fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::now()));
  const auto offered = scheduler.mpi_types();
  for (auto& p : sub.jobs) {
    std::string note;
    p.job.mpi = choose_mpi(p.job.mpi, offered, note);
    if (!note.empty() && std::find(m.notes.begin(), m.notes.end(), note) == m.notes.end()) m.notes.push_back(note);
  }
  std::error_code ec;
  fs::create_directories(sub.dir / "logs", ec);
  fs::create_directories(sub.dir / "jobs", ec);
  TB_REQUIRE(fs::is_directory(sub.dir / "logs"),
             fmt::format("cannot create the submission folder {}: choose another with --out", sub.dir.string()));
  for (const auto& p : sub.jobs) {
    const fs::path script = sub.dir / p.script;
    std::ofstream(script) << render_sbatch(p.job);
    fs::permissions(script, fs::perms::owner_exec | fs::perms::group_exec, fs::perm_options::add, ec);
  }
  write_manifest(m);
  for (const auto& p : sub.jobs) {
    std::vector<std::string> extra;
    if (p.after_previous && !m.jobs.empty()) extra.push_back("--dependency=afterany:" + m.jobs.back().id);
    SubmittedJob j;
    j.id = scheduler.submit(sub.dir / p.script, extra);
    j.script = p.script;
    j.label = p.label;
    j.nodes = p.job.nodes;
    j.tasks = p.job.nodes * p.job.tasks_per_node;
    j.array_labels = p.array_labels;
    m.jobs.push_back(std::move(j));
    write_manifest(m);
  }
  return m;
}

void write_manifest(const Manifest& m) {
  nlohmann::json j = {{"schema", kManifestSchema}, {"command", m.command},  {"recipe", m.recipe},
                      {"created", m.created},      {"dir", m.dir.string()}, {"notes", m.notes}};
  j["jobs"] = nlohmann::json::array();
  for (const auto& s : m.jobs)
    j["jobs"].push_back({{"id", s.id},
                         {"script", s.script},
                         {"label", s.label},
                         {"nodes", s.nodes},
                         {"tasks", s.tasks},
                         {"array_labels", s.array_labels}});
  write_json_file(m.dir / "submission.json", j);
}

Manifest read_manifest(const fs::path& dir) {
  const fs::path file = dir / "submission.json";
  std::ifstream in(file);
  TB_REQUIRE(in, fmt::format("{} is not a trainbench slurm submission folder (no submission.json)", dir.string()));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    raise_config(fmt::format("{}: not valid JSON: {}", file.string(), e.what()));
  }
  TB_REQUIRE(j.value("schema", "") == kManifestSchema,
             fmt::format("{}: schema is not {}", file.string(), kManifestSchema));
  Manifest m;
  m.command = j.value("command", "");
  m.recipe = j.value("recipe", "");
  m.created = j.value("created", "");
  m.dir = dir;
  m.notes = j.value("notes", std::vector<std::string>{});
  for (const auto& x : j.value("jobs", nlohmann::json::array())) {
    SubmittedJob s;
    s.id = x.value("id", "");
    s.script = x.value("script", "");
    s.label = x.value("label", "");
    s.nodes = x.value("nodes", 1);
    s.tasks = x.value("tasks", 1);
    s.array_labels = x.value("array_labels", std::vector<std::string>{});
    m.jobs.push_back(std::move(s));
  }
  return m;
}

}  // namespace tb::launch
