// micro/collectives.h: the nccl-tests table of collectives, as pure functions (no CUDA, no NCCL).
//
// "size" (bytes, what nccl-tests prints and what algbw divides) per collective, n = ranks, e = element bytes:
//   all_reduce      bytes of each rank's buffer               count = size / e
//   all_gather      total output bytes = count * n * e        count = size / (n e)   (elements each rank sends)
//   reduce_scatter  total input bytes  = count * n * e        count = size / (n e)   (elements each rank receives)
//   alltoall        bytes of each rank's buffer = count * n e count = size / (n e)   (elements to each peer)
//   broadcast       buffer bytes (root 0)                     count = size / e
//   sendrecv        bytes each rank sends (ring: r -> r+1, receives from r-1)        count = size / e
// Sizes are first rounded down to a multiple of n * e (as nccl-tests does), so every count is whole.
//
//   algbw = size / time      busbw = algbw * factor      GB/s = 1e9 bytes/s
//   factor: all_reduce 2(n-1)/n; all_gather, reduce_scatter, alltoall (n-1)/n; broadcast, sendrecv 1
// (nccl-tests doc/PERFORMANCE.md: busbw is comparable to the hardware's link bandwidth whatever n is).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "core/dtype.h"

namespace tb::micro {

enum class Coll { all_reduce, all_gather, reduce_scatter, alltoall, broadcast, sendrecv };
enum class ReduceOp { sum, prod, max, min, avg };

struct CollInfo {
  Coll coll;
  std::string_view name;
  bool reduces;             // takes a reduce op (all_reduce, reduce_scatter)
  bool per_peer_count;      // count = size / (n e) rather than size / e
};
std::span<const CollInfo> collectives();  // in the order above
const CollInfo& coll_info(Coll c);
std::string_view coll_name(Coll c);

// Parsers: unknown names raise tb::Error{config} listing the valid ones (with a "did you mean").
Coll parse_coll(std::string_view name);
ReduceOp parse_reduce_op(std::string_view name);           // sum prod max min avg
std::string_view reduce_op_name(ReduceOp op);
DType parse_coll_dtype(std::string_view name);             // f32 bf16 f16 f64 i32 (and their aliases)
// Config error for combinations trainbench does not run: avg on i32 (NCCL's integer avg truncates and
// this suite cannot check it exactly).
void check_combination(Coll c, DType t, ReduceOp op);

// Element counts of one case. count is NCCL's count argument (nccl-tests' "count" column).
struct CollCounts {
  std::size_t count = 0;       // per-rank count passed to NCCL
  std::size_t send_count = 0;  // elements in each rank's send buffer
  std::size_t recv_count = 0;  // elements in each rank's receive buffer
};
CollCounts coll_counts(Coll c, std::size_t count, int nranks);

long long round_size(long long bytes, int nranks, std::size_t elem_bytes);  // down to a multiple of n * e
std::size_t count_for_size(Coll c, long long bytes, int nranks, std::size_t elem_bytes);  // rounds first
long long size_for_count(Coll c, std::size_t count, int nranks, std::size_t elem_bytes);  // nccl-tests size

double bus_factor(Coll c, int nranks);
struct Bandwidth {
  double algbw_gbps = 0, busbw_gbps = 0;
};
Bandwidth bandwidth(Coll c, long long size_bytes, double seconds, int nranks);

}  // namespace tb::micro
