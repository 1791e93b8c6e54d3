// micro/nccl.cpp: the nccl suite. One process drives every selected GPU through LocalComms (nccl-tests'
// single-process `-g N` mode) and sweeps collective x dtype x size with out-of-place buffers:
//   1. checked run (spec.verify): fill send buffers with the pattern, receive buffers with a sentinel, run
//      the collective once, count wrong elements on the device (micro/nccl_data.h); wrong -> error record;
//   2. timing: bench::time_streams (the one timing loop) with the collective enqueued on every GPU in
//      one NCCL group; an iteration's time is the slowest GPU's.
// Record per case: bench "micro.nccl.<op>", case "<dtype>/<size>", world = ranks, data {op, dtype,
// reduce_op (reductions), bytes (nccl-tests size), count, time_us {median, p10, ...}, algbw_gbps,
// busbw_gbps (from the median time; formulas in micro/collectives.h), verified, telemetry [per GPU]}.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/loop.h"
#include "comm/nccl.h"
#include "core/error.h"
#include "core/stats.h"
#include "micro/case.h"
#include "micro/collectives.h"
#include "micro/nccl_data.h"
#include "micro/suite.h"

namespace tb::micro {
namespace {

constexpr long long kMemSlack = 512LL << 20;  // per GPU, beyond send + recv: NCCL's lazy buffers, verify scratch

std::vector<long long> default_sizes(bool quick) {
  if (quick) return {64LL << 20, 256LL << 20, 1LL << 30};
  std::vector<long long> sizes = {8, 1LL << 10, 32LL << 10};
  for (long long s = 1LL << 20; s <= 4LL << 30; s *= 2) sizes.push_back(s);
  return sizes;
}

// Send and receive buffers of every rank, freed (device by device) when the case ends.
struct Buffers {
  std::vector<int> devices;
  std::vector<void*> send, recv;
  Buffers(std::span<const int> devs, std::size_t send_bytes, std::size_t recv_bytes)
      : devices(devs.begin(), devs.end()), send(devs.size(), nullptr), recv(devs.size(), nullptr) {
    for (std::size_t r = 0; r < devices.size(); ++r) {
      TB_CHECK(cudaSetDevice(devices[r]));
      alloc(&send[r], send_bytes);
      alloc(&recv[r], recv_bytes);
    }
  }
  ~Buffers() {
    for (std::size_t r = 0; r < devices.size(); ++r) {
      if (cudaSetDevice(devices[r]) != cudaSuccess) continue;
      if (send[r]) cudaFree(send[r]);
      if (recv[r]) cudaFree(recv[r]);
    }
  }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;

