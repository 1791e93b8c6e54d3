// launch/collect.cpp: job states (scheduler, else the job's own job.json), record merging, summary.
#include "launch/collect.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <fstream>
#include <map>

#include "core/error.h"
#include "core/log.h"
#include "core/provenance.h"
#include "core/record.h"

namespace tb::launch {
namespace fs = std::filesystem;
namespace {

std::vector<std::string> tail(const fs::path& file, int n) {
  std::ifstream in(file);
  std::deque<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
    if (int(lines.size()) > n) lines.pop_front();
  }
  return {lines.begin(), lines.end()};
}

fs::path log_path(const Manifest& m, const std::string& tag) { return m.dir / "logs" / (tag + ".out"); }

// The task folders of a job with results, in rank order (rank2 before rank10).
std::vector<fs::path> task_folders(const fs::path& job_dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(job_dir, ec))
    if (e.is_directory() && fs::exists(e.path() / "results.jsonl")) out.push_back(e.path());
  auto key = [](const fs::path& p) {
    const std::string n = p.filename().string();
    return n.starts_with("rank") ? std::make_pair(std::atoi(n.c_str() + 4), n) : std::make_pair(1 << 30, n);
  };
  std::sort(out.begin(), out.end(), [&](const fs::path& a, const fs::path& b) { return key(a) < key(b); });
  return out;
}

// Reads one task's records, tagged with the job and task; counts lines that are not records.
std::vector<nlohmann::json> task_records(const fs::path& folder, const std::string& tag, int& bad) {
  std::vector<nlohmann::json> out;
  std::ifstream in(folder / "results.jsonl");
  const std::string name = folder.filename().string();
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !check_record(j).empty()) {
      ++bad;
      continue;
    }
    j["slurm_job"] = tag;
    if (name.starts_with("rank"))
      j["slurm_task"] = std::atoi(name.c_str() + 4);
    else if (name.starts_with("node-"))
      j["slurm_node"] = name.substr(5);
    out.push_back(std::move(j));
  }
  return out;
}

nlohmann::json failure_record(const JobReport& r, const Manifest& m) {
  std::string msg = fmt::format("slurm job {} {}", r.tag, r.state);
  if (r.state == "FAILED" || r.exit_code != 0) msg += fmt::format(", exit code {}", r.exit_code);
  if (r.signal) msg += fmt::format(", signal {}", r.signal);
  if (!r.reason.empty()) msg += fmt::format(" ({})", r.reason);
  for (auto it = r.log_tail.rbegin(); it != r.log_tail.rend(); ++it)
    if (!it->empty()) {
      msg += ": " + *it;
      break;
    }
  int world = 1;
  for (const auto& j : m.jobs)
    if (r.tag == j.id || r.tag.starts_with(j.id + "_")) world = std::max(1, j.tasks);
  return {{"schema", kResultSchema},
          {"run", "slurm-" + r.tag},
          {"bench", "slurm.job"},
          {"case", r.label},
          {"world", world},
          {"status", "error"},
          {"error", {{"kind", "slurm"}, {"fatal", false}, {"msg", msg}}},
          {"slurm_job", r.tag},
          {"slurm_state", r.state},
          {"exit_code", r.exit_code},
          {"log", r.log.string()}};
}

}  // namespace

bool JobReport::finished() const { return is_finished(state); }
bool JobReport::failed() const { return finished() && !is_success(state); }

std::vector<JobReport> job_reports(const Manifest& m, Scheduler& scheduler, int tail_lines) {
  std::vector<std::string> ids;
  for (const auto& j : m.jobs) ids.push_back(j.id);
  const auto known = scheduler.query(ids);
  std::vector<JobReport> out;
  for (const auto& j : m.jobs) {
    const auto tags = j.tags();
    for (size_t i = 0; i < tags.size(); ++i) {
      JobReport r;
      r.tag = tags[i];
      r.label = j.array_labels.empty() ? j.label : fmt::format("{} [{}]", j.label, j.array_labels[i]);
      r.log = log_path(m, r.tag);
      const fs::path job_dir = m.dir / "jobs" / r.tag;
      nlohmann::json own;  // the script's own account
      if (std::ifstream in(job_dir / "job.json"); in) own = nlohmann::json::parse(in, nullptr, false);
      const bool have_own = own.is_object() && own.contains("state");
      if (auto it = known.find(r.tag); it != known.end()) {
        r.state = it->second.state, r.exit_code = it->second.exit_code, r.signal = it->second.signal;
        r.reason = it->second.reason, r.source = "scheduler";
      } else if (have_own) {
        r.source = "job.json";
        r.state = own["state"].get<std::string>();
        if (own["exit_code"].is_number_integer()) r.exit_code = own["exit_code"].get<int>();
        if (r.state == "RUNNING") {
          r.state = "LOST";
          r.reason = "started, never finished, and Slurm no longer knows it (time limit? node failure?)";
        }
      } else {
        r.state = "UNKNOWN";
        r.reason = "Slurm does not know this job and it left no job.json";
      }
      for (const auto& f : task_folders(job_dir)) {
        ++r.tasks;
        int bad = 0;
        r.records += int(task_records(f, r.tag, bad).size());
      }
      if (r.failed()) r.log_tail = tail(r.log, tail_lines);
      out.push_back(std::move(r));
    }
  }
  return out;
}

