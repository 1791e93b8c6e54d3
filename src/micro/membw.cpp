// micro/membw.cpp: device memory bandwidth per GPU. GB/s = bytes read + written per call / median time
// (copy counts 2 bytes per byte copied, as nvbandwidth and the datasheet comparisons in check do).
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "core/error.h"
#include "micro/case.h"
#include "micro/membw_kernels.h"
#include "recipe/system.h"

namespace tb::micro {
namespace {

struct KernelName {
  const char* name;
  MemKernel kernel;
};
constexpr KernelName kKernels[] = {
    {"copy", MemKernel::copy}, {"read", MemKernel::read}, {"write", MemKernel::write}, {"triad", MemKernel::triad}};

MemKernel kernel_by_name(const std::string& name) {
  for (const auto& k : kKernels)
    if (name == k.name) return k.kernel;
  raise_config(fmt::format("membw: unknown kernel '{}': choose from copy, read, write, triad", name));
}

struct DeviceBuffers {
  float* p[3] = {};
  ~DeviceBuffers() {
    for (auto* q : p) if (q) cudaFree(q);
  }
};

}  // namespace

void run_membw(Context& ctx) {
  const auto devices = resolve_devices(ctx.spec);
  std::vector<std::string> kernels = ctx.spec.ops;
  if (kernels.empty()) kernels = ctx.spec.quick ? std::vector<std::string>{"copy"}
                                                : std::vector<std::string>{"copy", "read", "write", "triad"};
  for (const auto& k : kernels) kernel_by_name(k);  // validate before touching a GPU
  std::vector<std::string> size_specs = ctx.spec.sizes;
  if (size_specs.empty()) size_specs = {"1G"};
  const auto sizes = parse_sizes(size_specs);

  for (int dev : devices) {
    TB_CHECK(cudaSetDevice(dev));
    int sms = 0;
    TB_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    cudaStream_t stream;
    TB_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (long long bytes : sizes) {
      const size_t n = size_t(bytes) / sizeof(float) / 4 * 4;
      DeviceBuffers buf;
      for (const auto& kname : kernels) {
        Record rec;
        rec.bench = "micro.membw";
        rec.name = fmt::format("{}/{}", kname, format_bytes(bytes));
        rec.device = dev;
        run_case(ctx, rec, {dev}, [&](Record& r) {
          TB_CHECK(cudaSetDevice(dev));
          for (auto*& q : buf.p)
            if (!q) {
              TB_CHECK(cudaMalloc(reinterpret_cast<void**>(&q), n * sizeof(float)));
              fill_membw(q, n, 1.0f, stream);
            }
          const MemKernel k = kernel_by_name(kname);
          const auto timing = bench::time_stream(loop_spec(ctx, 5, 30, 50), dev, stream, [&](int) {
            launch_membw(k, buf.p[0], buf.p[1], buf.p[2], n, sms, stream);
          });
          note_timing(ctx, timing);
          const auto t = timing.summary();
          const double moved = membw_bytes(k, n);
          const double tbps = moved / (t.median * 1e-3) / 1e12;
          r.data = {{"kernel", kname},
                    {"bytes_per_array", n * sizeof(float)},
                    {"bytes_moved", moved},
                    {"time_us", to_json(scaled(t, 1e3))},
                    {"tbps", tbps}};
          std::string peak;
          if (ctx.system && ctx.system->hbm_tbps > 0) {
            r.data["datasheet_fraction"] = tbps / ctx.system->hbm_tbps;
            peak = fmt::format("  {:5.1f}% of {:.2f} TB/s", 100 * tbps / ctx.system->hbm_tbps, ctx.system->hbm_tbps);
          }
          return fmt::format("{:<22} {:<28} gpu{}  {:7.3f} TB/s{}", r.bench, r.name, dev, tbps, peak);
        });
      }
    }
    TB_CHECK(cudaStreamDestroy(stream));
  }
}

}  // namespace tb::micro
