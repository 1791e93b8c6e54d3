// tests/sweep/sweep_test.cpp: sweep grid, skip and resume logic (report/sweep.h) with fake hooks, and
// `trainbench sweep tiny --device cpu` end to end: an infeasible point skipped with the layout's reason, a rerun
// resumes (runs nothing again), the best point named; `trainbench scale` on the CPU records proxy points.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "core/error.h"

#include "cli/commands.h"
#include "report/exec.h"
#include "report/inputs.h"
#include "report/analysis.h"
#include "report/sweep.h"


namespace tb::report {
namespace {
namespace fs = std::filesystem;

fs::path fresh(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / fmt::format("tb-{}-{}", name, getpid());
  fs::remove_all(d);
  return d;
}

TEST(Sweep, GridIsEveryCombinationFirstAxisSlowest) {
  const auto pts = expand_grid({parse_axis("micro_batch=1,2"), parse_axis("recompute=none,full")});
  ASSERT_EQ(pts.size(), 4u);
  EXPECT_EQ(point_name(pts[0]), "micro_batch=1,recompute=none");
  EXPECT_EQ(point_name(pts[1]), "micro_batch=1,recompute=full");
  EXPECT_EQ(point_name(pts[3]), "micro_batch=2,recompute=full");
  EXPECT_THROW(parse_axis("micro_batch"), Error);
  EXPECT_THROW(expand_grid({parse_axis("tp=1"), parse_axis("tp=2")}), Error);
  EXPECT_EQ(point_name(parse_point("tp=2,pp=1")), "tp=2,pp=1");
}

// A fake run writes an ok run record (trainbench.result.v1: resuming reads only records) whose tokens/s per GPU is
// 1000 x micro_batch; micro_batch 2 writes the older step_s (seconds), the others step_ms.
SweepHooks fake_hooks(int* runs) {
  SweepHooks h;
  h.infeasible = [](const Point& p) { return p[0].second == "3" ? std::string("3 does not divide 8") : std::string(); };
  h.run = [runs](const Point& p, const fs::path& dir) {
    ++*runs;
    fs::create_directories(dir);
    if (p[0].second == "4") return PointRun{1, "crashed"};
    nlohmann::json rec = {{"schema", "trainbench.result.v1"},
                          {"bench", "run"},
                          {"case", "r"},
                          {"world", 1},
                          {"status", "ok"},
                          {"run", "x"},
                          {"extrapolated", {{"tokens_per_s_per_gpu", 1000.0 * std::stoi(p[0].second)}}}};
    if (p[0].second == "2")
      rec["extrapolated"]["step_s"] = 2.0;
    else
      rec["extrapolated"]["step_ms"] = 1000.0;
    std::ofstream(dir / "results.jsonl") << rec.dump() << "\n";
    return PointRun{0, ""};
  };
  return h;
}

TEST(Sweep, SkipsInfeasibleRecordsErrorsAndResumes) {
  const fs::path out = fresh("sweep-fake");
  const SweepSpec spec{"r", expand_grid({parse_axis("micro_batch=1,2,3,4")}), out};
  int runs = 0;
  {
    JsonlSink sink(out / "results.jsonl", "a");
    const auto recs = run_sweep(spec, fake_hooks(&runs), sink);
    ASSERT_EQ(recs.size(), 4u);
    EXPECT_EQ(recs[0]["status"], "ok");
    EXPECT_DOUBLE_EQ(recs[0]["step_ms"].get<double>(), 1000.0);
    EXPECT_DOUBLE_EQ(recs[1]["step_ms"].get<double>(), 2000.0);  // an older run record's step_s, in ms
    EXPECT_FALSE(recs[1].contains("step_s"));
    EXPECT_EQ(recs[2]["status"], "skipped");
    EXPECT_EQ(recs[2]["reason"], "3 does not divide 8");
    EXPECT_EQ(recs[3]["status"], "error");
    EXPECT_EQ(runs, 3);  // the infeasible point never ran
  }
  {
    JsonlSink sink(out / "results.jsonl", "b");
    runs = 0;
    const auto recs = run_sweep(spec, fake_hooks(&runs), sink);
    EXPECT_EQ(runs, 1);  // only the failed point runs again
    EXPECT_TRUE(recs[0]["resumed"].get<bool>());
    EXPECT_TRUE(recs[1]["resumed"].get<bool>());
  }
  const auto rows = sweep_rows(select(load_inputs({out / "results.jsonl"}), "sweep.point"));
  ASSERT_EQ(rows.size(), 4u);  // deduped over the two passes
  EXPECT_TRUE(rows[1].best);
  fs::remove_all(out);
}

int call(int (*cmd)(int, char**), std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return cmd(int(argv.size()), argv.data());
}

// The trainbench binary next to the tests' folder (build/tests/<test> -> build/trainbench), for the subprocesses.
bool use_trainbench() {
  const fs::path exe = fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "trainbench";
  if (!fs::exists(exe)) return false;
  setenv("TRAINBENCH_EXE", exe.c_str(), 1);
  return true;
}

TEST(SweepCli, TinyOnCpuSkipsResumesAndNamesTheBest) {
  if (!use_trainbench()) GTEST_SKIP() << "build/trainbench not built";
  const fs::path out = fresh("sweep-cli");
  const std::vector<std::string> args{"trainbench sweep", "tiny", "--device", "cpu", "--vary", "micro_batch=1,2",
                                      "--vary", "tp=1,3", "--steps", "2", "--warmup-steps", "1", "--out", out.string()};
  ASSERT_EQ(call(tb::cli::cmd_sweep, args), 0);
  auto rows = sweep_rows(select(load_inputs({out / "results.jsonl"}), "sweep.point"));
  ASSERT_EQ(rows.size(), 4u);
  int ok = 0, best = 0;
  for (const auto& r : rows) {
    if (r.point["tp"] == "3") {
      EXPECT_EQ(r.status, "skipped") << r.name;
      EXPECT_NE(r.reason.find("not a multiple of tp"), std::string::npos) << r.reason;
      EXPECT_FALSE(fs::exists(out / "points" / r.name / "results.jsonl"));
    } else {
      EXPECT_EQ(r.status, "ok") << r.name << ": " << r.reason;
      EXPECT_GT(r.tokens_per_s_per_gpu, 0);
      EXPECT_FALSE(r.resumed);
      ++ok;
    }
    best += r.best;
  }
  EXPECT_EQ(ok, 2);
  EXPECT_EQ(best, 1);
  const auto mtime = fs::last_write_time(out / "points" / "micro_batch=1,tp=1" / "results.jsonl");
  ASSERT_EQ(call(tb::cli::cmd_sweep, args), 0);  // resume: nothing measured again
  EXPECT_EQ(fs::last_write_time(out / "points" / "micro_batch=1,tp=1" / "results.jsonl"), mtime);
  rows = sweep_rows(select(load_inputs({out / "results.jsonl"}), "sweep.point"));
  for (const auto& r : rows)
    if (r.status == "ok") {
      EXPECT_TRUE(r.resumed) << r.name;
    }
  fs::remove_all(out);
}

TEST(SweepCli, UnknownKeyIsAUsageErrorWithASuggestion) {
  try {
    call(tb::cli::cmd_sweep, {"trainbench sweep", "tiny", "--device", "cpu", "--vary", "micro_bach=1,2", "--out",
                              fresh("sweep-bad").string()});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'micro_batch'"), std::string::npos) << e.what();
  }
}

TEST(ScaleCli, TinyOnCpuRecordsProxyPointsWithEfficiency) {
  if (!use_trainbench()) GTEST_SKIP() << "build/trainbench not built";
  const fs::path out = fresh("scale-cli");
  ASSERT_EQ(call(tb::cli::cmd_scale, {"trainbench scale", "tiny", "--device", "cpu", "--gpus", "1", "--steps", "2",
                                      "--warmup-steps", "1", "--out", out.string()}),
            0);
  const auto rows = scale_rows(select(load_inputs({out / "results.jsonl"}), "scale.point"));
  bool proxy = false;
  for (const auto& r : rows)
    if (r.source == "proxy") {
      proxy = true;
      EXPECT_EQ(r.status, "ok") << r.reason;
      EXPECT_DOUBLE_EQ(r.efficiency, 1.0);
    }
  EXPECT_TRUE(proxy);
  fs::remove_all(out);
}

}  // namespace
}  // namespace tb::report
