// launch/sbatch.cpp: the batch script's text (see sbatch.h for its contract).
#include "launch/sbatch.h"

#include <fmt/format.h>

#include "core/error.h"
#include "launch/process.h"
#include "launch/safe_text.h"

namespace tb::launch {
namespace {

bool letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// --name[=value] or -X[value]: what sbatch reads as an option on an #SBATCH line.
bool sbatch_option(std::string_view o) {
  if (o.starts_with("--")) {
    const std::string_view name = o.substr(2, o.find('=') == std::string_view::npos ? o.npos : o.find('=') - 2);
    if (name.empty() || !letter(name.front())) return false;
    for (char c : name)
      if (!letter(c) && !(c >= '0' && c <= '9') && c != '-' && c != '_') return false;
    return true;
  }
  return o.size() >= 2 && o[0] == '-' && letter(o[1]);
}

// Every value of the job, before a line is written: none may hold a control character (a newline would start a
// shell line of its own), an #SBATCH directive is one option, exported names are names.
void check_values(const SlurmJob& j) {
  require_printable("slurm: the command", j.command);
  require_printable("slurm: the summary", j.summary);
  for (const auto& [what, v] : {std::pair{"--partition", &j.partition}, {"--account", &j.account},
                                {"--time", &j.time}, {"--mpi", &j.mpi}, {"--container-image", &j.container_image},
                                {"--trainbench", &j.trainbench}})
    require_printable(fmt::format("slurm: {}", what), *v);
  require_printable("slurm: the job name", j.name);
  require_printable("slurm: the submission folder", j.dir.string());
  for (const auto& m : j.container_mounts) require_printable("slurm: a container mount", m);
  for (const auto& e : j.sbatch_extra) {
    require_printable("slurm: an --sbatch option", e);
    TB_REQUIRE(sbatch_option(e), fmt::format("slurm: --sbatch '{}': each is one sbatch option, e.g. --qos=high or -p "
                                             "batch",
                                             e));
  }
  for (const auto& e : j.srun_extra) require_printable("slurm: an srun option", e);
  for (const auto& line : j.setup) require_printable("slurm: a setup line of the site file", line);
  for (const auto& [k, v] : j.env) {
    TB_REQUIRE(env_name(k), fmt::format("slurm: '{}' is not an environment variable name (letters, digits, '_')",
                                        printable(k)));
    require_printable(fmt::format("slurm: the environment variable {}", k), v);
  }
  for (const auto& a : j.args) require_printable("slurm: an argument", a);
  for (const auto& task : j.array)
    for (const auto& a : task) require_printable("slurm: an array task's argument", a);
}

}  // namespace

std::string render_sbatch(const SlurmJob& j) {
  check_values(j);
  TB_REQUIRE(j.nodes >= 1 && j.tasks_per_node >= 1, "slurm: nodes and tasks per node must be at least 1");
  TB_REQUIRE(j.dir.is_absolute(),
             fmt::format("slurm: the submission folder must be an absolute path, not {}", j.dir.string()));
  const bool array = !j.array.empty();
  const std::string dir = j.dir.string();
  std::string s = "#!/bin/bash\n";
  s += fmt::format("# trainbench slurm {}: {}\n", j.command, j.summary);
  s += fmt::format("# {} node{} x {} task{}{}; records in {}/jobs/<job>/, logs in {}/logs/\n", j.nodes,
                   j.nodes > 1 ? "s" : "", j.tasks_per_node, j.tasks_per_node > 1 ? "s" : "",
                   j.per_node ? " (one per node)" : (j.gpus_per_node > 0 ? " (one per GPU)" : " (CPU)"), dir, dir);
  auto opt = [&](const std::string& o) { s += "#SBATCH " + o + "\n"; };
  for (const std::string* v : {&j.name, &j.partition, &j.account, &j.time, &dir})
    TB_REQUIRE(v->find_first_of(" \t\n'\"") == std::string::npos,
               fmt::format("slurm: '{}' cannot go into an #SBATCH line (no spaces or quotes)", *v));
  opt("--job-name=" + j.name);
  opt(fmt::format("--nodes={}", j.nodes));
  opt(fmt::format("--ntasks-per-node={}", j.tasks_per_node));
  if (j.exclusive) opt("--exclusive");
  if (j.gpus_per_node > 0 && j.gres) opt(fmt::format("--gres=gpu:{}", j.gpus_per_node));
  if (!j.partition.empty()) opt("--partition=" + j.partition);
  if (!j.account.empty()) opt("--account=" + j.account);
  if (!j.time.empty()) opt("--time=" + j.time);
  if (array) opt(fmt::format("--array=0-{}", j.array.size() - 1));
  opt("--chdir=" + dir);
  opt("--output=" + dir + (array ? "/logs/%A_%a.out" : "/logs/%j.out"));
  for (const auto& e : j.sbatch_extra) opt(e);
  s += "set -uo pipefail\n\n";

  s += fmt::format("export TB_SUBMIT_DIR={}\n", shell_quote(dir));
  s += "TB_JOB=${SLURM_ARRAY_JOB_ID:+${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}}\n";
  s += "export TB_JOB=${TB_JOB:-$SLURM_JOB_ID}\n";
  s += "export TB_JOB_DIR=\"$TB_SUBMIT_DIR/jobs/$TB_JOB\"\n";
  s += "mkdir -p \"$TB_JOB_DIR\"\n";
  s += "tb_state() {  # the job's own account of its state, read by `trainbench slurm status|collect`\n";
  s += "  printf '{\"job\":\"%s\",\"state\":\"%s\",\"exit_code\":%s,\"nodes\":\"%s\",\"time\":\"%s\"}\\n' \"$TB_JOB\" "
       "\"$1\" \"$2\" \\\n";
  s += "    \"${SLURM_JOB_NODELIST:-}\" \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\" > \"$TB_JOB_DIR/job.json\"\n";
  s += "}\n";
  s += "tb_state RUNNING null\n";
  if (!j.env.empty()) {
    s += "\n# passed through from the submitting shell (and the site's env_set)\n";
    for (const auto& [k, v] : j.env) s += fmt::format("export {}={}\n", k, shell_quote(v));
  }
  if (!j.setup.empty()) {
    s += "\n# site setup\n";
    for (const auto& line : j.setup) s += line + "\n";
  }
  if (array) {
    s += "\ncase \"$SLURM_ARRAY_TASK_ID\" in\n";
    for (size_t i = 0; i < j.array.size(); ++i) s += fmt::format("  {}) TB_ARGS=({}) ;;\n", i, shell_join(j.array[i]));
    s += "  *) echo \"trainbench: no arguments for array task $SLURM_ARRAY_TASK_ID\" >&2; tb_state FAILED 2; exit 2 "
         ";;\n";
    s += "esac\n";
  }

  std::vector<std::string> srun{"srun"};
  if (!j.mpi.empty()) srun.push_back("--mpi=" + j.mpi);
  if (!j.container_image.empty()) {
    srun.push_back("--container-image=" + j.container_image);
    std::vector<std::string> mounts{dir + ":" + dir};  // the records must land outside the container
    mounts.insert(mounts.end(), j.container_mounts.begin(), j.container_mounts.end());
    srun.push_back("--container-mounts=" + join(mounts, ","));
  }
  srun.insert(srun.end(), j.srun_extra.begin(), j.srun_extra.end());
  const std::string folder = j.per_node ? "node-${SLURMD_NODENAME:-$(hostname -s)}"
                                        : "rank${SLURM_PROCID:-${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}}";
  if (j.distributed)
    s += fmt::format(
        "\n# one distributed job: its {} tasks ({}) are the ranks of one training run; each writes its "
        "records to $TB_JOB_DIR/rank<N>, rank 0 the run's\n",
        j.nodes * j.tasks_per_node, j.gpus_per_node > 0 ? "one per GPU" : "CPU");
  else
    s += fmt::format("\n# {}; each writes its records to $TB_JOB_DIR/{}\n",
                     j.per_node            ? "one task per node"
                     : j.gpus_per_node > 0 ? "one task per GPU, each on its own"
                                           : "CPU tasks, each on its own",
                     j.per_node ? "node-<host>" : "rank<N>");
  s += shell_join(srun) + " \\\n";
  s += fmt::format("  bash -c 'exec \"$0\" \"$@\" --out \"$TB_JOB_DIR/{}\"' \\\n", folder);
  s += fmt::format("  {} {}{}\n", shell_quote(j.trainbench), shell_join(j.args), array ? " \"${TB_ARGS[@]}\"" : "");
  s += "rc=$?\n";
  s += "if [ \"$rc\" -eq 0 ]; then tb_state COMPLETED 0; else tb_state FAILED \"$rc\"; fi\n";
  s += "exit \"$rc\"\n";
  return s;
}

}  // namespace tb::launch
