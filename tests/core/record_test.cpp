// Tests core/record: the trainbench.result.v1 schema, error/skipped records, the JSONL sink.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/record.h"

namespace {
tb::Record sample() {
  tb::Record r;
  r.bench = "micro.gemm";
  r.name = "bf16/8192x8192x8192";
  r.device = 1;
  r.data = {{"tflops", 842.0}, {"bench", "must not override"}};
  return r;
}
}  // namespace

TEST(Record, OkRecordFollowsSchema) {
  const auto j = tb::to_json(sample(), "run-1");
  EXPECT_EQ(tb::check_record(j), "");
  EXPECT_EQ(j["schema"], "trainbench.result.v1");
  EXPECT_EQ(j["bench"], "micro.gemm");  // fixed keys win over data
  EXPECT_EQ(j["case"], "bf16/8192x8192x8192");
  EXPECT_EQ(j["device"], 1);
  EXPECT_EQ(j["status"], "ok");
  EXPECT_DOUBLE_EQ(j["tflops"].get<double>(), 842.0);
}

TEST(Record, ErrorAndSkippedRecords) {
  const tb::Error e(tb::Error::Kind::cublas, false, "full message", "short");
  const auto j = tb::to_json(tb::Record::failed("micro.gemm", "e4m3/1x1x1", e), "r");
  EXPECT_EQ(tb::check_record(j), "");
  EXPECT_EQ(j["status"], "error");
  EXPECT_EQ(j["error"]["kind"], "cublas");
  EXPECT_EQ(j["error"]["fatal"], false);
  const auto s = tb::to_json(tb::Record::skipped("micro.nccl.all_reduce", "f32/1GiB", "needs 2 GPUs"), "r");
  EXPECT_EQ(tb::check_record(s), "");
  EXPECT_EQ(s["reason"], "needs 2 GPUs");
}

TEST(Record, CheckRecordFindsProblems) {
  auto j = tb::to_json(sample(), "r");
  j.erase("bench");
  EXPECT_NE(tb::check_record(j), "");
  j = tb::to_json(sample(), "r");
  j["schema"] = "other";
  EXPECT_NE(tb::check_record(j), "");
  j = tb::to_json(sample(), "r");
  j["status"] = "maybe";
  EXPECT_NE(tb::check_record(j), "");
  j = tb::to_json(sample(), "r");
  j["world"] = 0;
  EXPECT_NE(tb::check_record(j), "");
  j = tb::to_json(tb::Record::skipped("b", "c", "why"), "r");
  j.erase("reason");
  EXPECT_NE(tb::check_record(j), "");
}

TEST(Record, SinkAppendsOneFlushedLinePerRecord) {
  const auto dir = std::filesystem::temp_directory_path() / "tb_record_test";
  std::filesystem::remove_all(dir);
  const auto path = dir / "sub" / "results.jsonl";
  {
    tb::JsonlSink sink(path, "run-7");
    sink.write(sample());
    // flushed per record: readable before the sink closes
    std::ifstream in(path);
    std::string line;
    ASSERT_TRUE(std::getline(in, line));
    EXPECT_EQ(tb::check_record(nlohmann::json::parse(line)), "");
    sink.write(tb::Record::skipped("b", "c", "why"));
    EXPECT_EQ(sink.count(), 2);
  }
  {
    tb::JsonlSink again(path, "run-8");  // appends, never truncates
    again.write(sample());
  }
  std::ifstream in(path);
  int lines = 0;
  for (std::string l; std::getline(in, l);) ++lines;
  EXPECT_EQ(lines, 3);
  std::filesystem::remove_all(dir);
}

TEST(Record, SinkOnUnwritablePathThrowsIoError) {
  try {
    tb::JsonlSink sink("/proc/no/such/results.jsonl", "r");
    FAIL() << "expected an io error";
  } catch (const tb::Error& e) {
    EXPECT_EQ(e.kind(), tb::Error::Kind::io);
    EXPECT_NE(std::string(e.what()).find("--out"), std::string::npos);
  }
}
