// Tests project/collective: the ring formulas (nccl-tests' bus bandwidth makes them exact), latency per step,
// the hierarchical two-level model, and the system files' [network].
#include "project/collective.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "recipe/system.h"

using tb::project::Coll;
using tb::project::group_time_s;
using tb::project::Network;
using tb::project::ring_time_s;

namespace {
Network net() {
  Network n;
  n.domain_gpus = 8;
  n.nvlink = {300, 200, 250, 400, 2};  // all_reduce, all_gather, reduce_scatter, send_recv GB/s; 2 us per step
  n.scaleout = {40, 40, 40, 40, 5};
  return n;
}
constexpr double GB = 1e9;
}  // namespace

TEST(Collective, RingAllReduceIsTwoNMinusOneOverNPlusLatency) {
  // 8 GB over 4 ranks at 100 GB/s bus bandwidth: 2·3/4·8/100 s, plus 2·3 steps of 10 us
  EXPECT_NEAR(ring_time_s(Coll::all_reduce, 8 * GB, 4, 100, 10), 2 * 0.75 * 0.08 + 6 * 10e-6, 1e-12);
  // nccl-tests: busbw = algbw · 2(n−1)/n, so time = bytes / algbw exactly (no latency)
  const double t = ring_time_s(Coll::all_reduce, 1 * GB, 8, 328.7, 0);
  const double algbw = 1 * GB / t / GB;
  EXPECT_NEAR(algbw * 2 * 7 / 8.0, 328.7, 1e-9);
}

TEST(Collective, AllGatherAndReduceScatterAreNMinusOneOverN) {
  EXPECT_NEAR(ring_time_s(Coll::all_gather, 8 * GB, 8, 200, 0), 7.0 / 8 * 8 / 200, 1e-12);
  EXPECT_NEAR(ring_time_s(Coll::reduce_scatter, 8 * GB, 2, 100, 3), 0.5 * 8 / 100 + 3e-6, 1e-12);
  EXPECT_NEAR(ring_time_s(Coll::send_recv, 1 * GB, 2, 50, 4), 1.0 / 50 + 4e-6, 1e-12);
  EXPECT_EQ(ring_time_s(Coll::all_gather, 1 * GB, 1, 100, 5), 0);  // one rank: nothing to move
  EXPECT_EQ(ring_time_s(Coll::all_reduce, 1 * GB, 1, 100, 5), 0);
}

TEST(Collective, OneDomainUsesTheNvlinkBandwidthOfTheCollective) {
  const Network n = net();
  EXPECT_NEAR(group_time_s(Coll::all_gather, 4 * GB, 4, 4, n), ring_time_s(Coll::all_gather, 4 * GB, 4, 200, 2), 1e-15);
  EXPECT_NEAR(group_time_s(Coll::reduce_scatter, 4 * GB, 4, 4, n), ring_time_s(Coll::reduce_scatter, 4 * GB, 4, 250, 2),
              1e-15);
  EXPECT_NEAR(group_time_s(Coll::all_reduce, 4 * GB, 8, 8, n), ring_time_s(Coll::all_reduce, 4 * GB, 8, 300, 2), 1e-15);
  EXPECT_NEAR(group_time_s(Coll::send_recv, 1 * GB, 2, 2, n), 1.0 / 400 + 2e-6, 1e-15);
}

TEST(Collective, HierarchicalIsIntraDomainThenInterDomainOnAShare) {
  const Network n = net();
  const double S = 16 * GB;
  // 32 ranks, 8 per domain, 4 domains: (7/8)·S/B_nvl + 7·α_nvl, then (3/4)·(S/8)/B_net + 3·α_net
  const double rs = 7.0 / 8 * 16 / 250 + 7 * 2e-6 + 3.0 / 4 * 2 / 40 + 3 * 5e-6;
  EXPECT_NEAR(group_time_s(Coll::reduce_scatter, S, 32, 8, n), rs, 1e-12);
  const double ag = 7.0 / 8 * 16 / 200 + 7 * 2e-6 + 3.0 / 4 * 2 / 40 + 3 * 5e-6;
  EXPECT_NEAR(group_time_s(Coll::all_gather, S, 32, 8, n), ag, 1e-12);
  EXPECT_NEAR(group_time_s(Coll::all_reduce, S, 32, 8, n), rs + ag, 1e-12);  // reduce-scatter + all-gather
  // one rank per domain (a data-parallel group with tp = 8): only the network, on the whole buffer
  EXPECT_NEAR(group_time_s(Coll::reduce_scatter, S, 4, 1, n), 3.0 / 4 * 16 / 40 + 3 * 5e-6, 1e-12);
  // the network term shrinks with more local ranks (each NIC carries 1/local), so spreading wins
  EXPECT_LT(group_time_s(Coll::all_gather, S, 64, 8, n), group_time_s(Coll::all_gather, S, 64, 1, n));
  // crossing domains is a network hop for send/recv
  EXPECT_NEAR(group_time_s(Coll::send_recv, 1 * GB, 2, 1, n), 1.0 / 40 + 5e-6, 1e-12);
  EXPECT_THROW(group_time_s(Coll::all_gather, S, 12, 8, n), tb::Error);  // 12 is not a multiple of 8
}