Collection collect(const Manifest& m, Scheduler& scheduler, const fs::path& out) {
  Collection c;
  c.jobs = job_reports(m, scheduler);
  std::error_code ec;
  fs::create_directories(out, ec);
  c.results = out / "results.jsonl";
  c.summary = out / "summary.json";
  const fs::path tmp = c.results.string() + ".tmp";
  {
    std::ofstream f(tmp);
    if (!f)
      raise_error(Error::Kind::io, fmt::format("cannot write {}: choose another folder with --out", tmp.string()));
    int bad = 0;
    for (const auto& r : c.jobs) {
      for (const auto& folder : task_folders(m.dir / "jobs" / r.tag))
        for (const auto& rec : task_records(folder, r.tag, bad)) {
          f << rec.dump() << "\n";
          ++c.records;
        }
      if (r.failed()) {
        f << failure_record(r, m).dump() << "\n";
        ++c.failures;
      }
    }
    if (bad > 0) log::warn("collect: skipped {} lines that are not trainbench.result.v1 records", bad);
  }
  fs::rename(tmp, c.results, ec);
  if (ec) raise_error(Error::Kind::io, fmt::format("cannot write {}: {}", c.results.string(), ec.message()));
  nlohmann::json s = summary_json(m, c.jobs);
  s["results"] = c.results.string();
  s["records"] = c.records;
  write_json_file(c.summary, s);
  return c;
}

nlohmann::json summary_json(const Manifest& m, const std::vector<JobReport>& jobs) {
  nlohmann::json s = {{"schema", "trainbench.slurm.summary.v1"},
                      {"submission", m.dir.string()},
                      {"command", m.command},
                      {"recipe", m.recipe}};
  std::map<std::string, int> counts;
  s["jobs"] = nlohmann::json::array();
  for (const auto& r : jobs) {
    ++counts[r.state];
    nlohmann::json j = {{"job", r.tag},           {"label", r.label},         {"state", r.state},
                        {"state_from", r.source}, {"exit_code", r.exit_code}, {"tasks", r.tasks},
                        {"records", r.records},   {"log", r.log.string()}};
    if (r.signal) j["signal"] = r.signal;
    if (!r.reason.empty()) j["reason"] = r.reason;
    if (r.failed()) j["log_tail"] = r.log_tail;
    s["jobs"].push_back(std::move(j));
  }
  s["states"] = counts;
  return s;
}

std::string render_reports(const std::vector<JobReport>& jobs) {
  std::string s =
      fmt::format("{:<12} {:<10} {:>4} {:>5} {:>7}  {}\n", "job", "state", "exit", "tasks", "records", "what");
  int failed = 0, live = 0;
  for (const auto& r : jobs) {
    s += fmt::format("{:<12} {:<10} {:>4} {:>5} {:>7}  {}{}\n", r.tag, r.state,
                     r.finished() ? std::to_string(r.exit_code) : "-", r.tasks, r.records, r.label,
                     r.reason.empty() ? std::string() : fmt::format("  ({})", r.reason));
    if (r.failed()) {
      ++failed;
      s += fmt::format("  log {} (last {} lines):\n", r.log.string(), r.log_tail.size());
      for (const auto& l : r.log_tail) s += "    | " + l + "\n";
    }
    if (!r.finished()) ++live;
  }
  if (failed) s += fmt::format("{} job{} failed\n", failed, failed > 1 ? "s" : "");
  if (live)
    s += fmt::format("{} job{} still pending or running: run this again later (or with --wait SECONDS)\n", live,
                     live > 1 ? "s" : "");
  return s;
}

}  // namespace tb::launch
