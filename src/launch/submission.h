// launch/submission.h: `trainbench slurm run|sweep|scale|check` as data. A request (flags over site defaults)
// becomes a Submission: one folder on the shared file system holding the rendered scripts, logs/, jobs/<job>/
// (each task's run.json and results.jsonl) and submission.json (what was submitted: job ids, labels, array sizes),
// which `status` and `collect` read back. Recipes and --set values are checked (recipe/plan.h) before anything is
// written or submitted.
//   run:   one distributed job: its nodes x GPUs-per-node tasks are the ranks of one `trainbench run <recipe>`, which
//          trains the recipe at its layout for that many GPUs (a node count whose GPU count has no layout fails here);
//          --proxies: independent tasks instead, each `trainbench run <recipe> --proxy --ref-gpus <that count>`
//   sweep: one job array of such jobs over the product of --set key=v1,v2 (and, --proxies only, --ref-gpus values)
//   scale: one such job per node count, each after the previous one (--dependency=afterany)
//   check: one job, one task per node running `trainbench check`
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "launch/sbatch.h"
#include "launch/site.h"
#include "launch/slurm.h"

namespace tb::recipe {
struct Recipe;
}

namespace tb::launch {

struct SlurmRequest {
  std::string command = "run";                       // run | sweep | scale | check
  std::string recipe;                                // run, sweep, scale
  std::vector<int> nodes{1};                         // scale: several counts; otherwise one
  std::optional<int> gpus_per_node, tasks_per_node;  // tasks default: GPUs per node (cuda), 1 (cpu, check)
  std::string device = "cuda";                       // cuda | cpu (cpu: no GPU request, `run --device cpu`)
  std::optional<std::string> partition, account, time, container_image, mpi, trainbench;
  std::vector<std::string> mounts, sbatch;  // added to the site's
  std::optional<bool> gres, exclusive;
  std::vector<std::string> sets;                         // sweep: key=v1,v2,... (the product of all of them)
  std::vector<int> ref_gpus;                             // sweep --proxies: reference GPU counts to stand for
  bool proxies = false;                                  // independent one-GPU proxies instead of one distributed job
  std::vector<std::string> passthrough;                  // after `--`: appended to the trainbench command of every task
  std::filesystem::path dir;                             // the submission folder (absolute)
  std::vector<std::pair<std::string, std::string>> env;  // to export (launch::env_passthrough)
};

struct PlannedJob {
  SlurmJob job;
  std::string script;                     // file name in the folder, e.g. "job.sbatch"
  std::string label;                      // e.g. "llama3.1-8b, 2 nodes x 8 GPUs"
  std::vector<std::string> array_labels;  // per array task, e.g. "layers=4 ref_gpus=16"
  bool after_previous = false;            // submitted with --dependency=afterany:<previous job>
};

struct Submission {
  std::string command, recipe;
  std::filesystem::path dir;
  std::vector<PlannedJob> jobs;
  std::vector<std::string> notes;  // said once on submission (e.g. an MPI fallback)
};

// Builds the jobs; `recipes` validates names, layouts and --set values (may be empty for `check`).
Submission plan_slurm(const SlurmRequest& req, const Site& site, const std::vector<recipe::Recipe>& recipes);

// What submission.json holds.
struct SubmittedJob {
  std::string id, script, label;
  int nodes = 1, tasks = 1;               // tasks: the whole job's (nodes x tasks per node)
  std::vector<std::string> array_labels;  // non-empty: an array job of that many tasks
  std::vector<std::string> tags() const;  // "12" or "12_0", "12_1", ...
};
struct Manifest {
  std::string command, recipe, created;
  std::filesystem::path dir;
  std::vector<SubmittedJob> jobs;
  std::vector<std::string> notes;
};

// Checks the cluster's MPI types (falls back from pmix when srun lacks it, with a note), writes the scripts and
// folders, submits in order, and writes submission.json after every job (nothing submitted goes unrecorded).
Manifest submit(Submission sub, Scheduler& scheduler);
void write_manifest(const Manifest& m);
Manifest read_manifest(const std::filesystem::path& dir);  // Error{config} when it is not a submission folder

}  // namespace tb::launch
