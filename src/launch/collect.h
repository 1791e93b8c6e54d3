// launch/collect.h: `trainbench slurm status|collect <folder>`: the fate of every job of a submission and one
// results folder for all of them. A job's state comes from the scheduler while it knows the job (scontrol, then
// sacct), else from the job's own jobs/<job>/job.json (written by the script: RUNNING, then COMPLETED/FAILED and
// the exit code), else UNKNOWN. A job that started but never wrote its end (killed: time limit, node failure) and
// that Slurm no longer knows is LOST.
// collect writes <out>/results.jsonl: every task's records with "slurm_job" (the job tag) and "slurm_task" (the
// rank; per-node checks: "slurm_node"), plus one "status":"error" record (bench "slurm.job") per job that failed,
// and <out>/summary.json: per job its state, exit code, records, log and, when it failed, the log's last lines.
// A job still pending or running is listed as such: collect again later (or with --wait).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "launch/slurm.h"
#include "launch/submission.h"

namespace tb::launch {

struct JobReport {
  std::string tag;     // "12", or "12_3" for array task 3
  std::string label;   // what it runs
  std::string state;   // Slurm's word, or UNKNOWN / LOST
  std::string source;  // "scheduler", "job.json" or "" (nothing known)
  int exit_code = 0, signal = 0;
  std::string reason;
  int tasks = 0;  // task folders with a results.jsonl
  int records = 0;
  std::filesystem::path log;          // Slurm's output file
  std::vector<std::string> log_tail;  // for failed jobs: the last lines of the log
  bool finished() const;
  bool failed() const;  // finished and not COMPLETED
};

std::vector<JobReport> job_reports(const Manifest& m, Scheduler& scheduler, int tail_lines = 20);

struct Collection {
  std::vector<JobReport> jobs;
  int records = 0;   // the tasks' records
  int failures = 0;  // error records written for failed jobs
  std::filesystem::path results, summary;
};
// Rewrites <out>/results.jsonl and <out>/summary.json (out may be the submission folder itself).
Collection collect(const Manifest& m, Scheduler& scheduler, const std::filesystem::path& out);

nlohmann::json summary_json(const Manifest& m, const std::vector<JobReport>& jobs);
std::string render_reports(const std::vector<JobReport>& jobs);  // the human table (failed jobs with their log tails)

}  // namespace tb::launch
