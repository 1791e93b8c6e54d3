// micro/suites.cpp: the suite table, Output, and the size/device helpers the suites share.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdio>

#include "bench/sysinfo.h"
#include "core/error.h"
#include "micro/suite.h"

namespace tb::micro {

void run_gemm(Context& ctx);
void run_membw(Context& ctx);
void run_nccl(Context& ctx);
void run_links(Context& ctx);

namespace {
constexpr Suite kSuites[] = {
    {"gemm", "cuBLASLt GEMM TFLOP/s: bf16 f16 tf32 fp8 (e4m3, e4m3xe5m2), square sweep and model shapes", 1, run_gemm},
    {"membw", "device memory bandwidth: copy read write triad (bytes read + written)", 1, run_membw},
    {"nccl", "NCCL collectives over a size sweep on all local GPUs: algbw and busbw (nccl-tests formulas)", 2, run_nccl},
    {"links", "host<->device (pinned) and GPU<->GPU peer copy bandwidth", 1, run_links},
};
}  // namespace

std::span<const Suite> suites() { return kSuites; }

const Suite* find_suite(std::string_view name) {
  for (const auto& s : kSuites)
    if (s.name == name) return &s;
  return nullptr;
}

void Output::add(Record r, std::string_view line) {
  if (sink_) sink_->write(r);
  if (print_ && !line.empty()) {
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
  records_.push_back(std::move(r));
}

bool Output::any_error() const {
  return std::any_of(records_.begin(), records_.end(), [](const Record& r) { return r.status == Status::error; });
}

std::vector<int> resolve_devices(const Spec& spec) {
  const int n = bench::visible_gpu_count();
  if (spec.devices.empty()) {
    std::vector<int> all(n);
    for (int i = 0; i < n; ++i) all[i] = i;
    return all;
  }
  for (int d : spec.devices)
    TB_REQUIRE(d >= 0 && d < n, fmt::format("GPU {} does not exist: {} GPU(s) visible (indices 0..{})", d, n, n - 1));
  return spec.devices;
}

namespace {
long long parse_one_size(std::string_view s) {
  long long v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  TB_REQUIRE(ec == std::errc() && v > 0,
             fmt::format("bad size '{}': expected a positive number with an optional K, M or G suffix (e.g. 64M)", s));
  std::string_view unit(p, s.data() + s.size() - p);
  if (unit.ends_with("iB")) unit.remove_suffix(2);
  else if (unit.ends_with("B")) unit.remove_suffix(1);
  long long mult = 1;
  if (unit == "K" || unit == "k") mult = 1LL << 10;
  else if (unit == "M" || unit == "m") mult = 1LL << 20;
  else if (unit == "G" || unit == "g") mult = 1LL << 30;
  else TB_REQUIRE(unit.empty(), fmt::format("bad size '{}': unknown unit '{}' (use K, M or G)", s, unit));
  return v * mult;
}
}  // namespace

std::vector<long long> parse_sizes(std::span<const std::string> specs) {
  std::vector<long long> out;
  for (const auto& s : specs) {
    auto colon = s.find(':');
    if (colon == std::string::npos) {
      out.push_back(parse_one_size(s));
      continue;
    }
    const long long lo = parse_one_size(std::string_view(s).substr(0, colon));
    const long long hi = parse_one_size(std::string_view(s).substr(colon + 1));
    TB_REQUIRE(lo <= hi, fmt::format("bad size range '{}': the start is larger than the end", s));
    for (long long v = lo; v <= hi; v *= 2) out.push_back(v);
  }
  return out;
}

std::string format_bytes(long long b) {
  constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && b >= 1024 && b % 1024 == 0) {
    b /= 1024;
    ++u;
  }
  return fmt::format("{}{}", b, units[u]);
}

}  // namespace tb::micro
