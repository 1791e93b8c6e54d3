// bench/loop.cpp: warmup, held batches of timed iterations, per-iteration events, max over devices.
#include "bench/loop.h"

#include <algorithm>
#include <memory>

#include "bench/hold.h"
#include "core/error.h"

namespace tb::bench {
namespace {

constexpr int kBatch = 64;  // timed iterations queued behind one hold (keeps the launch queue short)

struct Events {
  std::vector<cudaEvent_t> start, stop;
  Events(int n) : start(n), stop(n) {
    for (int i = 0; i < n; ++i) {
      TB_CHECK(cudaEventCreate(&start[i]));
      TB_CHECK(cudaEventCreate(&stop[i]));
    }
  }
  ~Events() {
    for (auto e : start) cudaEventDestroy(e);
    for (auto e : stop) cudaEventDestroy(e);
  }
};

// An L2-sized scratch buffer per device, overwritten before each timed iteration when asked.
struct Flusher {
  std::vector<void*> buf;
  std::vector<size_t> bytes;
  Flusher(std::span<const int> devices, bool on) : buf(devices.size(), nullptr), bytes(devices.size(), 0) {
    if (!on) return;
    for (size_t d = 0; d < devices.size(); ++d) {
      TB_CHECK(cudaSetDevice(devices[d]));
      int l2 = 0;
      TB_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, devices[d]));
      bytes[d] = size_t(std::max(l2, 1 << 20)) * 2;
      TB_CHECK(cudaMalloc(&buf[d], bytes[d]));
    }
  }
  ~Flusher() {
    for (auto b : buf) if (b) cudaFree(b);
  }
  void flush(size_t d, cudaStream_t s, int iter) {
    if (buf[d]) TB_CHECK(cudaMemsetAsync(buf[d], iter & 0xff, bytes[d], s));
  }
};

void sync_all(std::span<const int> devices, std::span<const cudaStream_t> streams) {
  for (size_t d = 0; d < devices.size(); ++d) {
    TB_CHECK(cudaSetDevice(devices[d]));
    TB_CHECK(cudaStreamSynchronize(streams[d]));
  }
}

}  // namespace

Timing time_streams(const LoopSpec& spec, std::span<const int> devices, std::span<const cudaStream_t> streams,
                    const std::function<void(int)>& body) {
  TB_REQUIRE(!devices.empty() && devices.size() == streams.size(), "timing loop: one stream per device");
  TB_REQUIRE(spec.iters > 0 && spec.warmup >= 0, "timing loop: iterations must be > 0 and warmup >= 0");
  const size_t nd = devices.size();

  // Warmup: at least spec.warmup iterations and spec.min_warmup_ms of device time.
  {
    std::vector<Events> ev;
    ev.reserve(nd);
    for (size_t d = 0; d < nd; ++d) {
      TB_CHECK(cudaSetDevice(devices[d]));
      ev.emplace_back(1);
      TB_CHECK(cudaEventRecord(ev[d].start[0], streams[d]));
    }
    int done = 0;
    float elapsed = 0;
    while (done < spec.warmup || (spec.min_warmup_ms > 0 && elapsed < spec.min_warmup_ms && done < 100000)) {
      body(-1 - done);  // negative iteration numbers: warmup
      ++done;
      if (done >= spec.warmup && spec.min_warmup_ms > 0) {
        TB_CHECK(cudaSetDevice(devices[0]));
        TB_CHECK(cudaEventRecord(ev[0].stop[0], streams[0]));
        TB_CHECK(cudaEventSynchronize(ev[0].stop[0]));
        TB_CHECK(cudaEventElapsedTime(&elapsed, ev[0].start[0], ev[0].stop[0]));
      }
    }
    sync_all(devices, streams);
  }

  Flusher flusher(devices, spec.flush_l2);
  HostFlag flag;
  Timing t;
  t.ms.reserve(spec.iters);
  Telemetry* tel = spec.telemetry && spec.telemetry->available() ? spec.telemetry : nullptr;
  if (tel) t.telemetry_from = tel->mark();
  for (int first = 0; first < spec.iters; first += kBatch) {
    const int n = std::min(kBatch, spec.iters - first);
    std::vector<std::unique_ptr<Events>> ev;
    for (size_t d = 0; d < nd; ++d) {
      TB_CHECK(cudaSetDevice(devices[d]));
      ev.push_back(std::make_unique<Events>(n));
      if (spec.hold) flag.hold(streams[d]);
    }
    try {
      for (int i = 0; i < n; ++i) {
        for (size_t d = 0; d < nd; ++d) {
          TB_CHECK(cudaSetDevice(devices[d]));
          flusher.flush(d, streams[d], first + i);
          TB_CHECK(cudaEventRecord(ev[d]->start[i], streams[d]));
        }
        body(first + i);
        for (size_t d = 0; d < nd; ++d) {
          TB_CHECK(cudaSetDevice(devices[d]));
          TB_CHECK(cudaEventRecord(ev[d]->stop[i], streams[d]));
        }
      }
    } catch (...) {
      // Let the held streams go and drain them before the flag and events are freed.
      if (spec.hold) flag.release();
      for (size_t d = 0; d < nd; ++d) {
        cudaSetDevice(devices[d]);
        cudaStreamSynchronize(streams[d]);
      }
      throw;
    }
    if (spec.hold) flag.release();
    sync_all(devices, streams);
    for (int i = 0; i < n; ++i) {
      double worst = 0;
      for (size_t d = 0; d < nd; ++d) {
        float ms = 0;
        TB_CHECK(cudaEventElapsedTime(&ms, ev[d]->start[i], ev[d]->stop[i]));
        worst = std::max(worst, double(ms));
      }
      t.ms.push_back(worst);
    }
  }
  if (tel) {
    t.telemetry_to = tel->mark();
    t.marked = true;
  }
  return t;
}

Timing time_stream(const LoopSpec& spec, int device, cudaStream_t stream, const std::function<void(int)>& body) {
  const int devices[] = {device};
  const cudaStream_t streams[] = {stream};
  return time_streams(spec, devices, streams, body);
}

double median_ms(int device, cudaStream_t stream, const std::function<void()>& body, int warmup, int iters) {
  LoopSpec spec;
  spec.warmup = warmup, spec.iters = iters;
  return time_stream(spec, device, stream, [&](int) { body(); }).summary().median;
}

}  // namespace tb::bench
