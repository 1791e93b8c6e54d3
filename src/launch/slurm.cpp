// launch/slurm.cpp: sbatch / scontrol / sacct / srun --mpi=list and the parsing of what they print.
#include "launch/slurm.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <sstream>

#include "core/error.h"
#include "launch/process.h"

namespace tb::launch {
namespace {

int to_int(std::string_view s, int fallback = 0) {
  int v = fallback;
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}

// "3:0" -> exit 3, signal 0
void parse_exit(std::string_view s, JobState& st) {
  const auto colon = s.find(':');
  st.exit_code = to_int(s.substr(0, colon));
  if (colon != std::string_view::npos) st.signal = to_int(s.substr(colon + 1));
}

// "2-5%2", "1,3,7-8" -> {2,3,4,5} / {1,3,7,8}
std::vector<int> expand_tasks(std::string_view spec) {
  std::vector<int> out;
  spec = spec.substr(0, spec.find('%'));
  while (!spec.empty()) {
    const auto comma = spec.find(',');
    const std::string_view item = spec.substr(0, comma);
    const auto dash = item.find('-');
    const int a = to_int(item.substr(0, dash), -1);
    const int b = dash == std::string_view::npos ? a : to_int(item.substr(dash + 1), -1);
    for (int i = a; i >= 0 && i <= b; ++i) out.push_back(i);
    spec = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
  }
  return out;
}

std::string first_word(std::string_view s) { return std::string(s.substr(0, s.find(' '))); }

class SlurmCommands final : public Scheduler {
 public:
  std::string submit(const std::filesystem::path& script, const std::vector<std::string>& extra) override {
    std::vector<std::string> argv{"sbatch", "--parsable"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back(script.string());
    const ProcResult r = run_process(argv);
    if (r.rc == 127)
      raise_config("sbatch is not on PATH: run on a Slurm login node, or use --dry-run to see the script");
    if (r.rc != 0)
      raise_error(Error::Kind::io,
                  fmt::format("sbatch {} failed (exit {}): {}", script.string(), r.rc, r.err.empty() ? r.out : r.err));
    const std::string id = parse_job_id(r.out);
    if (id.empty()) raise_error(Error::Kind::io, fmt::format("sbatch printed no job id: '{}'", r.out));
    return id;
  }

  std::map<std::string, JobState> query(const std::vector<std::string>& ids) override {
    std::map<std::string, JobState> out;
    if (ids.empty()) return out;
    // scontrol knows pending, running and recently ended jobs (MinJobAge); one call per job as scontrol takes one.
    for (const auto& id : ids) {
      const ProcResult r = run_process({"scontrol", "show", "job", "-o", id});
      if (r.rc == 0) out.merge(parse_scontrol(r.out));
    }
    // sacct (where accounting is on) remembers the rest.
    const ProcResult r =
        run_process({"sacct", "-n", "-P", "-X", "-j", join(ids, ","), "-o", "JobID,State,ExitCode,Reason"});
    if (r.rc == 0) out.merge(parse_sacct(r.out));  // merge keeps scontrol's entry where both know a job
    return out;
  }

  std::vector<std::string> mpi_types() override {
    const ProcResult r = run_process({"srun", "--mpi=list"});
    return r.rc == 0 ? parse_mpi_list(r.out + r.err) : std::vector<std::string>{};
  }
};

}  // namespace

std::unique_ptr<Scheduler> slurm_commands() { return std::make_unique<SlurmCommands>(); }

std::map<std::string, JobState> parse_scontrol(std::string_view text) {
  std::map<std::string, JobState> out;
  std::istringstream lines{std::string(text)};
  std::string line;
  while (std::getline(lines, line)) {
    std::map<std::string, std::string> f;
    std::istringstream words(line);
    std::string w;
    while (words >> w) {
      const auto eq = w.find('=');
      if (eq != std::string::npos && !f.contains(w.substr(0, eq))) f[w.substr(0, eq)] = w.substr(eq + 1);
    }
    if (!f.contains("JobId") || !f.contains("JobState")) continue;
    JobState st;
    st.state = f["JobState"];
    st.reason = f.contains("Reason") && f["Reason"] != "None" ? f["Reason"] : "";
    if (f.contains("ExitCode")) parse_exit(f["ExitCode"], st);
    const auto array_job = f.find("ArrayJobId");
    const auto task = f.find("ArrayTaskId");
    if (array_job != f.end() && task != f.end()) {
      for (int t : expand_tasks(task->second)) out[fmt::format("{}_{}", array_job->second, t)] = st;
    } else {
      out[f["JobId"]] = st;
    }
  }
  return out;
}

std::map<std::string, JobState> parse_sacct(std::string_view text) {
  std::map<std::string, JobState> out;
  std::istringstream lines{std::string(text)};
  std::string line;
  while (std::getline(lines, line)) {
    std::vector<std::string> f;
    std::istringstream cols(line);
    for (std::string c; std::getline(cols, c, '|');) f.push_back(c);
    if (f.size() < 3 || f[0].empty()) continue;
    JobState st;
    st.state = first_word(f[1]);  // "CANCELLED by 0" -> CANCELLED
    parse_exit(f[2], st);
    if (f.size() > 3 && f[3] != "None") st.reason = f[3];
    const std::string& id = f[0];
    const auto us = id.find('_');
    if (us != std::string::npos && id.size() > us + 1 && id[us + 1] == '[') {  // "12_[2-5]": pending tasks
      const std::string spec = id.substr(us + 2, id.find(']') - us - 2);
      for (int t : expand_tasks(spec)) out[fmt::format("{}_{}", id.substr(0, us), t)] = st;
    } else {
      out[id] = st;
    }
  }
  return out;
}

std::vector<std::string> parse_mpi_list(std::string_view text) {
  // "MPI plugin types are...\n\tpmix\n\tnone\n\tpmi2\nspecific pmix plugin versions available: pmix_v4"
  std::vector<std::string> out;
  std::istringstream lines{std::string(text)};
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || (line[0] != '\t' && line[0] != ' ')) continue;
    std::string w = first_word(line.substr(line.find_first_not_of(" \t")));
    if (!w.empty() && w.find(':') == std::string::npos) out.push_back(w);
  }
  return out;
}

std::string parse_job_id(std::string_view s) {
  const auto end = s.find_first_of(";\n ");
  std::string id(s.substr(0, end));
  return !id.empty() && std::all_of(id.begin(), id.end(), [](char c) { return c >= '0' && c <= '9'; }) ? id : "";
}

std::string choose_mpi(const std::string& wanted, const std::vector<std::string>& offered, std::string& note) {
  note.clear();
  if (wanted.empty() || wanted == "none" || offered.empty()) return wanted;
  auto has = [&](std::string_view t) { return std::find(offered.begin(), offered.end(), t) != offered.end(); };
  if (has(wanted)) return wanted;
  const std::string pick = has("pmi2") ? "pmi2" : "none";
  note = fmt::format("this cluster's srun offers no --mpi={} (srun --mpi=list: {}); using --mpi={}", wanted,
                     join(offered, ", "), pick);
  return pick;
}

bool is_finished(std::string_view s) {
  for (std::string_view live :
       {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD",
        "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD", "SPECIAL_EXIT"})
    if (s == live) return false;
  return true;
}

bool is_success(std::string_view s) { return s == "COMPLETED"; }

}  // namespace tb::launch
