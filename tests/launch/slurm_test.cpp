// Tests launch/slurm and launch/collect without a cluster: the parsers of scontrol / sacct / srun --mpi=list /
// sbatch output (captured from Slurm 22.05), the MPI fallback, and status/collect through a fake scheduler:
// records merged with slurm_job/slurm_task, a failed job reported with its exit code and log tail (and an error
// record), a pending job noted, a job Slurm forgot read from its job.json, a killed one reported LOST.
#include "launch/slurm.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/record.h"
#include "launch/collect.h"
#include "launch/submission.h"

namespace {
namespace fs = std::filesystem;
using namespace tb::launch;

TEST(SlurmParse, Scontrol) {
  const std::string out =
      "JobId=4 JobName=f.sbatch UserId=root(0) JobState=FAILED Reason=NonZeroExitCode Dependency=(null) ExitCode=3:0 "
      "RunTime=00:00:00\n"
      "JobId=5 ArrayJobId=5 ArrayTaskId=2-4%2 JobName=a JobState=PENDING Reason=Resources ExitCode=0:0\n"
      "JobId=7 ArrayJobId=5 ArrayTaskId=1 JobName=a JobState=RUNNING Reason=None ExitCode=0:0\n"
      "JobId=9 JobName=b JobState=CANCELLED Reason=None ExitCode=0:15\n";
  const auto s = parse_scontrol(out);
  ASSERT_EQ(s.size(), 6u);
  EXPECT_EQ(s.at("4").state, "FAILED");
  EXPECT_EQ(s.at("4").exit_code, 3);
  EXPECT_EQ(s.at("4").reason, "NonZeroExitCode");
  for (const char* t : {"5_2", "5_3", "5_4"}) EXPECT_EQ(s.at(t).state, "PENDING") << t;
  EXPECT_EQ(s.at("5_1").state, "RUNNING");
  EXPECT_EQ(s.at("5_1").reason, "");
  EXPECT_EQ(s.at("9").signal, 15);
}

TEST(SlurmParse, Sacct) {
  const auto s = parse_sacct(
      "12|COMPLETED|0:0|None\n13|CANCELLED by 0|0:0|None\n14_[1-2]|PENDING|0:0|Priority\n"
      "14_0|FAILED|2:0|NonZeroExitCode\n");
  ASSERT_EQ(s.size(), 5u);
  EXPECT_EQ(s.at("13").state, "CANCELLED");
  EXPECT_EQ(s.at("14_2").reason, "Priority");
  EXPECT_EQ(s.at("14_0").exit_code, 2);
}

TEST(SlurmParse, MpiListJobIdAndFallback) {
  const auto types = parse_mpi_list(
      "MPI plugin types are...\n\tpmix\n\tnone\n\tcray_shasta\n\tpmi2\nspecific pmix plugin versions available: "
      "pmix_v4\n");
  EXPECT_EQ(types, (std::vector<std::string>{"pmix", "none", "cray_shasta", "pmi2"}));
  EXPECT_EQ(parse_job_id("1234\n"), "1234");
  EXPECT_EQ(parse_job_id("1234;cluster\n"), "1234");
  EXPECT_EQ(parse_job_id("sbatch: error"), "");
  std::string note;
  EXPECT_EQ(choose_mpi("pmix", types, note), "pmix");
  EXPECT_TRUE(note.empty());
  EXPECT_EQ(choose_mpi("pmix", {"none", "pmi2"}, note), "pmi2");
  EXPECT_NE(note.find("no --mpi=pmix"), std::string::npos) << note;
  EXPECT_EQ(choose_mpi("pmix", {"none"}, note), "none");
  EXPECT_EQ(choose_mpi("pmix", {}, note), "pmix");  // nothing known: keep what was asked
}

// Submits nothing real: hands out ids and reports the states it is told.
class FakeScheduler final : public Scheduler {
 public:
  std::map<std::string, JobState> states;
  std::vector<std::string> offered{"pmi2", "none"};
  std::vector<std::vector<std::string>> submitted;
  int next = 100;
  std::string submit(const fs::path& script, const std::vector<std::string>& extra) override {
    submitted.push_back(extra);
    submitted.back().push_back(script.filename().string());
    return std::to_string(next++);
  }
  std::map<std::string, JobState> query(const std::vector<std::string>&) override { return states; }
  std::vector<std::string> mpi_types() override { return offered; }
};

struct Folder {
  fs::path path = fs::temp_directory_path() / ("tb_collect_" + std::to_string(::getpid()));
  Folder() { fs::remove_all(path); }
  ~Folder() { fs::remove_all(path); }
  void write(const fs::path& rel, const std::string& text) const {
    fs::create_directories((path / rel).parent_path());
    std::ofstream(path / rel) << text;
  }
};

std::string record(const std::string& run) {
  tb::Record r;
  r.bench = "run";
  r.name = "tiny/fp32/1gpus";
  return tb::to_json(r, run).dump() + "\n";
}

TEST(SlurmSubmit, FallsBackFromPmixChainsScaleAndRecordsEveryJob) {
  Folder f;
  Submission sub;
  sub.command = "scale";
  sub.recipe = "tiny";
  sub.dir = f.path;
  for (int n : {1, 2}) {
    PlannedJob p;
    p.job.nodes = n;
    p.job.dir = f.path;
    p.job.name = "tb-tiny";
    p.job.args = {"run", "tiny"};
    p.script = "job-" + std::to_string(n) + "n.sbatch";
    p.label = "tiny";
    p.after_previous = n > 1;
    sub.jobs.push_back(p);
  }
  FakeScheduler s;
  const Manifest m = submit(sub, s);
  ASSERT_EQ(m.jobs.size(), 2u);
  EXPECT_EQ(m.jobs[0].id, "100");
  EXPECT_EQ(s.submitted[1], (std::vector<std::string>{"--dependency=afterany:100", "job-2n.sbatch"}));
  ASSERT_EQ(m.notes.size(), 1u);
  EXPECT_NE(m.notes[0].find("using --mpi=pmi2"), std::string::npos);
  std::ifstream script(f.path / "job-1n.sbatch");
  const std::string text((std::istreambuf_iterator<char>(script)), {});
  EXPECT_NE(text.find("srun --mpi=pmi2"), std::string::npos) << text;
  EXPECT_TRUE(fs::is_directory(f.path / "logs"));
  const Manifest back = read_manifest(f.path);
  EXPECT_EQ(back.jobs.size(), 2u);
  EXPECT_EQ(back.jobs[1].id, "101");
  EXPECT_EQ(back.command, "scale");
}

TEST(SlurmCollect, MergesRecordsAndReportsEveryFate) {
  Folder f;
  Manifest m;
  m.command = "sweep";
  m.recipe = "tiny";
  m.dir = f.path;
  m.jobs.push_back({"10", "job.sbatch", "tiny ok", 1, 2, {}});
  m.jobs.push_back({"11", "job.sbatch", "tiny bad", 1, 2, {}});
  m.jobs.push_back({"12", "job.sbatch", "tiny sweep", 1, 1, {"layers=1", "layers=2", "layers=3"}});
  m.jobs.push_back({"13", "job.sbatch", "tiny purged", 1, 1, {}});
  write_manifest(m);
  f.write("jobs/10/rank0/results.jsonl", record("r0"));
  f.write("jobs/10/rank1/results.jsonl", record("r1") + "not json\n");
  f.write("jobs/10/job.json", R"({"job":"10","state":"COMPLETED","exit_code":0})");
  f.write("logs/11.out", "starting\ntrainbench run: --steps: Value 0 not in range\n");
  f.write("jobs/11/job.json", R"({"job":"11","state":"FAILED","exit_code":2})");
  f.write("jobs/12_0/rank0/results.jsonl", record("s0"));
  f.write("jobs/12_0/job.json", R"({"job":"12_0","state":"COMPLETED","exit_code":0})");
  f.write("jobs/12_1/job.json", R"({"job":"12_1","state":"RUNNING","exit_code":null})");  // killed, Slurm forgot
  f.write("jobs/13/job.json", R"({"job":"13","state":"COMPLETED","exit_code":0})");
  f.write("jobs/13/rank0/results.jsonl", record("p0"));
  FakeScheduler s;
  s.states["10"] = {"COMPLETED", 0, 0, ""};
  s.states["11"] = {"FAILED", 2, 0, "NonZeroExitCode"};
  s.states["12_0"] = {"COMPLETED", 0, 0, ""};
  s.states["12_2"] = {"PENDING", 0, 0, "Resources"};

  const Collection c = collect(read_manifest(f.path), s, f.path / "out");
  ASSERT_EQ(c.jobs.size(), 6u);
  std::map<std::string, JobReport> by;
  for (const auto& r : c.jobs) by[r.tag] = r;
  EXPECT_EQ(by["10"].state, "COMPLETED");
  EXPECT_EQ(by["10"].records, 2);
  EXPECT_EQ(by["11"].state, "FAILED");
  EXPECT_EQ(by["11"].exit_code, 2);
  ASSERT_FALSE(by["11"].log_tail.empty());
  EXPECT_NE(by["11"].log_tail.back().find("--steps"), std::string::npos);
  EXPECT_EQ(by["12_1"].state, "LOST");
  EXPECT_EQ(by["12_2"].state, "PENDING");
  EXPECT_FALSE(by["12_2"].finished());
  EXPECT_EQ(by["13"].state, "COMPLETED");
  EXPECT_EQ(by["13"].source, "job.json");
  EXPECT_EQ(c.records, 4);

  std::ifstream in(c.results);
  std::vector<nlohmann::json> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(nlohmann::json::parse(l));
  ASSERT_EQ(lines.size(), 6u);  // 4 records + the failed job's and the lost job's error records
  for (const auto& j : lines) EXPECT_EQ(tb::check_record(j), "") << j.dump();
  EXPECT_EQ(lines[0]["slurm_job"], "10");
  EXPECT_EQ(lines[1]["slurm_task"], 1);
  EXPECT_EQ(lines[2]["bench"], "slurm.job");
  EXPECT_EQ(lines[2]["slurm_state"], "FAILED");
  EXPECT_NE(lines[2]["error"]["msg"].get<std::string>().find("exit code 2"), std::string::npos);
  EXPECT_EQ(lines[3]["slurm_job"], "12_0");

  std::ifstream sf(c.summary);
  const auto summary = nlohmann::json::parse(sf);
  EXPECT_EQ(summary["states"]["FAILED"], 1);
  EXPECT_EQ(summary["states"]["PENDING"], 1);
  EXPECT_EQ(summary["records"], 4);
  const std::string table = render_reports(c.jobs);
  EXPECT_NE(table.find("2 jobs failed"), std::string::npos) << table;
  EXPECT_NE(table.find("1 job still pending or running"), std::string::npos) << table;
}

}  // namespace
