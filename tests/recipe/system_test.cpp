// Tests recipe/system: the shipped references/systems files (the peak table), and precise errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "recipe/system.h"

namespace {
std::filesystem::path write_tmp(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / "tb_system_test";
  std::filesystem::create_directories(dir);
  const auto p = dir / name;
  std::ofstream(p) << text;
  return p;
}

std::string error_of(const std::filesystem::path& p) {
  try {
    tb::recipe::load_system(p);
  } catch (const tb::Error& e) {
    EXPECT_EQ(e.kind(), tb::Error::Kind::config);
    return e.what();
  }
  return "";
}

const char* kMinimal = R"(schema = 1
[gpu]
name = "X"
match = ["X1"]
sms = 10
memory_gib = 1
hbm_tbps = 1
[peak_tflops]
bf16 = 1
f16 = 1
tf32 = 1
fp8 = 2
f32 = 0.5
)";
}  // namespace

TEST(Systems, ShippedPeakTable) {
  const auto dir = tb::recipe::find_references_dir(std::nullopt) / "systems";
  const auto systems = tb::recipe::load_systems(dir);
  ASSERT_GE(systems.size(), 2u);
  const auto* h200 = tb::recipe::match_system(systems, "NVIDIA H200");
  const auto* h100 = tb::recipe::match_system(systems, "NVIDIA H100 80GB HBM3");
  ASSERT_NE(h200, nullptr);
  ASSERT_NE(h100, nullptr);
  for (const auto* s : {h200, h100}) {  // the DGXC MFU convention
    EXPECT_DOUBLE_EQ(s->peak_tflops("bf16"), 989);
    EXPECT_DOUBLE_EQ(s->peak_tflops("e4m3"), 1979);
    EXPECT_DOUBLE_EQ(s->peak_tflops("e4m3xe5m2"), 1979);
    EXPECT_DOUBLE_EQ(s->peak_tflops("tf32"), 494);
    EXPECT_EQ(s->sms, 132);
  }
  EXPECT_DOUBLE_EQ(h200->hbm_tbps, 4.8);
  EXPECT_DOUBLE_EQ(h100->hbm_tbps, 3.35);
  EXPECT_EQ(tb::recipe::match_system(systems, "NVIDIA A100-SXM4-80GB"), nullptr);
  // floors for the check's GEMM and copy cases exist and sit under the datasheet peaks
  bool bf16 = false, fp8 = false, copy = false;
  for (const auto& e : h200->expect) {
    bf16 |= e.name == "bf16/8192x8192x8192" && e.min > 0.6 * 989 && e.min < 989;
    fp8 |= e.name == "e4m3/8192x8192x8192" && e.min > 0.6 * 1979 && e.min < 1979;
    copy |= e.name == "copy/1GiB" && e.min >= 4.0 && e.min < h200->hbm_tbps;
  }
  EXPECT_TRUE(bf16 && fp8 && copy);
}

TEST(Systems, MinimalFileLoads) {
  const auto s = tb::recipe::load_system(write_tmp("min.toml", kMinimal));
  EXPECT_EQ(s.name, "X");
  EXPECT_DOUBLE_EQ(s.peak_tflops("fp8"), 2);
  EXPECT_DOUBLE_EQ(s.peak_tflops("nonsense"), 0);
  EXPECT_DOUBLE_EQ(s.outlier_fraction, 0.10);
}

TEST(Systems, UnknownKeyNamesFileLineAndNearestKey) {
  std::string text = kMinimal;
  text.replace(text.find("hbm_tbps"), 8, "hbm_tbsp");
  const auto msg = error_of(write_tmp("typo.toml", text));
  EXPECT_NE(msg.find("typo.toml:7"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'hbm_tbps'"), std::string::npos) << msg;
}

TEST(Systems, SyntaxErrorNamesLineAndColumn) {
  const auto msg = error_of(write_tmp("bad.toml", "schema = 1\n[gpu\nname = 1\n"));
  EXPECT_NE(msg.find("bad.toml:2:"), std::string::npos) << msg;
}

TEST(Systems, MissingAndMistypedValues) {
  std::string no_peak = kMinimal;
  no_peak.erase(no_peak.find("fp8 = 2\n"), 8);
  EXPECT_NE(error_of(write_tmp("nopeak.toml", no_peak)).find("missing key 'fp8'"), std::string::npos);
  std::string typed = kMinimal;
  typed.replace(typed.find("sms = 10"), 8, "sms = \"ten\"");
  EXPECT_NE(error_of(write_tmp("typed.toml", typed)).find("'sms' must be a number"), std::string::npos);
  std::string expect = std::string(kMinimal) + "[[expect]]\nbench = \"micro.gemm\"\ncase = \"x\"\nmetric = \"tflops\"\nmni = 3\n";
  const auto msg = error_of(write_tmp("expect.toml", expect));
  EXPECT_NE(msg.find("did you mean 'min'"), std::string::npos) << msg;
}

TEST(Systems, MissingReferencesFolderIsAConfigError) {
  EXPECT_THROW(tb::recipe::find_references_dir(std::filesystem::path("/no/such/dir")), tb::Error);
}
