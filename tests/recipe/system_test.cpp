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

TEST(Systems, NetworkComputeAndProjectionSections) {
  const auto dir = tb::recipe::find_references_dir(std::nullopt) / "systems";
  const auto systems = tb::recipe::load_systems(dir);
  const auto* h100 = tb::recipe::match_system(systems, "NVIDIA H100 80GB HBM3");
  ASSERT_NE(h100, nullptr);
  EXPECT_TRUE(h100->network.present);
  EXPECT_EQ(h100->network.nvlink_domain_gpus, 8);
  EXPECT_DOUBLE_EQ(h100->network.scaleout_gbps, 50);  // 400 Gb/s per GPU (EOS: 8 x 400 Gb/s per node)
  EXPECT_GT(h100->network.nvlink_all_reduce_gbps, 0);
  EXPECT_TRUE(h100->compute.present);
  EXPECT_TRUE(h100->projection.present);
  EXPECT_FALSE(tb::recipe::load_system(write_tmp("min2.toml", kMinimal)).network.present);  // optional

  const std::string net = std::string(kMinimal) +
                          "[network]\nnvlink_domain_gpus = 8\nnvlink_busbw_gbps = { all_reduce = 300, all_gather = 250, "
                          "reduce_scatter = 250, sendrecv = 350 }\nscaleout_gbps = 50\nscaleout_efficiency = 0.9\n"
                          "[compute]\ngemm_bf16_tflops = 700\nmembw_tbps = 3\n[projection]\nreference_efficiency = 0.9\n"
                          "overlap_cost = 0.2\n";
  const auto s = tb::recipe::load_system(write_tmp("net.toml", net));
  EXPECT_DOUBLE_EQ(s.network.nvlink_reduce_scatter_gbps, 250);
  EXPECT_DOUBLE_EQ(s.network.scaleout_efficiency, 0.9);
  EXPECT_DOUBLE_EQ(s.network.scaleout_latency_us, 0);
  EXPECT_DOUBLE_EQ(s.compute.membw_tbps, 3);
  EXPECT_DOUBLE_EQ(s.projection.overlap_cost, 0.2);
  EXPECT_DOUBLE_EQ(s.projection.straggler_sigma_ms, 0);  // optional: no straggler term
  EXPECT_GT(h100->projection.straggler_sigma_ms, 0);
  EXPECT_NE(error_of(write_tmp("netsigma.toml", net + "straggler_sigma_ms = -1\n")).find("must not be negative"),
            std::string::npos);

  std::string typo = net;
  typo.replace(typo.find("scaleout_gbps"), 13, "scaleout_gpbs");
  EXPECT_NE(error_of(write_tmp("nettypo.toml", typo)).find("did you mean 'scaleout_gbps'"), std::string::npos);
  std::string bad = net;
  bad.replace(bad.find("scaleout_efficiency = 0.9"), 25, "scaleout_efficiency = 1.5");
  EXPECT_NE(error_of(write_tmp("neteff.toml", bad)).find("scaleout_efficiency must be in (0, 1]"), std::string::npos);
  std::string nobw = net;
  nobw.erase(nobw.find("nvlink_busbw_gbps"), nobw.find("scaleout_gbps") - nobw.find("nvlink_busbw_gbps"));
  EXPECT_NE(error_of(write_tmp("netbw.toml", nobw)).find("needs nvlink_busbw_gbps"), std::string::npos);
  std::string coll = net;
  coll.replace(coll.find("sendrecv = 350"), 14, "send_recv = 350");
  EXPECT_NE(error_of(write_tmp("netcoll.toml", coll)).find("did you mean 'sendrecv'"), std::string::npos);
}