// All-to-all: every rank sends (n−1)/n of its buffer at once, one latency; across domains the own domain's part over
// NVLink and the rest through the NIC at the same time.
TEST(Collective, AllToAllInsideADomainAndAcross) {
  Network n = net();
  n.nvlink.all_to_all_gbps = 320, n.scaleout.all_to_all_gbps = 40;
  EXPECT_NEAR(ring_time_s(Coll::all_to_all, 8 * GB, 8, 320, 2), 7.0 / 8 * 8 / 320 + 2e-6, 1e-12);
  EXPECT_NEAR(group_time_s(Coll::all_to_all, 8 * GB, 8, 8, n), 7.0 / 8 * 8 / 320 + 2e-6, 1e-12);
  // 8 ranks, 2 per domain (an ep group 4 apart): 1/8 over NVLink, 6/8 through the NIC, which takes longer
  EXPECT_NEAR(group_time_s(Coll::all_to_all, 8 * GB, 8, 2, n), 6.0 / 8 * 8 / 40 + 5e-6, 1e-12);
  // one rank per domain: all of the others' share through the NIC
  EXPECT_NEAR(group_time_s(Coll::all_to_all, 8 * GB, 4, 1, n), 3.0 / 4 * 8 / 40 + 5e-6, 1e-12);
  EXPECT_EQ(group_time_s(Coll::all_to_all, 8 * GB, 1, 1, n), 0);
  EXPECT_DOUBLE_EQ(n.scaled(0.5, 1).nvlink.all_to_all_gbps, 160);
}

TEST(Collective, BandwidthSensitivityScalesOneLevel) {
  const Network n = net();
  const Network slow = n.scaled(1.0, 0.8);
  EXPECT_DOUBLE_EQ(slow.scaleout.reduce_scatter_gbps, 32);
  EXPECT_DOUBLE_EQ(slow.nvlink.reduce_scatter_gbps, 250);
  const double t = group_time_s(Coll::reduce_scatter, 8 * GB, 16, 8, n),
               ts = group_time_s(Coll::reduce_scatter, 8 * GB, 16, 8, slow);
  EXPECT_GT(ts, t);
}

TEST(Collective, ShippedSystemsDescribeTheirNetworks) {
  const auto dir = tb::recipe::find_references_dir(std::nullopt) / "systems";
  const auto systems = tb::recipe::load_systems(dir);
  const auto* h100 = tb::recipe::match_system(systems, "NVIDIA H100 80GB HBM3");
  ASSERT_NE(h100, nullptr);
  const Network n = tb::project::network_of(*h100);
  EXPECT_EQ(n.domain_gpus, 8);
  EXPECT_DOUBLE_EQ(n.scaleout.all_gather_gbps, 50 * 0.9);  // 400 Gb/s per GPU at 90%
  EXPECT_DOUBLE_EQ(n.nvlink.all_reduce_gbps, 328.7);       // measured on 2 x H200 (bench/RESULTS.md)
  EXPECT_DOUBLE_EQ(n.nvlink.all_to_all_gbps, n.nvlink.all_gather_gbps);  // none in the file: the all-gather's
  EXPECT_GT(h100->compute.gemm_bf16_tflops, 0);
  EXPECT_TRUE(h100->projection.present);
  tb::recipe::SystemRef bare = *h100;
  bare.network.present = false;
  EXPECT_THROW(tb::project::network_of(bare), tb::Error);
}
