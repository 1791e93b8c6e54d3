// safetensors_test: train/safetensors.h.
//   - fp32 and bf16 tensors (a scalar and an empty tensor among them) round-trip bit for bit, with metadata; the file's
//     layout (the header length, the header padded to 8 bytes, tensors packed in the order given);
//   - the Python safetensors package (scripts/setup.sh puts it in .deps/pytools) reads what trainbench writes, and
//     trainbench reads what it writes (tests/train/safetensors_python.py);
//   - a file whose names, dtypes or shapes differ from the tensors it is loaded into is refused naming each difference,
//     and nothing is overwritten; malformed files (truncated, not JSON, overlapping data, another dtype) are refused;
//   - a failed save leaves the old file and no temporary file behind.
#include "train/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "../support/config_error.h"
#include "../support/shell.h"

namespace tb::train {
namespace {

namespace fs = std::filesystem;

struct Reference {  // the tensors of tests/train/safetensors_python.py
  std::vector<float> a = std::vector<float>(15), scale{2.0f}, empty;
  std::vector<std::uint16_t> b = std::vector<std::uint16_t>(8);
  Reference() {
    for (int i = 0; i < 15; ++i) a[std::size_t(i)] = 0.25f * float(i) - 1.5f;
    for (int i = 0; i < 8; ++i) b[std::size_t(i)] = float_to_bf16(0.5f * float(i) - 2.0f);
  }
  std::vector<NamedTensor> tensors() {
    return {{"lora_a", DType::f32, {3, 5}, std::as_writable_bytes(std::span(a))},
            {"lora_b", DType::bf16, {4, 2}, std::as_writable_bytes(std::span(b))},
            {"scale", DType::f32, {}, std::as_writable_bytes(std::span(scale))},
            {"empty", DType::f32, {0, 3}, std::as_writable_bytes(std::span(empty))}};
  }
};

const std::map<std::string, std::string> kMetadata{{"format", "pt"}, {"step", "7"}};

fs::path temp(const std::string& name) { return fs::temp_directory_path() / ("tb_safetensors_" + name); }

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_file(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

TEST(Safetensors, RoundTripsBitForBit) {
  const fs::path p = temp("round.safetensors");
  Reference ref;
  save_tensors(p, ref.tensors(), kMetadata);
  const std::string bytes = read_file(p);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  const std::string header = bytes.substr(8, n);
  EXPECT_NE(header.find(R"("lora_a":{"dtype":"F32","shape":[3,5],"data_offsets":[0,60]})"), std::string::npos)
      << header;
  EXPECT_NE(header.find(R"("lora_b":{"dtype":"BF16","shape":[4,2],"data_offsets":[60,76]})"), std::string::npos);
  EXPECT_EQ(bytes.size(), 8 + n + 60 + 16 + 4);

  std::map<std::string, std::string> meta;
  const std::vector<TensorEntry> entries = read_tensor_entries(p, &meta);
  EXPECT_EQ(meta, kMetadata);
  ASSERT_EQ(entries.size(), 4u);
  Reference back;
  std::fill(back.a.begin(), back.a.end(), 0.f), std::fill(back.b.begin(), back.b.end(), 0), back.scale[0] = 0;
  load_tensors(p, back.tensors());
  EXPECT_EQ(std::memcmp(back.a.data(), ref.a.data(), 60), 0);
  EXPECT_EQ(back.b, ref.b);
  EXPECT_EQ(back.scale[0], 2.0f);
  fs::remove(p);
}

TEST(Safetensors, PythonReadsOursAndWeReadPythons) {
  const std::string run = "PYTHONPATH=.deps/pytools python3 tests/train/safetensors_python.py ";
  const fs::path ours = temp("ours.safetensors"), theirs = temp("theirs.safetensors");
  Reference ref;
  save_tensors(ours, ref.tensors(), kMetadata);
  const auto check = testing_support::run_shell(run + "check " + ours.string() + " 2>&1");
  EXPECT_EQ(check.rc, 0) << check.out << "(scripts/setup.sh installs the safetensors package into .deps/pytools)";
  const auto write = testing_support::run_shell(run + "write " + theirs.string() + " 2>&1");
  ASSERT_EQ(write.rc, 0) << write.out;
  Reference back;
  std::fill(back.a.begin(), back.a.end(), 0.f), std::fill(back.b.begin(), back.b.end(), 0), back.scale[0] = 0;
  std::map<std::string, std::string> meta;
  read_tensor_entries(theirs, &meta);
  EXPECT_EQ(meta, kMetadata);
  load_tensors(theirs, back.tensors());
  EXPECT_EQ(std::memcmp(back.a.data(), ref.a.data(), 60), 0);
  EXPECT_EQ(back.b, ref.b);
  EXPECT_EQ(back.scale[0], 2.0f);
  fs::remove(ours), fs::remove(theirs);
}

TEST(Safetensors, MismatchesAreRefusedAndNothingIsOverwritten) {
  const fs::path p = temp("mismatch.safetensors");
  Reference ref;
  save_tensors(p, ref.tensors());
  Reference into;
  std::fill(into.a.begin(), into.a.end(), 9.f);
  std::vector<NamedTensor> t = into.tensors();
  t[0].shape = {5, 3};                 // another shape
  t[1].name = "lora_B";                // another name: missing, and the file's lora_b not here
  t.pop_back();                        // "empty" in the file but not here
  const std::string msg = testing_support::error_message([&] { load_tensors(p, t); });
  EXPECT_NE(msg.find("'lora_a' is f32 [3, 5] in the file, f32 [5, 3] here"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'lora_B' is missing"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'lora_b' is in the file but not here"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'empty' is in the file but not here"), std::string::npos) << msg;
  EXPECT_TRUE(std::all_of(into.a.begin(), into.a.end(), [](float x) { return x == 9.f; }));  // untouched
  t = into.tensors();
  t[1].dtype = DType::f32, t[1].data = std::as_writable_bytes(std::span(into.a)).subspan(0, 32);
  EXPECT_NE(testing_support::error_message([&] { load_tensors(p, t); }).find("'lora_b' is bf16 [4, 2] in the file, f32 [4, 2] here"),
            std::string::npos);
  fs::remove(p);
}

TEST(Safetensors, MalformedFilesAreRefused) {
  const fs::path p = temp("bad.safetensors");
  Reference ref;
  save_tensors(p, ref.tensors());
  const std::string good = read_file(p);
  std::uint64_t n = 0;
  std::memcpy(&n, good.data(), 8);
  const auto refused = [&](const std::string& bytes, const std::string& needle) {
    write_file(p, bytes);
    Reference into;
    const std::string msg = testing_support::error_message([&] { load_tensors(p, into.tensors()); });
    EXPECT_NE(msg.find(needle), std::string::npos) << needle << ": " << msg;
  };
  refused(good.substr(0, good.size() - 4), "tensor 'empty': data_offsets [80, 80]");  // truncated data
  refused(good + "junk", "the tensors end at byte");
  refused(good.substr(0, 6), "too short");
  std::string big = good;
  const std::uint64_t huge = 1u << 30;
  std::memcpy(big.data(), &huge, 8);
  refused(big, "not a safetensors file");
  std::string not_json = good;
  not_json[8] = '[';
  refused(not_json, "not JSON");
  std::string f16 = good;
  f16.replace(f16.find("\"F32\""), 5, "\"F16\"");
  refused(f16, "dtype \"F16\" is not read here");
  std::string overlap = good;
  overlap.replace(overlap.find("[60,76]"), 7, "[56,72]");
  refused(overlap, "overlap or leave a hole");
  fs::remove(p);
}

TEST(Safetensors, AFailedSaveLeavesTheOldFile) {
  const fs::path p = temp("atomic.safetensors");
  Reference ref;
  save_tensors(p, ref.tensors());
  const std::string before = read_file(p);
  std::vector<NamedTensor> t = ref.tensors();
  t[0].data = t[0].data.subspan(0, 4);  // fewer bytes than its shape: refused before anything is written
  EXPECT_NE(testing_support::error_message([&] { save_tensors(p, t); }).find("holds 4 bytes, not 60"), std::string::npos);
  t = ref.tensors();
  t.push_back(t[0]);
  EXPECT_NE(testing_support::error_message([&] { save_tensors(p, t); }).find("'lora_a' is given twice"), std::string::npos);
  EXPECT_NE(testing_support::error_message([&] { save_tensors(temp("no/such/dir.safetensors"), ref.tensors()); }).find("cannot create"),
            std::string::npos);
  EXPECT_EQ(read_file(p), before);
  for (const auto& e : fs::directory_iterator(fs::temp_directory_path()))
    EXPECT_EQ(e.path().filename().string().find("tb_safetensors_atomic.safetensors.tmp"), std::string::npos);
  fs::remove(p);
}

}  // namespace
}  // namespace tb::train
