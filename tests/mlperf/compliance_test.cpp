// tests/mlperf/compliance_test.cpp: MLCommons' compliance checker (mlperf-logging, scripts/setup.sh puts it in
// .deps/mlperf) passes the log of a CPU run of the Llama 2 70B LoRA proxy under the 4.1.0 and 5.0.0 training
// rulesets, and the GPT-3 proxy's under 4.1.0, and fails the same logs with one required key taken out (the check can
// fail).
#include "mlperf/compliance.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "mlperf/run.h"
#include "mlperf/summarize.h"

namespace tb::mlperf {
namespace {

const std::string kPythonPath = ".deps/mlperf";  // the tests run in the source tree

class Compliance : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() / ("tb_mlperf_compliance_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    RunSpec spec;
    spec.benchmark = "llama2_70b_lora";
    spec.out = dir_;
    log_ = run_mlperf(spec).at(0).log;
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }

  // A copy of the log without the lines whose key is `key`.
  static std::filesystem::path without(const std::string& key) {
    const auto out = dir_ / ("without_" + key + ".txt");
    std::ifstream in(log_);
    std::ofstream o(out);
    int removed = 0;
    for (std::string line; std::getline(in, line);) {
      if (line.find("\"key\": \"" + key + "\"") != std::string::npos) {
        ++removed;
        continue;
      }
      o << line << "\n";
    }
    EXPECT_GT(removed, 0) << key << " is not in " << log_;
    return out;
  }

  static inline std::filesystem::path dir_, log_;
};

TEST_F(Compliance, CheckerIsInstalled) {
  EXPECT_EQ(checker_unavailable(kPythonPath), "") << "run scripts/setup.sh";
}

TEST_F(Compliance, CpuProxyLogPasses) {
  for (const std::string ruleset : {"4.1.0", "5.0.0"}) {
    const CheckerVerdict v = check_compliance(log_, ruleset, kPythonPath);
    EXPECT_TRUE(v.checked) << v.why;
    EXPECT_TRUE(v.passed) << ruleset << ": " << v.why;
  }
}

TEST_F(Compliance, MissingRequiredKeyFails) {
  // lora_rank: closed_llama2_70b_lora.yaml (both rulesets); run_stop: common.yaml; gradient_accumulation_steps:
  // closed_common.yaml
  for (const std::string key : {"lora_rank", "run_stop", "gradient_accumulation_steps"})
    for (const std::string ruleset : {"4.1.0", "5.0.0"}) {
      const CheckerVerdict v = check_compliance(without(key), ruleset, kPythonPath);
      EXPECT_TRUE(v.checked) << v.why;
      EXPECT_FALSE(v.passed) << "without " << key << ", ruleset " << ruleset;
      EXPECT_NE(v.why.find(key), std::string::npos) << "the checker's reason names " << key << ": " << v.why;
    }
}

// The GPT-3 proxy's log passes ruleset 4.1.0 (the last to hold GPT-3) and fails without its checkpoint step
// (closed_gpt3.yaml); summarize checks it against 4.1.0 and says 5.0.0 does not hold it.
TEST_F(Compliance, Gpt3ProxyLogPassesItsRuleset) {
  RunSpec spec;
  spec.benchmark = "gpt3";
  spec.out = dir_ / "gpt3";
  const std::filesystem::path log = run_mlperf(spec).at(0).log;
  const CheckerVerdict v = check_compliance(log, "4.1.0", kPythonPath);
  EXPECT_TRUE(v.checked && v.passed) << v.why;
  const auto without = spec.out / "without.txt";
  {
    std::ifstream in(log);
    std::ofstream o(without);
    for (std::string line; std::getline(in, line);)
      if (line.find("\"key\": \"init_checkpoint_step\"") == std::string::npos) o << line << "\n";
  }
  const CheckerVerdict w = check_compliance(without, "4.1.0", kPythonPath);
  EXPECT_TRUE(w.checked && !w.passed) << "without init_checkpoint_step";
  std::filesystem::remove(without);
  const Summary s = summarize(spec.out, {"4.1.0", "5.0.0"}, kPythonPath);
  ASSERT_EQ(s.logs.size(), 1u);
  ASSERT_EQ(s.logs[0].verdicts.size(), 1u);
  EXPECT_EQ(s.logs[0].verdicts[0].ruleset, "4.1.0");
  EXPECT_TRUE(s.logs[0].verdicts[0].passed) << s.logs[0].verdicts[0].why;
  ASSERT_FALSE(s.notes.empty());
  EXPECT_NE(s.notes[0].find("ruleset 5.0.0 does not hold gpt3"), std::string::npos) << s.notes[0];
}

TEST_F(Compliance, SummarizeChecksEachLog) {
  const Summary s = summarize(dir_, {"5.0.0"}, kPythonPath);  // result_0.txt only (the copies are named without_*)
  ASSERT_EQ(s.logs.size(), 1u);
  ASSERT_EQ(s.logs[0].verdicts.size(), 1u);
  EXPECT_TRUE(s.logs[0].verdicts[0].passed) << s.logs[0].verdicts[0].why;
  EXPECT_FALSE(s.logs[0].dropped) << s.logs[0].drop_reason;
  EXPECT_FALSE(s.valid);  // one synthetic run of the 10 the rules want
}

}  // namespace
}  // namespace tb::mlperf
