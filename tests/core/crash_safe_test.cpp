// Tests the crash-safe side of core/record, core/jsonl, core/provenance's run files and core/output_path: a line cut
// by a crash is cut off before the next record is appended (and said so); readers skip an incomplete last line and
// name file:line for anything else that is not a record (not JSON, not an object, wrong schema, a measured value of
// the wrong type); a second run into one folder gets a run file of its own; a deleted results file is noticed;
// output paths that cannot be right are refused before anything is written.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/jsonl.h"
#include "core/output_path.h"
#include "core/provenance.h"
#include "core/record.h"

namespace {
namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const auto d = fs::temp_directory_path() / ("tb_crash_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string slurp(const fs::path& f) {
  std::ifstream in(f, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void spill(const fs::path& f, const std::string& text) { std::ofstream(f, std::ios::binary) << text; }

tb::Record sample(const std::string& name = "c") {
  tb::Record r;
  r.bench = "b";
  r.name = name;
  r.data = {{"step_s", 1.5}, {"step_ms", {{"median", 2.0}}}};
  return r;
}

std::string config_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const tb::Error& e) {
    EXPECT_EQ(e.kind(), tb::Error::Kind::config) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

TEST(CrashSafe, AppendingAfterACutLineCutsItOff) {
  const auto dir = fresh_dir("cut");
  const auto f = dir / "results.jsonl";
  {
    tb::JsonlSink s(f, "r1");
    s.write(sample("a"));
  }
  spill(f, slurp(f) + R"({"schema":"trainbench.result.v1","run":"r1","bench":"b","ca)");  // killed mid-line
  {
    tb::JsonlSink s(f, "r2");
    EXPECT_GT(s.cut_bytes(), 10);
    s.write(sample("b"));
  }
  const auto read = tb::read_jsonl(f);
  ASSERT_EQ(read.lines.size(), 2u);
  EXPECT_FALSE(read.cut);
  EXPECT_EQ(read.lines[0].value["case"], "a");
  EXPECT_EQ(read.lines[1].value["case"], "b");
  EXPECT_EQ(read.lines[1].line, 2);
  fs::remove_all(dir);
}

TEST(CrashSafe, ACompleteFileIsNotTouched) {
  const auto dir = fresh_dir("whole");
  const auto f = dir / "results.jsonl";
  { tb::JsonlSink(f, "r").write(sample()); }
  const std::string before = slurp(f);
  tb::JsonlSink s(f, "r");
  EXPECT_EQ(s.cut_bytes(), 0);
  EXPECT_EQ(slurp(f), before);
  fs::remove_all(dir);
}

TEST(CrashSafe, ReadersSkipAnIncompleteLastLineOnly) {
  const auto dir = fresh_dir("read");
  const auto f = dir / "results.jsonl";
  const std::string good = tb::dump_line(tb::to_json(sample(), "r")) + "\n";
  spill(f, good + good + R"({"schema":"trainbench.res)");
  auto read = tb::read_jsonl(f);
  EXPECT_EQ(read.lines.size(), 2u);
  EXPECT_TRUE(read.cut);
  // The same bytes in the middle of the file: an error naming the line.
  spill(f, good + R"({"schema":"trainbench.res)" + "\n" + good);
  EXPECT_NE(config_error([&] { tb::read_jsonl(f); }).find(f.string() + ":2: not JSON"), std::string::npos);
  // A last line without its newline but whole: kept.
  spill(f, good + good.substr(0, good.size() - 1));
  EXPECT_EQ(tb::read_jsonl(f).lines.size(), 2u);
  fs::remove_all(dir);
}

TEST(CrashSafe, NotARecordIsFileLineWhat) {
  const auto dir = fresh_dir("schema");
  const auto f = dir / "results.jsonl";
  const std::string good = tb::dump_line(tb::to_json(sample(), "r")) + "\n";
  auto rec = tb::to_json(sample(), "r");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[1,2,3]", ":2: not a JSON object"},
      {"\"text\"", ":2: not a JSON object"},
      {R"({"schema":"other.v9","run":"r","bench":"b","case":"c","status":"ok","world":1})", ":2: not a trainbench"},
      {R"({"schema":"trainbench.result.v1","run":"r","bench":"b","case":"c","status":"ok","world":"1"})", "'world'"},
      {R"({"schema":"trainbench.result.v1","run":"r","bench":"b","case":"c","status":"ok","world":1,"step_s":"fast"})",
       "'step_s' must be a number"},
      {R"({"schema":"trainbench.result.v1","run":"r","bench":"b","case":"c","status":"ok","world":1,"step_ms":{"median":"x"}})",
       "'step_ms.median' must be a number"},
      {R"({"schema":"trainbench.result.v1","run":"r","bench":"b","case":"c","status":"error","world":1,"error":"boom"})",
       "status 'error'"},
      {R"({"schema":"trainbench.result.v1","run":"r","bench":7,"case":"c","status":"ok","world":1})", "'bench'"},
  };
  for (const auto& [line, want] : cases) {
    spill(f, good + line + "\n");
    const std::string msg = config_error([&] { tb::read_jsonl(f); });
    EXPECT_NE(msg.find(f.string() + ":2: "), std::string::npos) << msg;
    EXPECT_NE(msg.find(want), std::string::npos) << line << "\n" << msg;
    EXPECT_EQ(msg.find("json.exception"), std::string::npos) << msg;
  }
  fs::remove_all(dir);
}

TEST(CrashSafe, RunFilesAreCheckedForTypes) {
  const auto dir = fresh_dir("runjson");
  const auto f = dir / "run.json";
  spill(f, "[]");
  EXPECT_NE(config_error([&] { tb::read_run_file(f); }).find("not a JSON object"), std::string::npos);
  spill(f, R"({"schema":"trainbench.run.v1","run":"r","argv":"trainbench run"})");
  EXPECT_NE(config_error([&] { tb::read_run_file(f); }).find("'argv'"), std::string::npos);
  spill(f, R"({"schema":"trainbench.run.v1","run":7})");
  EXPECT_NE(config_error([&] { tb::read_run_file(f); }).find("'run'"), std::string::npos);
  spill(f, R"({"schema":"trainbench.run.v1","run":"r","host":"h","argv":["a"]})");
  EXPECT_EQ(tb::read_run_file(f)["host"], "h");
  fs::remove_all(dir);
}

TEST(CrashSafe, ASecondRunIntoOneFolderGetsItsOwnRunFile) {
  const auto dir = fresh_dir("runs");
  EXPECT_EQ(tb::write_run_file(dir, "run-a", {{"run", "run-a"}}), "run.json");
  EXPECT_EQ(tb::write_run_file(dir, "run-a", {{"run", "run-a"}, {"rank", 1}}), "run.json");  // the same job's rank
  EXPECT_EQ(tb::write_run_file(dir, "run-b", {{"run", "run-b"}}), "run-run-b.json");
  EXPECT_EQ(nlohmann::json::parse(slurp(dir / "run.json"))["run"], "run-a");  // the first run's, kept
  EXPECT_EQ(nlohmann::json::parse(slurp(dir / "run-run-b.json"))["run"], "run-b");
  const auto files = tb::result_files_below(dir, true);
  EXPECT_EQ(files.size(), 2u);
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_FALSE(e.path().string().ends_with(".tmp")) << e.path();
  fs::remove_all(dir);
}

TEST(CrashSafe, ADeletedResultsFileIsNoticed) {
  const auto dir = fresh_dir("deleted");
  tb::JsonlSink s(dir / "results.jsonl", "r");
  s.write(sample());
  EXPECT_TRUE(s.still_there());
  fs::remove_all(dir);
  EXPECT_FALSE(s.still_there());
}

TEST(CrashSafe, NonUtf8TextIsReplacedNotThrown) {
  const auto dir = fresh_dir("utf8");
  tb::Record r = sample();
  r.data["note"] = std::string("caf\xe9");
  tb::JsonlSink s(dir / "results.jsonl", "r");
  s.write(r);
  EXPECT_EQ(tb::read_jsonl(dir / "results.jsonl").lines.size(), 1u);
  fs::remove_all(dir);
}

TEST(CrashSafe, OutputPathsThatCannotBeRightAreRefused) {
  const auto dir = fresh_dir("out");
  EXPECT_NE(config_error([] { tb::require_output_dir("/"); }).find("root folder"), std::string::npos);
  EXPECT_NE(config_error([] { tb::require_output_dir("/tmp/.."); }).find("root folder"), std::string::npos);
  EXPECT_NE(config_error([] { tb::require_output_dir(""); }).find("empty"), std::string::npos);
  spill(dir / "file", "x");
  EXPECT_NE(config_error([&] { tb::require_output_dir(dir / "file"); }).find("not a folder"), std::string::npos);
  EXPECT_NE(config_error([&] { tb::require_output_dir(dir / "file" / "sub"); }).find("cannot create"),
            std::string::npos);
  tb::require_output_dir(dir / "new" / "results");  // made
  EXPECT_TRUE(fs::is_directory(dir / "new" / "results"));
  EXPECT_NE(config_error([&] { tb::require_output_file(dir); }).find("is a folder"), std::string::npos);
  EXPECT_NE(config_error([] { tb::require_output_file(""); }).find("empty"), std::string::npos);
  EXPECT_NE(config_error([] { tb::require_output_file("/"); }).find("is a folder"), std::string::npos);
  tb::require_output_file(dir / "report.html");
  if (::geteuid() != 0) {  // root writes anywhere
    fs::create_directories(dir / "ro");
    ::chmod((dir / "ro").c_str(), 0500);
    EXPECT_NE(config_error([&] { tb::require_output_dir(dir / "ro"); }).find("not writable"), std::string::npos);
    ::chmod((dir / "ro").c_str(), 0700);
  }
  fs::remove_all(dir);
}

TEST(CrashSafe, AFolderLoopIsOneMessage) {
  const auto dir = fresh_dir("loop");
  fs::create_directory_symlink("loop", dir / "loop");  // loop -> loop
  try {
    (void)tb::result_files_below(dir, true);
  } catch (const tb::Error&) {
  }  // either way: no filesystem_error escapes
  fs::remove_all(dir);
}

}  // namespace
