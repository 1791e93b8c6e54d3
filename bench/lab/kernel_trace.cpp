// bench/lab/kernel_trace.cpp: a CUDA injection library (load it with CUDA_INJECTION64_PATH=.../libkernel_trace.so)
// that records, through CUPTI's activity API, the GPU start and end of every kernel of the process (kernels of a
// replayed CUDA graph one by one) and every cudaGraphLaunch, and at exit writes them as CSV to $KERNEL_TRACE_OUT
// (default kernel_trace.csv):
//   kind,start_ns,end_ns,correlation,name    kind = kernel | graph_launch; a graph's kernels carry its launch's
//                                            correlation; name: the kernel's (mangled) name, empty for a launch
// bench/kernel_busy.py then sums each replay's kernels against the step: the training engine's criterion "step time with graph
// replay within 1% of the sum of kernel times", measured on the replayed steps themselves (the op profile's eager step
// runs at another clock under the power limit). A lab, not part of trainbench; built where the CUPTI headers are
// (scripts/setup.sh installs the nvidia-cuda-cupti wheel into .deps/cupti). Each kernel costs the tracer a record;
// on the 8B L8 step that cost no measurable step time (H200, 2026-12-01).
#include <cupti.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Record {
  bool kernel;  // else a cudaGraphLaunch
  std::uint64_t start, end;
  std::uint32_t correlation;
  std::string name;
};

std::mutex g_mutex;
std::vector<Record> g_records;
constexpr std::size_t kBufferBytes = 8u << 20;
constexpr std::size_t kAlign = 8;

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  std::fprintf(stderr, "kernel_trace: %s failed: %s\n", what, msg ? msg : "?");
}

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
  *size = kBufferBytes;
  *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(kAlign, kBufferBytes));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, std::uint32_t, std::uint8_t* buffer, std::size_t, std::size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::vector<Record> got;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      got.push_back({true, k->start, k->end, k->correlationId, k->name ? k->name : "?"});  // name: the buffer's
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
      const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(rec);
      if (a->cbid == CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000 ||
          a->cbid == CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000)
        got.push_back({false, a->start, a->end, a->correlationId, ""});
    }
  }
  std::size_t dropped = 0;
  cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped);
  if (dropped) std::fprintf(stderr, "kernel_trace: %zu records dropped\n", dropped);
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_records.insert(g_records.end(), got.begin(), got.end());
}

void write_at_exit() {
  check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  const char* path = std::getenv("KERNEL_TRACE_OUT");
  if (!path) path = "kernel_trace.csv";
  std::FILE* f = std::fopen(path, "w");
  if (!f) {
    std::fprintf(stderr, "kernel_trace: cannot write %s\n", path);
    return;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(f, "kind,start_ns,end_ns,correlation,name\n");
  for (const Record& r : g_records) {
    std::string name;  // quoted as CSV quotes (a demangled name may hold commas)
    for (char c : r.name) name += c == '"' ? std::string("\"\"") : std::string(1, c);
    std::fprintf(f, "%s,%llu,%llu,%u,\"%s\"\n", r.kernel ? "kernel" : "graph_launch",
                 static_cast<unsigned long long>(r.start), static_cast<unsigned long long>(r.end), r.correlation,
                 name.c_str());
  }
  std::fclose(f);
  std::fprintf(stderr, "kernel_trace: %zu records in %s\n", g_records.size(), path);
}

}  // namespace

// Called by the CUDA driver when it initialises (CUDA_INJECTION64_PATH); 1 = success.
extern "C" int InitializeInjection() {
  std::uint32_t version = 0;
  cuptiGetVersion(&version);
  std::fprintf(stderr, "kernel_trace: CUPTI API version %u\n", version);
  check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernel records");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME), "enable runtime API records");
  std::atexit(write_at_exit);
  return 1;
}