 private:
  void alloc(void** p, std::size_t bytes) {
    const cudaError_t e = cudaMalloc(p, std::max<std::size_t>(bytes, 1));
    if (e != cudaSuccess) {
      *p = nullptr;
      cudaGetLastError();  // an allocation failure must not resurface at the next launch check
      TB_CHECK(e);
    }
  }
};

std::string format_time(double us) {
  return us < 1000 ? fmt::format("{:.1f} us", us) : fmt::format("{:.2f} ms", us / 1000);
}

// The case's size as named in records and lines: the rounded size (the requested one if that rounds to 0).
std::string size_text(long long requested, int nranks, DType t) {
  const long long size = round_size(requested, nranks, dtype_size(t));
  return format_bytes(size > 0 ? size : requested);
}

std::string line_head(Coll op, DType t, std::string_view size) {
  return fmt::format("nccl  {:<14} {:<4} {:>8}  ", coll_name(op), dtype_name(t), size);
}

// One op x dtype x size, run inside micro::run_case (telemetry marks, errors -> records, fatal rethrown):
// fills r (ok, skipped, or error kind "verify") and returns the human line.
std::string measure(Context& ctx, comm::LocalComms& comms, Coll op, DType dtype, ReduceOp rop, long long requested,
                    const bench::LoopSpec& loop, Record& r) {
  const int n = comms.size();
  const std::size_t elem = dtype_size(dtype);
  const long long size = round_size(requested, n, elem);
  const std::string head = line_head(op, dtype, size_text(requested, n, dtype));
  auto skip = [&](std::string reason) {
    r.status = Status::skipped;
    r.reason = std::move(reason);
    return head + "skipped: " + r.reason;
  };
  if (size == 0)
    return skip(fmt::format("{} bytes round down to 0 for {} ranks of {}-byte elements (sizes are multiples of "
                            "ranks x element size)",
                            requested, n, elem));
  check_combination(op, dtype, rop);
  const CollCase c{op, dtype, rop, n, count_for_size(op, size, n, elem), 0};
  const CollCounts counts = c.counts();
  r.data["bytes"] = size;
  r.data["count"] = c.count;
  const std::size_t send_bytes = counts.send_count * elem, recv_bytes = counts.recv_count * elem;

  for (int rank = 0; rank < n; ++rank) {
    std::size_t free_b = 0, total_b = 0;
    TB_CHECK(cudaSetDevice(comms.device(rank)));
    TB_CHECK(cudaMemGetInfo(&free_b, &total_b));
    if ((long long)(send_bytes + recv_bytes) + kMemSlack > (long long)free_b)
      return skip(fmt::format("needs {:.2f} GiB (send + receive buffers) on each GPU; GPU {} has {:.2f} GiB free",
                              double(send_bytes + recv_bytes) / (1 << 30), comms.device(rank),
                              double(free_b) / (1 << 30)));
  }
  Buffers buf(comms.devices(), send_bytes, recv_bytes);

  if (ctx.spec.verify) {
    for (int rank = 0; rank < n; ++rank) {
      TB_CHECK(cudaSetDevice(comms.device(rank)));
      fill_send(c, rank, buf.send[rank], comms.stream(rank));
      fill_sentinel(c, buf.recv[rank], comms.stream(rank));
    }
    enqueue(comms, c, buf.send, buf.recv);
    comms.synchronize();
    std::uint64_t wrong = 0;
    int bad_rank = -1;
    std::int64_t bad_index = -1;
    for (int rank = 0; rank < n; ++rank) {
      TB_CHECK(cudaSetDevice(comms.device(rank)));
      const Mismatches m = verify_recv(c, rank, buf.recv[rank], comms.stream(rank));
      if (m.count && bad_rank < 0) {
        bad_rank = rank;
        bad_index = m.first;
      }
      wrong += m.count;
    }
    if (wrong) {
      r.status = Status::error;
      r.error_kind = "verify";
      r.error_msg = fmt::format(
          "{} wrong elements in the receive buffers (first: rank {} (GPU {}) element {}): NCCL returned wrong "
          "data; rerun with NCCL_DEBUG=WARN, pin NCCL_ALGO / NCCL_PROTO to isolate it, and check the GPUs' health",
          wrong, bad_rank, comms.device(bad_rank), bad_index);
      r.data["mismatches"] = wrong;
      r.data["first_bad_rank"] = bad_rank;
      r.data["first_bad_index"] = bad_index;
      return head + "ERROR verify: " + r.error_msg;
    }
  }

  const bench::Timing t = bench::time_streams(loop, comms.devices(), comms.streams(),
                                              [&](int) { enqueue(comms, c, buf.send, buf.recv); });
  note_timing(ctx, t);
  std::vector<double> us(t.ms.size());
  std::transform(t.ms.begin(), t.ms.end(), us.begin(), [](double ms) { return ms * 1e3; });
  const Summary s = summarize(us);
  const Bandwidth bw = bandwidth(op, size, s.median * 1e-6, n);
  r.data["time_us"] = to_json(s);
  r.data["algbw_gbps"] = bw.algbw_gbps;
  r.data["busbw_gbps"] = bw.busbw_gbps;
  r.data["verified"] = ctx.spec.verify;
  return head + fmt::format(" time {:>9}  algbw {:6.1f} GB/s  busbw {:6.1f} GB/s  {}", format_time(s.median),
                            bw.algbw_gbps, bw.busbw_gbps, ctx.spec.verify ? "ok" : "ok (not verified)");
}

}  // namespace

void run_nccl(Context& ctx) {
  const Spec& spec = ctx.spec;
  // Names first: a typo is a usage error on any machine.
  std::vector<Coll> ops;
  if (spec.ops.empty())
    for (const auto& c : collectives()) ops.push_back(c.coll);
  for (const auto& name : spec.ops) ops.push_back(parse_coll(name));
  std::vector<DType> dtypes;
  for (const auto& name : spec.dtypes) dtypes.push_back(parse_coll_dtype(name));
  if (dtypes.empty()) dtypes.push_back(DType::f32);
  const ReduceOp rop = parse_reduce_op(spec.reduce_op);
  const std::vector<long long> sizes = spec.sizes.empty() ? default_sizes(spec.quick) : parse_sizes(spec.sizes);

  const std::vector<int> devices = resolve_devices(spec);
  auto for_each_op = [&](auto&& add) {
    for (Coll op : ops) add(fmt::format("micro.nccl.{}", coll_name(op)), line_head(op, dtypes[0], "-"));
  };
  if (devices.size() < 2) {
    const std::string reason = fmt::format("needs 2 or more GPUs; {} {}", devices.size(),
                                           spec.devices.empty() ? "visible" : "selected");
    for_each_op([&](std::string bench, std::string head) {
      Record r = Record::skipped(std::move(bench), std::string(dtype_name(dtypes[0])), reason);
      r.world = std::max<int>(1, int(devices.size()));
      ctx.out.add(std::move(r), head + "skipped: " + reason);
    });
    return;
  }

  std::unique_ptr<comm::LocalComms> comms;
  try {
    comms = std::make_unique<comm::LocalComms>(devices);
  } catch (const Error& e) {
    for_each_op([&](std::string bench, std::string head) {
      Record r = Record::failed(std::move(bench), std::string(dtype_name(dtypes[0])), e);
      r.world = int(devices.size());
      ctx.out.add(std::move(r), head + fmt::format("ERROR {}: {}", kind_name(e.kind()), e.what()));
    });
    if (e.fatal()) throw;
    return;
  }

  const bench::LoopSpec loop = loop_spec(ctx, 5, 20);
  for (Coll op : ops)
    for (DType dtype : dtypes)
      for (long long size : sizes) {
        Record r;
        r.bench = fmt::format("micro.nccl.{}", coll_name(op));
        r.name = fmt::format("{}/{}", dtype_name(dtype), size_text(size, int(devices.size()), dtype));
        r.world = int(devices.size());
        r.data = {{"op", coll_name(op)}, {"dtype", dtype_name(dtype)}};
        if (coll_info(op).reduces) r.data["reduce_op"] = reduce_op_name(rop);
        run_case(ctx, std::move(r), devices,
                 [&](Record& rec) { return measure(ctx, *comms, op, dtype, rop, size, loop, rec); });
      }
}

}  // namespace tb::micro
