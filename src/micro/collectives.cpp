// micro/collectives.cpp: names, size conventions and bus factors of the collectives (see collectives.h).
#include "micro/collectives.h"

#include <fmt/format.h>

#include <vector>

#include "core/error.h"
#include "core/suggest.h"

namespace tb::micro {
namespace {

constexpr CollInfo kColls[] = {
    {Coll::all_reduce, "all_reduce", true, false},   {Coll::all_gather, "all_gather", false, true},
    {Coll::reduce_scatter, "reduce_scatter", true, true}, {Coll::alltoall, "alltoall", false, true},
    {Coll::broadcast, "broadcast", false, false},    {Coll::sendrecv, "sendrecv", false, false},
};
constexpr std::string_view kReduceOps[] = {"sum", "prod", "max", "min", "avg"};
constexpr DType kCollDTypes[] = {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i32};

template <class Names>
std::string choices(const Names& names) {
  std::string out;
  for (std::string_view n : names) {
    if (!out.empty()) out += ' ';
    out += n;
  }
  return out;
}

template <class Names>
std::vector<std::string> as_strings(const Names& names) {
  std::vector<std::string> out;
  for (std::string_view n : names) out.emplace_back(n);
  return out;
}

}  // namespace

std::span<const CollInfo> collectives() { return kColls; }
const CollInfo& coll_info(Coll c) { return kColls[static_cast<int>(c)]; }
std::string_view coll_name(Coll c) { return coll_info(c).name; }

Coll parse_coll(std::string_view name) {
  std::vector<std::string_view> names;
  for (const auto& c : kColls) {
    if (c.name == name) return c.coll;
    names.push_back(c.name);
  }
  raise_config(fmt::format("unknown collective '{}': expected one of {}{}", name, choices(names),
                           did_you_mean(name, as_strings(names))));
}

ReduceOp parse_reduce_op(std::string_view name) {
  for (int i = 0; i < int(std::size(kReduceOps)); ++i)
    if (kReduceOps[i] == name) return static_cast<ReduceOp>(i);
  raise_config(fmt::format("unknown reduce op '{}': expected one of {}{}", name, choices(kReduceOps),
                           did_you_mean(name, as_strings(kReduceOps))));
}

std::string_view reduce_op_name(ReduceOp op) { return kReduceOps[static_cast<int>(op)]; }

DType parse_coll_dtype(std::string_view name) {
  std::vector<std::string_view> names;
  for (DType t : kCollDTypes) names.push_back(dtype_name(t));
  const auto t = parse_dtype(name);
  if (!t)
    raise_config(fmt::format("unknown dtype '{}' for NCCL collectives: expected one of {}{}", name, choices(names),
                             did_you_mean(name, as_strings(names))));
  if (is_fp8(*t))
    raise_config(fmt::format("dtype '{}' is not supported by the nccl suite: fp8 collectives (NCCL >= 2.24) round "
                             "every partial reduction to fp8 and cannot be checked exactly; use bf16 (or f16, f32)",
                             name));
  for (DType ok_type : kCollDTypes)
    if (*t == ok_type) return *t;
  raise_config(fmt::format("dtype '{}' is not a storage type NCCL moves: expected one of {} (tf32 data is f32)",
                           name, choices(names)));
}

void check_combination(Coll c, DType t, ReduceOp op) {
  if (coll_info(c).reduces && op == ReduceOp::avg && t == DType::i32)
    raise_config(fmt::format("{} with reduce op avg on i32 is not supported: NCCL's integer average truncates "
                             "and cannot be checked exactly; use sum, or a floating-point dtype for avg",
                             coll_name(c)));
}

CollCounts coll_counts(Coll c, std::size_t count, int nranks) {
  const std::size_t n = std::size_t(nranks);
  switch (c) {
    case Coll::all_reduce: return {count, count, count};
    case Coll::all_gather: return {count, count, count * n};
    case Coll::reduce_scatter: return {count, count * n, count};
    case Coll::alltoall: return {count, count * n, count * n};
    case Coll::broadcast: return {count, count, count};
    case Coll::sendrecv: return {count, count, count};
  }
  return {};
}

long long round_size(long long bytes, int nranks, std::size_t elem_bytes) {
  TB_REQUIRE(nranks > 0 && elem_bytes > 0, "round_size: ranks and element size must be positive");
  const long long unit = (long long)nranks * (long long)elem_bytes;
  return bytes < 0 ? 0 : bytes / unit * unit;
}

std::size_t count_for_size(Coll c, long long bytes, int nranks, std::size_t elem_bytes) {
  const long long rounded = round_size(bytes, nranks, elem_bytes);
  const long long per = (long long)elem_bytes * (coll_info(c).per_peer_count ? nranks : 1);
  return std::size_t(rounded / per);
}

long long size_for_count(Coll c, std::size_t count, int nranks, std::size_t elem_bytes) {
  return (long long)count * (long long)elem_bytes * (coll_info(c).per_peer_count ? nranks : 1);
}

double bus_factor(Coll c, int nranks) {
  TB_REQUIRE(nranks > 0, "bus_factor: the number of ranks must be positive");
  const double n = nranks;
  switch (c) {
    case Coll::all_reduce: return 2.0 * (n - 1) / n;
    case Coll::all_gather:
    case Coll::reduce_scatter:
    case Coll::alltoall: return (n - 1) / n;
    case Coll::broadcast:
    case Coll::sendrecv: return 1.0;
  }
  return 1.0;
}

Bandwidth bandwidth(Coll c, long long size_bytes, double seconds, int nranks) {
  TB_REQUIRE(seconds > 0, "bandwidth: the time must be positive");
  const double algbw = double(size_bytes) / seconds / 1e9;
  return {algbw, algbw * bus_factor(c, nranks)};
}

}  // namespace tb::micro
