// collectives_test: nccl-tests size conventions, bus factors and bandwidths (micro/collectives.h).
#include "micro/collectives.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace tb::micro {
namespace {

TEST(Collectives, TableListsTheSixInOrder) {
  const char* names[] = {"all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "sendrecv"};
  ASSERT_EQ(collectives().size(), 6u);
  for (std::size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(collectives()[i].name, names[i]);
    EXPECT_EQ(parse_coll(names[i]), collectives()[i].coll);
    EXPECT_EQ(coll_name(collectives()[i].coll), names[i]);
  }
  EXPECT_TRUE(coll_info(Coll::all_reduce).reduces);
  EXPECT_TRUE(coll_info(Coll::reduce_scatter).reduces);
  EXPECT_FALSE(coll_info(Coll::all_gather).reduces);
}

// nccl-tests doc/PERFORMANCE.md: all_reduce 2(n-1)/n; all_gather, reduce_scatter, alltoall (n-1)/n; others 1.
TEST(Collectives, BusFactors) {
  struct Row {
    int n;
    double all_reduce, gather_scatter;
  };
  for (Row row : {Row{2, 1.0, 0.5}, Row{4, 1.5, 0.75}, Row{8, 1.75, 0.875}}) {
    SCOPED_TRACE(row.n);
    EXPECT_DOUBLE_EQ(bus_factor(Coll::all_reduce, row.n), row.all_reduce);
    EXPECT_DOUBLE_EQ(bus_factor(Coll::all_gather, row.n), row.gather_scatter);
    EXPECT_DOUBLE_EQ(bus_factor(Coll::reduce_scatter, row.n), row.gather_scatter);
    EXPECT_DOUBLE_EQ(bus_factor(Coll::alltoall, row.n), row.gather_scatter);
    EXPECT_DOUBLE_EQ(bus_factor(Coll::broadcast, row.n), 1.0);
    EXPECT_DOUBLE_EQ(bus_factor(Coll::sendrecv, row.n), 1.0);
  }
}

// By hand: 268435456 B / 1.1e-3 s = 244.0322 GB/s; x 2*7/8 = 427.0564 GB/s (STYLE.md's bf16/256MiB line).
TEST(Collectives, BandwidthFromSizeAndTime) {
  const Bandwidth ar = bandwidth(Coll::all_reduce, 268435456, 1.1e-3, 8);
  EXPECT_NEAR(ar.algbw_gbps, 244.0322, 1e-4);
  EXPECT_NEAR(ar.busbw_gbps, 427.0564, 1e-4);
  // 1 GiB in 6.49 ms: 165.4456 GB/s; all_gather on 4 ranks: x 3/4 = 124.0842 GB/s
  const Bandwidth ag = bandwidth(Coll::all_gather, 1LL << 30, 6.49e-3, 4);
  EXPECT_NEAR(ag.algbw_gbps, 165.4456, 1e-4);
  EXPECT_NEAR(ag.busbw_gbps, 124.0842, 1e-4);
  const Bandwidth sr = bandwidth(Coll::sendrecv, 1LL << 30, 6.49e-3, 2);
  EXPECT_DOUBLE_EQ(sr.busbw_gbps, sr.algbw_gbps);
  EXPECT_THROW(bandwidth(Coll::all_reduce, 1, 0.0, 2), Error);
}

TEST(Collectives, SizesRoundDownToRanksTimesElement) {
  EXPECT_EQ(round_size(1000, 3, 4), 996);
  EXPECT_EQ(round_size(100, 2, 4), 96);
  EXPECT_EQ(round_size(8, 8, 4), 0);
  EXPECT_EQ(round_size(1LL << 20, 8, 2), 1LL << 20);
  EXPECT_EQ(round_size(6LL << 30, 3, 4), 6LL << 30);
  EXPECT_EQ(count_for_size(Coll::all_reduce, 1001, 2, 4), 250u);  // 1001 -> 1000 bytes -> 250 floats
}

TEST(Collectives, CountPerRankPerOp) {
  const long long mib = 1LL << 20;  // 4 ranks, f32
  EXPECT_EQ(count_for_size(Coll::all_reduce, mib, 4, 4), 262144u);
  EXPECT_EQ(count_for_size(Coll::all_gather, mib, 4, 4), 65536u);
  EXPECT_EQ(count_for_size(Coll::reduce_scatter, mib, 4, 4), 65536u);
  EXPECT_EQ(count_for_size(Coll::alltoall, mib, 4, 4), 65536u);
  EXPECT_EQ(count_for_size(Coll::broadcast, mib, 4, 4), 262144u);
  EXPECT_EQ(count_for_size(Coll::sendrecv, mib, 4, 4), 262144u);

  const CollCounts ag = coll_counts(Coll::all_gather, 65536, 4);
  EXPECT_EQ(ag.send_count, 65536u);
  EXPECT_EQ(ag.recv_count, 262144u);
  const CollCounts rs = coll_counts(Coll::reduce_scatter, 65536, 4);
  EXPECT_EQ(rs.send_count, 262144u);
  EXPECT_EQ(rs.recv_count, 65536u);
  const CollCounts a2a = coll_counts(Coll::alltoall, 65536, 4);
  EXPECT_EQ(a2a.send_count, 262144u);
  EXPECT_EQ(a2a.recv_count, 262144u);
  const CollCounts ar = coll_counts(Coll::all_reduce, 7, 4);
  EXPECT_EQ(ar.send_count, 7u);
  EXPECT_EQ(ar.recv_count, 7u);

  // size_for_count inverts count_for_size for every op (the size is the nccl-tests "size" column)
  for (const auto& c : collectives())
    EXPECT_EQ(size_for_count(c.coll, count_for_size(c.coll, mib, 4, 4), 4, 4), mib) << c.name;
}

// Runs f, expects tb::Error of kind config whose message contains every one of `parts`.
template <class F>
void expect_config_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no error raised";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::config);
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(Collectives, UnknownNamesAreConfigErrors) {
  expect_config_error([] { parse_coll("allreduce"); }, {"unknown collective 'allreduce'", "all_reduce", "sendrecv"});
  expect_config_error([] { parse_reduce_op("mean"); }, {"unknown reduce op 'mean'", "sum prod max min avg"});
  expect_config_error([] { parse_coll_dtype("f8"); }, {"unknown dtype 'f8'", "f32 bf16 f16 f64 i32"});
  expect_config_error([] { parse_coll_dtype("e4m3"); }, {"fp8", "bf16"});
  expect_config_error([] { parse_coll_dtype("tf32"); }, {"f32"});
  expect_config_error([] { check_combination(Coll::all_reduce, DType::i32, ReduceOp::avg); }, {"avg", "i32"});
}

TEST(Collectives, KnownNamesParse) {
  EXPECT_EQ(parse_coll_dtype("bf16"), DType::bf16);
  EXPECT_EQ(parse_coll_dtype("fp32"), DType::f32);
  EXPECT_EQ(parse_coll_dtype("i32"), DType::i32);
  for (const char* op : {"sum", "prod", "max", "min", "avg"}) EXPECT_EQ(reduce_op_name(parse_reduce_op(op)), op);
  EXPECT_NO_THROW(check_combination(Coll::all_gather, DType::i32, ReduceOp::avg));  // no reduction: op unused
  EXPECT_NO_THROW(check_combination(Coll::all_reduce, DType::bf16, ReduceOp::avg));
}

}  // namespace
}  // namespace tb::micro
