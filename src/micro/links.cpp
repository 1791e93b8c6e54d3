// micro/links.cpp: copy-engine bandwidth over the links of a node.
//   h2d / d2h: cudaMemcpyAsync between pinned host memory and each GPU (PCIe or C2C), GB/s = bytes / time
//   peer:      cudaMemcpyPeerAsync from GPU i to GPU j for every ordered pair (NVLink or PCIe), the matrix
// GB/s = 1e9 bytes/s of the median time; unidirectional, one copy at a time.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "core/error.h"
#include "micro/case.h"

namespace tb::micro {
namespace {

struct Pinned {
  void* p = nullptr;
  explicit Pinned(size_t bytes) { TB_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocPortable)); }
  ~Pinned() { cudaFreeHost(p); }
};
struct DeviceMem {
  void* p = nullptr;
  DeviceMem(int dev, size_t bytes) {
    TB_CHECK(cudaSetDevice(dev));
    TB_CHECK(cudaMalloc(&p, bytes));
    TB_CHECK(cudaMemset(p, 0x3c, bytes));
  }
  ~DeviceMem() { cudaFree(p); }
};

std::string measure_copy(Record& r, Context& ctx, int timing_dev, void* dst, const void* src, int dst_dev,
                         int src_dev, size_t bytes, bool peer) {
  TB_CHECK(cudaSetDevice(timing_dev));
  cudaStream_t stream;
  TB_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const auto timing = bench::time_stream(loop_spec(ctx, 3, 20), timing_dev, stream, [&](int) {
    if (peer) TB_CHECK(cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, bytes, stream));
    else TB_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
  });
  note_timing(ctx, timing);
  const auto t = timing.summary();
  TB_CHECK(cudaStreamDestroy(stream));
  const double gbps = double(bytes) / (t.median * 1e-3) / 1e9;
  r.data["bytes"] = bytes;
  r.data["time_us"] = to_json(scaled(t, 1e3));
  r.data["gbps"] = gbps;
  return fmt::format("{:<22} {:<28} {:8.1f} GB/s", r.bench, r.name, gbps);
}

}  // namespace

void run_links(Context& ctx) {
  const auto devices = resolve_devices(ctx.spec);
  std::vector<std::string> kinds = ctx.spec.ops;
  if (kinds.empty()) kinds = {"h2d", "d2h", "peer"};
  for (const auto& k : kinds)
    TB_REQUIRE(k == "h2d" || k == "d2h" || k == "peer",
               fmt::format("links: unknown direction '{}': choose from h2d, d2h, peer", k));
  std::vector<std::string> size_specs = ctx.spec.sizes;
  if (size_specs.empty()) size_specs = {"256M"};
  const auto sizes = parse_sizes(size_specs);

  for (const auto& kind : kinds) {
    for (long long ll : sizes) {
      const size_t bytes = size_t(ll);
      if (kind == "h2d" || kind == "d2h") {
        Pinned host(bytes);
        for (int dev : devices) {
          Record rec;
          rec.bench = "micro.links." + kind;
          rec.name = format_bytes(ll);
          rec.device = dev;
          run_case(ctx, rec, {dev}, [&](Record& r) {
            DeviceMem d(dev, bytes);
            const bool h2d = kind == "h2d";
            return fmt::format("{}  gpu{}", measure_copy(r, ctx, dev, h2d ? d.p : host.p, h2d ? host.p : d.p,
                                                         dev, dev, bytes, false), dev);
          });
        }
        continue;
      }
      if (devices.size() < 2) {
        ctx.out.add(Record::skipped("micro.links.peer", format_bytes(ll), "needs 2 or more GPUs"),
                    fmt::format("{:<22} {:<28} skipped: needs 2 or more GPUs", "micro.links.peer", format_bytes(ll)));
        continue;
      }
      for (int src : devices)
        for (int dst : devices) {
          if (src == dst) continue;
          Record rec;
          rec.bench = "micro.links.peer";
          rec.name = fmt::format("gpu{}->gpu{}/{}", src, dst, format_bytes(ll));
          rec.world = 2;
          run_case(ctx, rec, {src, dst}, [&](Record& r) {
            int can = 0;
            TB_CHECK(cudaDeviceCanAccessPeer(&can, src, dst));
            if (can) {
              TB_CHECK(cudaSetDevice(src));
              const auto e = cudaDeviceEnablePeerAccess(dst, 0);
              if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
              else TB_CHECK(e);
            }
            DeviceMem s(src, bytes), d(dst, bytes);
            r.data["src"] = src;
            r.data["dst"] = dst;
            r.data["peer_access"] = bool(can);
            return measure_copy(r, ctx, src, d.p, s.p, dst, src, bytes, true);
          });
        }
    }
  }
}

}  // namespace tb::micro
